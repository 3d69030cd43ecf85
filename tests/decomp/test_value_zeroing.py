"""Value zeroing (Mohebbi et al. 2023) equals a plain PyTorch statement (each block written out by hand, one
token's values zeroed) on tiny BERT and GPT-2, padded batch, float64, whatever the rows per block call; the
replay reproduces the model and leaves no kernel wrapper behind."""

from __future__ import annotations

import numpy as np
import pytest
from hf_tiny import tiny_model, word_tokenizer
from statement import TEXTS, bert_classifier, gpt2_lm, rolled, run, value_zeroing_layer
from transformers.modeling_utils import AttentionInterface

import interpret
from interpret.errors import AnalyzerError

NAMES = ["*attn.hook_pattern", "*hook_resid_post"]


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_equals_the_statement(family: str) -> None:
    model = bert_classifier() if family == "bert" else gpt2_lm()
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    lookup = AttentionInterface.__dict__["get_interface"]
    results = [interpret.analyze(trace, "value_zeroing", model=model, tokenizer=tokenizer,
                                 params={"per_layer": True, "max_rows": rows}) for rows in (64, 3)]
    assert AttentionInterface.__dict__["get_interface"] is lookup
    for result in results:
        assert result.checks["replay_error"].value < 1e-10
        for b in range(2):
            stream = run(model, trace, b)
            real = stream.positions.cpu().numpy()
            grid = np.ix_(real, real)
            matrices = [value_zeroing_layer(model, stream, layer) for layer in range(model.config.num_hidden_layers)]
            for layer, matrix in enumerate(matrices):
                np.testing.assert_allclose(result["per_layer"][b, layer][grid], matrix.cpu().numpy(), rtol=1e-5, atol=1e-9)
            rollout = rolled(matrices)
            row = 0 if family == "bert" else len(real) - 1
            np.testing.assert_allclose(result["readout"][b][real], rollout[row].cpu().numpy(), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(results[0]["rollout"], results[1]["rollout"], atol=1e-12)


def test_sdpa_rotary_decoder_replays_exactly() -> None:
    model, tokenizer = tiny_model("llama", "sdpa").double(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    result = interpret.analyze(trace, "value_zeroing", model=model, tokenizer=tokenizer, params={"per_layer": True})
    assert result.checks["replay_error"].value < 1e-10
    assert np.all(np.triu(result["per_layer"], k=1) < 1e-12)  # a causal block: zeroing a later token changes nothing


def test_bad_rows_refused() -> None:
    with pytest.raises(AnalyzerError, match="max_rows=1"):
        interpret.analyze(interpret.collect(gpt2_lm(), word_tokenizer(), TEXTS, names=NAMES), "value_zeroing",
                          model=gpt2_lm(), tokenizer=word_tokenizer(), params={"max_rows": 1})
