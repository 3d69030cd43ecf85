"""The decision being explained: classes with labels, next tokens, targets by index, label or token."""

from __future__ import annotations

import pytest
import torch

import interpret
from interpret.decision import decisions
from interpret.errors import InputError
from interpret.reference import DecoderLM, EncoderClassifier, TransformerConfig
from interpret.reference.vocab import word_tokenizer

WORDS = "the cat sat on mat a dog".split()


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(WORDS)


def _config(tokenizer) -> TransformerConfig:
    return TransformerConfig(d_model=16, n_heads=2, n_layers=1, d_mlp=32, vocab_size=len(tokenizer), max_positions=16)


def test_classifier_decision_and_targets(tokenizer) -> None:
    torch.manual_seed(0)
    model = EncoderClassifier(_config(tokenizer)).eval()
    trace = interpret.collect(model, tokenizer, ["the cat", "a dog sat on the mat"])
    probabilities = trace.output.double().softmax(-1)
    own = decisions(model, trace, tokenizer)
    assert [d.kind for d in own] == ["class", "class"]
    for row, decision in zip(probabilities, own):
        assert decision.predicted == f"class {int(row.argmax())}"
        assert decision.probability == pytest.approx(float(row.max()))
    forced = decisions(model, trace, tokenizer, target=1)
    assert all(d.target_index == 1 for d in forced)
    assert forced[0].probability == pytest.approx(float(probabilities[0, 1]))
    with pytest.raises(InputError, match="not a label"):
        decisions(model, trace, tokenizer, target="clas 1")


def test_language_model_decision_reads_the_last_real_token(tokenizer) -> None:
    torch.manual_seed(0)
    model = DecoderLM(_config(tokenizer)).eval()
    trace = interpret.collect(model, tokenizer, ["the cat sat", "a dog"])
    last = trace.encoded.attention_mask.sum(-1) - 1
    own = decisions(model, trace, tokenizer)
    for b, decision in enumerate(own):
        logits = trace.output[b, last[b]]
        assert decision.kind == "token"
        assert decision.predicted == tokenizer.convert_ids_to_tokens(int(logits.argmax()))
    cat = decisions(model, trace, tokenizer, target="cat")
    assert all(d.target_index == tokenizer.convert_tokens_to_ids("cat") for d in cat)
    with pytest.raises(InputError, match="not in the vocabulary"):
        decisions(model, trace, tokenizer, target="zebra")
