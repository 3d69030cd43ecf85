"""Norm-based attention (Kobayashi et al. 2020) equals the plain PyTorch statement of ‖α f(x)‖ on tiny BERT
and GPT-2 (padded batch, float64), and reduces to raw attention when every ‖f(x_j)‖ is equal."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from statement import TEXTS, bert_classifier, gpt2_lm, norm_based, run
from hf_tiny import word_tokenizer

import interpret
from interpret.errors import AnalyzerError

NAMES = ["*attn.hook_pattern", "*attn.hook_v"]


@pytest.mark.parametrize("family", ["bert", "gpt2"])
@pytest.mark.parametrize("layer", [0, -1])
def test_equals_the_statement(family: str, layer: int) -> None:
    model = bert_classifier() if family == "bert" else gpt2_lm()
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    for fusion in ("sum", "mean"):
        result = interpret.analyze(trace, "norm_attention", model=model, tokenizer=tokenizer,
                                   params={"layer": layer, "head_fusion": fusion})
        absolute = layer % model.config.num_hidden_layers
        for b in range(2):
            stream = run(model, trace, b)
            real = stream.positions.cpu().numpy()
            per_head, summed = norm_based(model, stream, absolute)
            grid = np.ix_(real, real)
            np.testing.assert_allclose(result["norms"][b][:, grid[0], grid[1]], per_head.cpu().numpy(), rtol=1e-5, atol=1e-10)
            fused = summed if fusion == "sum" else per_head.mean(0)
            np.testing.assert_allclose(result["fused"][b][grid], fused.cpu().numpy(), rtol=1e-5, atol=1e-10)
            # The decision reads [CLS] for the BERT classifier, the last real token for GPT-2's next token.
            row = 0 if family == "bert" else len(real) - 1
            expected = (fused[row] / fused[row].sum()).cpu().numpy()
            np.testing.assert_allclose(result["readout"][b][real], expected, rtol=1e-5, atol=1e-10)
            assert np.all(np.delete(result["readout"][b], real) == 0.0)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_reduces_to_raw_attention_when_every_value_norm_is_equal(family: str) -> None:
    model = bert_classifier() if family == "bert" else gpt2_lm()
    d_model = model.config.hidden_size
    heads = model.config.num_attention_heads
    d_head = d_model // heads
    with torch.no_grad():  # every value the same vector per head, output projection the identity: ‖f^h(x_j)‖ = 1
        unit = torch.zeros(d_head, dtype=torch.float64)
        unit[0] = 1.0
        if family == "bert":
            block = model.bert.encoder.layer[-1].attention
            block.self.value.weight.zero_()
            block.self.value.bias.copy_(unit.repeat(heads))
            block.output.dense.weight.copy_(torch.eye(d_model))
        else:
            block = model.transformer.h[-1].attn
            block.c_attn.weight[:, 2 * d_model :] = 0.0
            block.c_attn.bias[2 * d_model :] = unit.repeat(heads)
            block.c_proj.weight.copy_(torch.eye(d_model))
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    norm = interpret.analyze(trace, "norm_attention", model=model, tokenizer=tokenizer, params={"head_fusion": "mean"})
    raw = interpret.analyze(trace, "last_layer_attention", model=model, tokenizer=tokenizer)
    # last_layer_attention fuses the heads in the pattern's stored precision: agreement to ~1e-9, well inside 1e-5.
    np.testing.assert_allclose(norm["readout"], raw["readout"], rtol=1e-7, atol=1e-10)
    pattern = trace.stack("attn.hook_pattern")[:, -1].double().cpu().numpy()
    mask = trace.encoded.attention_mask.bool().cpu().numpy()
    for b in range(2):
        real = np.flatnonzero(mask[b])
        np.testing.assert_allclose(norm["norms"][b][:, real][:, :, real], pattern[b][:, real][:, :, real], atol=1e-12)


def test_layer_not_captured_is_one_line() -> None:
    model, tokenizer = gpt2_lm(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    with pytest.raises(AnalyzerError, match="layer=7 was not captured"):
        interpret.analyze(trace, "norm_attention", model=model, tokenizer=tokenizer, params={"layer": 7})
