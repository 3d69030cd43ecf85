"""Every decomposition analyzer on the tiny families it covers (post-norm LayerNorm encoders, pre-norm decoders
with LayerNorm or RMSNorm, ViT), eager and SDPA: sound results whose split adds up to the model's own output,
and the same numbers under both kernels."""

from __future__ import annotations

import numpy as np
import pytest
from hf_tiny import TEXTS, pixel_values, tiny_model, word_tokenizer

import interpret
from interpret.plugins.alti import STREAM

FAMILIES = ("bert", "roberta", "distilbert", "electra", "gpt2", "llama", "qwen2", "vit")
METHODS = ("norm_attention", "globenc", "alti", "value_zeroing")


def _results(family: str, implementation: str) -> dict[str, interpret.AnalyzerResult]:
    model = tiny_model(family, implementation).double()
    inputs, tokenizer = (pixel_values().double(), None) if family == "vit" else (TEXTS, word_tokenizer())
    trace = interpret.collect(model, tokenizer, inputs, names=list(STREAM))
    methods = METHODS + (("alti_logit",) if family == "gpt2" else ())
    return {name: interpret.analyze(trace, name, model=model, tokenizer=tokenizer) for name in methods}


@pytest.mark.parametrize("family", FAMILIES)
def test_sound_and_kernel_independent(family: str) -> None:
    eager = _results(family, "eager")
    sdpa = _results(family, "sdpa")
    for name, result in eager.items():
        assert result.ok, (name, {key: check.value for key, check in result.checks.items()})
        if "decomposition_error" in result.checks:
            assert result.checks["decomposition_error"].value < 1e-6
        if "replay_error" in result.checks:
            assert result.checks["replay_error"].value < 1e-9
        np.testing.assert_allclose(sdpa[name]["readout"], result["readout"], rtol=1e-5, atol=1e-8)
