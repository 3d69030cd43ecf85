"""ALTI (Ferrando et al. 2022) and GlobEnc (Modarressi et al. 2022) equal plain PyTorch statements of their
formulas on tiny BERT (post-norm) and GPT-2 (pre-norm), padded batch, float64: every layer's contribution
matrix, the rollout across layers and the readout from the decision's rows. The split adds up to the model's
own output (the decomposition_error check), and families the decomposition does not cover are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hf_tiny import tiny_model, word_tokenizer
from statement import TEXTS, alti_layer, bert_classifier, globenc_layer, gpt2_lm, rolled, run

import interpret
from interpret.errors import AnalyzerError
from interpret.plugins.alti import STREAM

NAMES = [*STREAM, "*hook_mlp_out"]
LAYER_STATEMENT = {"alti": alti_layer, "globenc": globenc_layer}


@pytest.mark.parametrize("family", ["bert", "gpt2"])
@pytest.mark.parametrize("method", ["alti", "globenc"])
def test_equals_the_statement(family: str, method: str) -> None:
    model = bert_classifier() if family == "bert" else gpt2_lm()
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    result = interpret.analyze(trace, method, model=model, tokenizer=tokenizer, params={"per_layer": True})
    assert result.checks["decomposition_error"].value < 1e-8  # patterns are kept in float32: ~1e-10 here
    for b in range(2):
        stream = run(model, trace, b)
        real = stream.positions.cpu().numpy()
        grid = np.ix_(real, real)
        matrices = [LAYER_STATEMENT[method](model, stream, layer) for layer in range(model.config.num_hidden_layers)]
        for layer, matrix in enumerate(matrices):
            np.testing.assert_allclose(result["per_layer"][b, layer][grid], matrix.cpu().numpy(), rtol=1e-5, atol=1e-10)
        rollout = rolled(matrices)
        np.testing.assert_allclose(result["rollout"][b][grid], rollout.cpu().numpy(), rtol=1e-5, atol=1e-10)
        row = 0 if family == "bert" else len(real) - 1  # [CLS] of the classifier, GPT-2's last real token
        np.testing.assert_allclose(result["readout"][b][real], rollout[row].cpu().numpy(), rtol=1e-5, atol=1e-10)
        assert np.all(np.delete(result["readout"][b], real) == 0.0)


def test_causal_contributions_never_reach_the_future() -> None:
    model, tokenizer = gpt2_lm(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    result = interpret.analyze(trace, "alti", model=model, tokenizer=tokenizer, params={"per_layer": True})
    assert np.all(np.triu(result["per_layer"], k=1) == 0.0)


def test_a_float32_model_is_decomposed_within_the_tolerance() -> None:
    model, tokenizer = bert_classifier().float(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    result = interpret.analyze(trace, "alti", model=model, tokenizer=tokenizer)
    assert 0.0 < result.checks["decomposition_error"].value < 1e-5


@pytest.mark.parametrize("family", ["llama", "vit"])
def test_pre_norm_families_beyond_gpt2_add_up(family: str) -> None:
    """RMSNorm pre-norm decoders (the norm acts before the values, which hook_v holds) and ViT decompose exactly."""
    from hf_tiny import pixel_values

    model = tiny_model(family, "eager").double()
    inputs, tokenizer = (pixel_values().double(), None) if family == "vit" else (TEXTS, word_tokenizer())
    trace = interpret.collect(model, tokenizer, inputs, names=NAMES)
    for method in ("alti", "globenc"):
        result = interpret.analyze(trace, method, model=model, tokenizer=tokenizer)
        assert result.checks["decomposition_error"].value < 1e-8
        np.testing.assert_allclose(result["readout"].sum(-1), 1.0, atol=1e-9)


@pytest.mark.parametrize(("family", "reason"), [("gemma2", "sandwich norms"), ("bart", "cross attention"), ("phi", "one norm")])
def test_unsupported_families_are_refused_with_the_reason(family: str, reason: str) -> None:
    model, tokenizer = tiny_model(family, "eager").double(), word_tokenizer()
    extra = {"decoder_inputs": ["a red dog", "the cat"]} if family == "bart" else {}
    names = ["*attn.hook_pattern", "*attn.hook_v"] if family != "gemma2" else NAMES
    trace = interpret.collect(model, tokenizer, TEXTS, names=names, **extra)
    with pytest.raises(Exception, match=reason) as raised:
        if family == "gemma2":
            interpret.analyze(trace, "alti", model=model, tokenizer=tokenizer)
        elif family == "bart":
            interpret.analyze(trace, "norm_attention", model=model, tokenizer=tokenizer)
        else:  # a parallel block has no norm before its MLP alone: the collector refuses ln2 by name
            interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    assert "\n" not in str(raised.value)
    assert isinstance(raised.value, (AnalyzerError, interpret.errors.InterpretError))


def test_memory_is_estimated_and_bounded_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from interpret.estimate import memory

    model, tokenizer = bert_classifier(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=NAMES)
    monkeypatch.setattr(memory, "MEMORY_LIMIT_BYTES", 1000)
    for method in ("alti", "globenc", "value_zeroing"):
        with pytest.raises(AnalyzerError, match=r"would hold about .* GiB") as raised:
            interpret.analyze(trace, method, model=model, tokenizer=tokenizer)
        assert "\n" not in str(raised.value)


def test_explain_and_render_with_every_decomposition(tmp_path) -> None:
    """The analyzers run through interpret.explain (the report's path) on an encoder and a decoder."""
    for model, names in ((bert_classifier(), ["norm_attention", "globenc", "alti", "value_zeroing"]),
                         (gpt2_lm(), ["norm_attention", "globenc", "alti", "alti_logit", "value_zeroing"])):
        report = interpret.explain(model, word_tokenizer(), TEXTS, analyzers=names)
        results = {section.result.analyzer: section.result for section in report.sections if getattr(section, "result", None)}
        assert set(names) <= set(results)
        for name in names:
            assert results[name].ok and np.all(np.isfinite(results[name]["readout"]))
        report.render(tmp_path / f"{model.config.model_type}.html")
