"""ALTI-Logit (Ferrando et al. 2023) equals a plain PyTorch statement on tiny GPT-2 (padded batch, float64),
for the predicted next token and for a contrast; it refuses encoders and RMSNorm final norms in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_tiny import tiny_model, word_tokenizer
from statement import TEXTS, alti_logit, bert_classifier, gpt2_lm

import interpret
from interpret.errors import AnalyzerError
from interpret.plugins.alti import STREAM
from interpret.target import Target


def test_equals_the_statement_for_the_predicted_token() -> None:
    model, tokenizer = gpt2_lm(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=list(STREAM))
    result = interpret.analyze(trace, "alti_logit", model=model, tokenizer=tokenizer)
    assert result.checks["logit_error"].value < 1e-9
    for b in range(2):
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().numpy()
        token = int(trace.output.logits[b, real[-1]].argmax())
        expected, _ = alti_logit(model, trace, b, token)
        np.testing.assert_allclose(result["readout"][b][real], expected.numpy(), rtol=1e-5, atol=1e-10)
        np.testing.assert_allclose(result["per_layer"][b].sum(0), result["readout"][b], atol=1e-12)
        assert np.all(np.delete(result["readout"][b], real) == 0.0)


def test_equals_the_statement_for_a_contrast() -> None:
    model, tokenizer = gpt2_lm(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=list(STREAM))
    targets = []
    for b in range(2):
        last = int(torch.nonzero(trace.encoded.attention_mask[b]).flatten()[-1])
        targets.append(Target(kind="token", ids=(7,), positions=(last,), contrast=(9,), source="given", pooling=((last, 1.0),)))
    result = interpret.analyze(trace, "alti_logit", model=model, tokenizer=tokenizer, targets=targets)
    for b in range(2):
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().numpy()
        expected, _ = alti_logit(model, trace, b, 7, contrast=9)
        np.testing.assert_allclose(result["readout"][b][real], expected.numpy(), rtol=1e-5, atol=1e-10)


@pytest.mark.parametrize(("family", "reason"), [("bert", "encoder model"), ("llama", "not a LayerNorm")])
def test_refused_in_one_line(family: str, reason: str) -> None:
    model = bert_classifier() if family == "bert" else tiny_model("llama", "eager").double()
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=list(STREAM))
    with pytest.raises(AnalyzerError, match=reason) as raised:
        interpret.analyze(trace, "alti_logit", model=model, tokenizer=tokenizer)
    assert "\n" not in str(raised.value)
