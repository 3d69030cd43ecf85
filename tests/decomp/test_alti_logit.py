"""ALTI-Logit (Ferrando et al. 2023) equals a plain PyTorch statement on tiny GPT-2 (padded batch, float64),
for the predicted next token and for a contrast, and on tiny Llama (RMSNorm final norm, grouped-query
attention); it refuses encoders in one line."""

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


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_equals_the_statement_for_the_predicted_token(family: str) -> None:
    model = gpt2_lm() if family == "gpt2" else tiny_model("llama", "eager").double()
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=list(STREAM))
    result = interpret.analyze(trace, "alti_logit", model=model, tokenizer=tokenizer)
    # Llama's RMSNorm computes in float32 even in a float64 model: its logit carries ~1e-8 relative noise.
    assert result.checks["logit_error"].value < (1e-9 if family == "gpt2" else 1e-6)
    for b in range(2):
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().cpu().numpy()
        token = int(trace.output.logits[b, real[-1]].argmax())
        expected, _ = alti_logit(model, trace, b, token)
        np.testing.assert_allclose(result["readout"][b][real], expected.cpu().numpy(), rtol=1e-5, atol=1e-10)
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
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().cpu().numpy()
        expected, _ = alti_logit(model, trace, b, 7, contrast=9)
        np.testing.assert_allclose(result["readout"][b][real], expected.cpu().numpy(), rtol=1e-5, atol=1e-10)


def test_refused_in_one_line() -> None:
    model, tokenizer = bert_classifier(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=list(STREAM))
    with pytest.raises(AnalyzerError, match="encoder model") as raised:
        interpret.analyze(trace, "alti_logit", model=model, tokenizer=tokenizer)
    assert "\n" not in str(raised.value)
