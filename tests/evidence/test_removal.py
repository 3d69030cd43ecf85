"""Removal re-runs the model exactly as if the input had been written without those tokens: each way of
removing equals a direct call of the Hugging Face model on the edited input (a BERT classifier, GPT-2 padded
on the right, Llama padded on the left), every removal of an example in few forward passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from hf_tiny import TEXTS, tiny_config, tiny_model, word_tokenizer

import interpret
from interpret.analysis.run import run_context
from interpret.errors import AnalyzerError
from interpret.evidence import RemovalScorer, candidates, default_removal


def _setup(model: torch.nn.Module) -> tuple[object, object, object]:
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern"])
    ctx = run_context(trace, model, tokenizer)
    return tokenizer, trace, ctx


def _bert() -> torch.nn.Module:
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.num_labels = 3
    return transformers.BertForSequenceClassification(config).eval()


def _direct_class(model: torch.nn.Module, target: int, **inputs: torch.Tensor) -> float:
    with torch.no_grad():
        return float(model(**inputs).logits.double().softmax(-1)[0, target])


@pytest.mark.parametrize("example", [0, 1])
def test_bert_classifier_each_removal_equals_the_edited_input(example: int) -> None:
    model = _bert()
    tokenizer, trace, ctx = _setup(model)
    encoded, target = trace.encoded, ctx.targets[example].ids[0]
    positions = candidates(encoded, example, ctx.targets[example])
    assert encoded.special[example, positions].sum() == 0 and len(positions) == encoded.lengths[example] - 2
    removed = np.zeros((3, encoded.pos), dtype=bool)
    removed[0, positions[[0, 2]]] = True
    removed[1, positions] = True
    real = encoded.attention_mask[example].bool().cpu().numpy()
    ids = encoded.input_ids[example]
    assert default_removal(encoded) == "delete"
    deleted = RemovalScorer(ctx, encoded, "delete").probabilities(example, removed)
    masked = RemovalScorer(ctx, encoded, "mask").probabilities(example, removed)
    zeroed = RemovalScorer(ctx, encoded, "zero").probabilities(example, removed)
    for row in range(3):
        kept = torch.from_numpy(real & ~removed[row])
        assert deleted[row] == pytest.approx(_direct_class(model, target, input_ids=ids[kept][None]), abs=1e-6)
        replaced = ids[torch.from_numpy(real)].clone()
        replaced[torch.from_numpy(removed[row][real])] = tokenizer.mask_token_id
        assert masked[row] == pytest.approx(_direct_class(model, target, input_ids=replaced[None]), abs=1e-6)
        embeds = model.bert.embeddings.word_embeddings(ids[torch.from_numpy(real)])
        embeds = embeds * torch.from_numpy(~removed[row][real]).float()[:, None]
        assert zeroed[row] == pytest.approx(_direct_class(model, target, inputs_embeds=embeds[None]), abs=1e-6)
    assert deleted[2] == pytest.approx(_direct_class(model, target, input_ids=ids[torch.from_numpy(real)][None]), abs=1e-6)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_decoder_deletion_equals_the_shorter_input(family: str) -> None:
    model = tiny_model(family)
    tokenizer = word_tokenizer()
    if family == "llama":
        tokenizer.padding_side = "left"
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern"])
    ctx = run_context(trace, model, tokenizer)
    encoded = trace.encoded
    for example in range(2):
        target = ctx.targets[example]
        positions = candidates(encoded, example, target)
        assert target.positions[0] not in positions.tolist()  # the decision's own row is never removed
        removed = np.zeros((2, encoded.pos), dtype=bool)
        removed[0, positions[:2]] = True
        removed[1, positions[-1:]] = True
        scored = RemovalScorer(ctx, encoded, "delete").probabilities(example, removed)
        real = encoded.attention_mask[example].bool().cpu().numpy()
        for row in range(2):
            ids = encoded.input_ids[example][torch.from_numpy(real & ~removed[row])]
            with torch.no_grad():
                logits = model(input_ids=ids[None]).logits.double()
            expected = float(logits[0, -1].softmax(-1)[target.ids[0]])
            assert scored[row] == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_many_removals_take_few_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _bert()
    _, trace, ctx = _setup(model)
    passes: list[int] = []
    original = model.forward

    def counting(*args: object, **kwargs: object) -> object:
        passes.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    removed = np.random.default_rng(0).random((100, trace.encoded.pos)) < 0.3
    RemovalScorer(ctx, trace.encoded, "mask").probabilities(0, removed)
    assert len(passes) == 2  # 100 rows, 64 per pass


def test_refusals() -> None:
    model = _bert()
    _, trace, ctx = _setup(model)
    with pytest.raises(AnalyzerError, match="not one of"):
        RemovalScorer(ctx, trace.encoded, "drop")  # type: ignore[arg-type]
    with pytest.raises(AnalyzerError, match="pass model="):
        RemovalScorer(run_context(trace, None), trace.encoded, "delete")


def test_encoder_decoder_deletes_encoder_tokens_and_keeps_the_decoder() -> None:
    model = tiny_model("t5")
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern"], decoder_inputs=["a red dog", "the cat"])
    ctx = run_context(trace, model, tokenizer)
    encoded = trace.encoded
    for example in range(2):
        target = ctx.targets[example]
        positions = candidates(encoded, example, target, decoder_side=True)
        assert len(positions) == int((encoded.attention_mask[example].bool() & ~encoded.special[example]).sum())
        removed = np.zeros((1, encoded.pos), dtype=bool)
        removed[0, positions[:2]] = True
        scored = RemovalScorer(ctx, encoded, "delete").probabilities(example, removed)
        real = encoded.attention_mask[example].bool().cpu().numpy()
        ids = encoded.input_ids[example][torch.from_numpy(real & ~removed[0])]
        decoder = encoded.decoder
        decoder_ids = decoder.input_ids[example][decoder.attention_mask[example].bool()]
        with torch.no_grad():
            logits = model(input_ids=ids[None], decoder_input_ids=decoder_ids[None]).logits.double()
        expected = float(logits[0].log_softmax(-1)[list(target.positions), list(target.ids)].sum().exp())
        assert scored[0] == pytest.approx(expected, rel=1e-5, abs=1e-9)


def test_long_inputs_take_fewer_rows_per_pass() -> None:
    from interpret.estimate.memory import rows_per_pass

    assert rows_per_pass(20, 12) == 64
    assert rows_per_pass(1024, 12) == 6  # 4 · 1024 · (2 · 12 · 1024 + 16384) = 160 MiB a row, 1 GiB a pass
    assert rows_per_pass(4096, 12) == 1
    assert rows_per_pass(100_000, 32) == 1
