"""Weight surgery: the pruned model equals the gated model (1e-5) per family, also after save and load; removed
parameters are gone; grouped-query attention drops a key/value head only with its whole group."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import TEXTS, tiny_model, word_tokenizer

from interpret.heads.scoring import GatedModel
from interpret.heads.surgery import count_parameters, keep_groups, prune_heads
from interpret.inputs import encode
from interpret.reference.toy import load_toy, marker_dataset, marker_task, save_toy

REMOVED = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "phi", "phi3", "cohere"]
ZEROED = ["bert", "roberta", "distilbert", "gpt2", "opt", "gpt_neox", "modernbert", "olmo2", "gpt_bigcode"]
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])


def _compare(reference: torch.Tensor, pruned: torch.Tensor, real: torch.Tensor) -> None:
    reference, pruned, real = reference.cpu(), pruned.cpu(), real.cpu()
    if reference.dim() == 3:  # token logits: padded positions are not outputs of any example
        reference, pruned = reference[real], pruned[real]
    torch.testing.assert_close(pruned, reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", REMOVED + ZEROED)
def test_pruned_equals_gated_also_after_save_and_load(family: str, tmp_path) -> None:
    tokenizer = word_tokenizer()
    encoded = encode(tokenizer, TEXTS)
    model = tiny_model(family, attn_implementation="eager")
    gated = GatedModel.of(model, tokenizer, encoded)
    with torch.no_grad():
        reference = gated.logits(encoded, MASK)
    before = count_parameters(model)
    pruned = prune_heads(model, MASK)
    assert count_parameters(model) == before  # the input model is not changed
    real = encoded.attention_mask.bool()
    with torch.no_grad():
        _compare(reference, GatedModel.of(pruned.model, tokenizer, encoded).logits(encoded), real)
    if family in REMOVED:
        assert pruned.removed and pruned.parameters_after < pruned.parameters_before
        assert pruned.heads_per_layer == 2
    else:
        assert not pruned.removed and pruned.parameters_after == pruned.parameters_before
        assert "zeroed in place, not removed" in pruned.note
    pruned.model.save_pretrained(tmp_path)
    loaded = type(pruned.model).from_pretrained(tmp_path, attn_implementation="eager").eval().to(model.device)
    assert count_parameters(loaded) == pruned.parameters_after
    with torch.no_grad():
        _compare(reference, GatedModel.of(loaded, tokenizer, encoded).logits(encoded), real)


def test_reference_model_pruned_equals_gated_and_round_trips(tmp_path) -> None:
    model, tokenizer = marker_task()
    encoded = encode(tokenizer, list(marker_dataset(16, seed=4).texts))
    mask = torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    gated = GatedModel.of(model, tokenizer, encoded)
    with torch.no_grad():
        reference = gated.logits(encoded, mask)
    pruned = prune_heads(model, mask)
    assert pruned.removed and pruned.heads_per_layer == 2 and pruned.model.config.head_dim == 8
    assert pruned.parameters_before - pruned.parameters_after == 2 * 2 * (3 * 8 * 32 + 3 * 8 + 8 * 32)
    with torch.no_grad():
        torch.testing.assert_close(pruned.model(encoded.input_ids, encoded.attention_mask), reference, rtol=0, atol=1e-5)
    save_toy(pruned.model, tokenizer, tmp_path / "pruned")
    loaded, _ = load_toy(tmp_path / "pruned")
    with torch.no_grad():
        torch.testing.assert_close(loaded(encoded.input_ids, encoded.attention_mask), reference, rtol=0, atol=1e-5)


def test_a_key_value_head_goes_only_with_its_whole_group() -> None:
    # 4 query heads in 2 groups: {0, 1} share kv head 0, {2, 3} kv head 1
    assert keep_groups(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), 2) == [[0]]
    assert keep_groups(torch.tensor([[1.0, 0.0, 1.0, 0.0]]), 2) == [[0, 1]]
    assert keep_groups(torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]), 2) == [[0], [1]]
    model = tiny_model("llama", attn_implementation="eager")
    pruned = prune_heads(model, torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]))
    # layer 0 keeps a query head in each group: both kv heads stay, so every layer stores 2 groups of one query head
    assert pruned.kv_heads_per_layer == 2 and pruned.heads_per_layer == 2
    assert pruned.kept == ((0, 2), (0, 3))  # layer 1: group 0 is padding (its head 0, off), group 1 keeps head 3
    assert pruned.parameters_after < pruned.parameters_before


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "gpt2", "opt"])
def test_in_memory_removal_where_the_config_cannot_store_it(family: str) -> None:
    """BERT-likes infer the head count from the projection: removed in memory; GPT-2 and OPT do not: zeroed."""
    tokenizer = word_tokenizer()
    encoded = encode(tokenizer, TEXTS)
    model = tiny_model(family, attn_implementation="eager")
    with torch.no_grad():
        reference = GatedModel.of(model, tokenizer, encoded).logits(encoded, MASK)
    pruned = prune_heads(model, MASK, in_memory=True)
    if family in ("gpt2", "opt"):
        assert not pruned.removed and "zeroed in place" in pruned.note and "in memory" in pruned.note
    else:
        assert pruned.removed and "in memory only (2, 1 heads per layer)" in pruned.note
        assert pruned.kept == ((0, 1), (3,)) and pruned.parameters_after < pruned.parameters_before
    with torch.no_grad():  # layers of different widths: called directly (the collector wants equal layers)
        logits = pruned.model(input_ids=encoded.input_ids.to(pruned.model.device), attention_mask=encoded.attention_mask.to(pruned.model.device)).logits
    _compare(reference, logits, encoded.attention_mask.bool())


def test_in_memory_removal_when_the_config_refuses_the_head_count() -> None:
    # 3 heads on in a layer: BertConfig refuses hidden 32 with 3 heads outright; in memory each layer keeps its own
    model = tiny_model("bert", attn_implementation="eager")
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    zeroed = prune_heads(model, mask)
    assert not zeroed.removed and "cannot be rebuilt with 3 heads" in zeroed.note
    pruned = prune_heads(model, mask, in_memory=True)
    assert pruned.removed and pruned.kept == ((0, 1, 2), (1,))


def test_deberta_v2_computes_bert_but_cannot_hold_fewer_heads() -> None:
    """Why a pruned BERT is not written as a DeBERTa-v2 checkpoint (docs/architecture.md, "Which families store
    fewer heads on disk"): DebertaV2 reads attention_head_size from its config and, configured as below, computes
    BERT exactly, but its attention output projection is hidden × hidden, so it needs heads × head size = hidden."""
    from transformers import BertConfig, BertModel, DebertaV2Config, DebertaV2Model

    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=37)).eval()
    c = bert.config

    def deberta(heads: int) -> DebertaV2Model:
        return DebertaV2Model(DebertaV2Config(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=heads, attention_head_size=c.hidden_size // c.num_attention_heads,
            intermediate_size=c.intermediate_size, hidden_act=c.hidden_act, max_position_embeddings=c.max_position_embeddings,
            type_vocab_size=c.type_vocab_size, layer_norm_eps=c.layer_norm_eps, relative_attention=False,
            position_biased_input=True, pos_att_type=[], conv_kernel_size=0, pad_token_id=c.pad_token_id,
        )).eval()

    same = deberta(c.num_attention_heads)
    renamed = {key.replace("self.query.", "self.query_proj.").replace("self.key.", "self.key_proj.")
               .replace("self.value.", "self.value_proj."): value for key, value in bert.state_dict().items()}
    missing, unexpected = same.load_state_dict(renamed, strict=False)
    assert missing == [] and sorted(unexpected) == ["pooler.dense.bias", "pooler.dense.weight"]
    ids = torch.randint(5, 100, (3, 11))
    with torch.no_grad():
        torch.testing.assert_close(same(input_ids=ids).last_hidden_state, bert(input_ids=ids).last_hidden_state,
                                   rtol=0, atol=1e-5)
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            deberta(c.num_attention_heads // 2)(input_ids=ids)
