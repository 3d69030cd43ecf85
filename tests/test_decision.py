"""The decision step: one Target per example — classes with labels, next tokens, continuations, targets by
index, label or token, gold labels, contrasts, and the pooling each decision reads."""

from __future__ import annotations

import pytest
import torch

import interpret
from interpret.decision.decide import TargetRequest, decide, resolve_class
from interpret.errors import InputError
from interpret.reference import DecoderLM, EncoderClassifier, TransformerConfig
from interpret.reference.vocab import word_tokenizer

WORDS = "the cat sat on mat a dog".split()


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(WORDS)


def _config(tokenizer, **extra) -> TransformerConfig:
    return TransformerConfig(
        d_model=16, n_heads=2, n_layers=1, d_mlp=32, vocab_size=len(tokenizer), max_positions=16, **extra
    )


def _classifier(tokenizer, pooling: str = "first") -> EncoderClassifier:
    torch.manual_seed(2)  # a seed whose random classifier predicts both classes on the texts below
    return EncoderClassifier(_config(tokenizer, pooling=pooling)).eval()


def test_each_example_gets_its_own_predicted_class(tokenizer) -> None:
    model = _classifier(tokenizer)
    trace = interpret.collect(model, tokenizer, ["the cat", "a dog sat on the mat", "mat mat", "cat"])
    probabilities = trace.output.double().softmax(-1)
    own = decide(model, trace, tokenizer)
    assert [d.kind for d in own] == ["class"] * 4
    for row, decision in zip(probabilities, own):
        best = int(row.argmax())
        assert decision.predicted == f"class {best}" and decision.target.ids == (best,)
        assert decision.target.source == "prediction"
        assert decision.probability == pytest.approx(float(row.max()))
        assert decision.target.pooling == ((0, 1.0),)  # a CLS-pooled classifier reads its first token
    assert len({d.target.ids for d in own}) == 2, "the fixture must hold examples with different predictions"


def test_targets_by_index_label_and_gold_and_contrast(tokenizer) -> None:
    model = _classifier(tokenizer)
    trace = interpret.collect(model, tokenizer, ["the cat", "a dog sat on the mat"])
    probabilities = trace.output.double().softmax(-1)
    forced = decide(model, trace, tokenizer, TargetRequest(target=1))
    assert all(d.target.ids == (1,) and d.target.source == "given" for d in forced)
    assert forced[0].probability == pytest.approx(float(probabilities[0, 1]))
    gold = decide(model, trace, tokenizer, TargetRequest(gold=True), gold=["class 0", "class 1"])
    assert [d.target.ids for d in gold] == [(0,), (1,)] and all(d.target.source == "gold" for d in gold)
    assert [d.correct for d in gold] == [d.predicted == g for d, g in zip(gold, ["class 0", "class 1"])]
    versus = decide(model, trace, tokenizer, TargetRequest(target="class 1", contrast="class 0"))
    assert all(d.target.contrast == (0,) and d.target.label == "class 1 vs class 0" for d in versus)


@pytest.mark.parametrize(
    ("target", "message"),
    [("clas 1", "neither a class name nor a class index"), (7, "class 7 does not exist"), ("-1", "class -1 does not exist"), ("2", "class 2")],
)
def test_bad_class_targets_are_one_line(tokenizer, target, message) -> None:
    with pytest.raises(InputError, match=message):
        resolve_class(target, ["class 0", "class 1"])


def test_gold_needs_a_label_and_the_contrast_must_differ(tokenizer) -> None:
    model = _classifier(tokenizer)
    trace = interpret.collect(model, tokenizer, ["the cat", "a dog"])
    with pytest.raises(InputError, match="has no gold label"):
        decide(model, trace, tokenizer, TargetRequest(gold=True), gold=["class 0", None])
    with pytest.raises(InputError, match="equals the target"):
        decide(model, trace, tokenizer, TargetRequest(target=1, contrast=1))


def test_a_mean_pooled_classifier_reads_every_real_position(tokenizer) -> None:
    model = _classifier(tokenizer, pooling="mean")
    trace = interpret.collect(model, tokenizer, ["the cat sat", "a dog"])
    for b, decision in enumerate(decide(model, trace, tokenizer)):
        n = trace.encoded.lengths[b]
        assert decision.target.pooling == tuple((p, 1.0 / n) for p in range(n))


def test_language_model_decision_reads_the_last_real_token(tokenizer) -> None:
    torch.manual_seed(0)
    model = DecoderLM(_config(tokenizer)).eval()
    trace = interpret.collect(model, tokenizer, ["the cat sat", "a dog"])
    last = trace.encoded.attention_mask.sum(-1) - 1
    own = decide(model, trace, tokenizer)
    for b, decision in enumerate(own):
        logits = trace.output[b, last[b]]
        assert decision.kind == "token"
        assert decision.predicted == tokenizer.convert_ids_to_tokens(int(logits.argmax()))
        assert decision.target.positions == (int(last[b]),) and decision.target.pooling == ((int(last[b]), 1.0),)
    cat = decide(model, trace, tokenizer, TargetRequest(target="cat"))
    assert all(d.target.ids == (tokenizer.convert_tokens_to_ids("cat"),) for d in cat)
    with pytest.raises(InputError, match="not in the vocabulary"):
        decide(model, trace, tokenizer, TargetRequest(target="zebra"))
    with pytest.raises(InputError, match="is 2 tokens, not one"):
        decide(model, trace, tokenizer, TargetRequest(target="the cat"))
    with pytest.raises(InputError, match="gold targets need a classifier"):
        decide(model, trace, tokenizer, TargetRequest(gold=True), gold=["cat", "dog"])


def test_a_continuation_is_one_target_per_token(tokenizer) -> None:
    torch.manual_seed(0)
    model = DecoderLM(_config(tokenizer)).eval()
    trace = interpret.collect(model, tokenizer, ["the cat", "a"], continuations=["sat on", "dog"])
    ids = trace.encoded.input_ids
    decisions = decide(model, trace, tokenizer)
    first = decisions[0].target
    assert first.source == "given" and len(first.ids) == 2
    cat = trace.encoded.tokens[0].index("sat")
    assert first.ids == (int(ids[0, cat]), int(ids[0, cat + 1])) and first.positions == (cat - 1, cat)
    log_probabilities = trace.output.double().log_softmax(-1)
    expected = float((log_probabilities[0, cat - 1, ids[0, cat]] + log_probabilities[0, cat, ids[0, cat + 1]]).exp())
    assert decisions[0].probability == pytest.approx(expected)
    assert len(decisions[1].target.ids) == 1


def test_a_vision_language_model_on_text_decides_its_next_token() -> None:
    """A composite config (LLaVA's) sizes its token logits in its text config and states no `vocab_size` of its
    own: the decision reads the text config's, so the model's next token is decided (it was once "no decision")."""
    import transformers as T
    from hf_tiny import word_tokenizer as words

    hf_tokenizer = words()
    text = T.LlamaConfig(vocab_size=len(hf_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)
    vision = T.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                image_size=32, patch_size=8)
    config = T.LlavaConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), image_token_id=1)
    assert not hasattr(config, "vocab_size")
    torch.manual_seed(0)
    model = T.LlavaForConditionalGeneration(config).eval()
    trace = interpret.collect(model, hf_tokenizer, ["the cat sat on the mat"])
    (decision,) = decide(model, trace, hf_tokenizer)
    last = trace.output.logits[0, -1].double().softmax(-1)
    assert decision.kind == "token" and decision.predicted_index == int(last.argmax())
    assert decision.predicted_probability == pytest.approx(float(last.max()), abs=1e-6)
