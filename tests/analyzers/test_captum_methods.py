"""Saliency, input × gradient, GradientSHAP, feature ablation, LIME and KernelSHAP equal Captum's classes called
directly — on a plain forward over the model's own `inputs_embeds`, with the same baseline, token mask and
seed — to 1e-6, on a tiny BERT classifier and a tiny GPT-2; no hook survives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum._utils.models.linear_model import SkLearnLasso
from captum.attr import FeatureAblation, GradientShap, InputXGradient, KernelShap, Lime, Saliency
from gradient_cases import baseline_ids, minilm, tiny_bert, tiny_gpt2

from interpret.hooks import count_hooks

CASES = {"bert": tiny_bert, "gpt2": tiny_gpt2, "minilm": minilm}


def _embeds_forward(case):
    """forward(embeds, mask, target) -> [rows]: the model fed embeddings directly, scored as the case scores ids."""
    def forward(embeds, mask, target):
        if case.head is not None:
            hidden = case.model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            return case.head(hidden, mask)[torch.arange(len(embeds)), target]
        if case.decoder:
            logits = case.model(inputs_embeds=embeds, attention_mask=mask).logits
            return logits[torch.arange(len(embeds)), mask.sum(1) - 1, target]
        return case.model(inputs_embeds=embeds, attention_mask=mask).logits[torch.arange(len(embeds)), target]

    return forward


def _setup(family):
    case = CASES[family]()
    trace = case.trace()
    embed = case.model.get_input_embeddings()
    ids, mask = trace.encoded.input_ids, trace.encoded.attention_mask
    pad = case.tokenizer.pad_token_id
    with torch.no_grad():
        inputs, baselines = embed(ids), embed(baseline_ids(trace, pad))
    attributed = mask.bool() & ~trace.encoded.special.bool()
    return case, trace, inputs, baselines, attributed, mask, case.targets(trace)


def _token_mask(attributed_row: torch.Tensor, d_model: int) -> torch.Tensor:
    groups = torch.full(attributed_row.shape, int(attributed_row.sum()), dtype=torch.long, device=attributed_row.device)
    groups[attributed_row] = torch.arange(int(attributed_row.sum()), device=attributed_row.device)
    return groups[None, :, None].expand(1, -1, d_model)


def _close(actual: np.ndarray, expected: torch.Tensor, attributed: torch.Tensor) -> None:
    expected = (expected.detach().double() * attributed.double()).cpu().numpy()
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(actual, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_gradient_methods_equal_captum(family: str) -> None:
    case, trace, inputs, baselines, attributed, mask, targets = _setup(family)
    forward = _embeds_forward(case)
    hooks = count_hooks(case.model)

    grad = Saliency(forward).attribute(inputs, additional_forward_args=(mask, targets), abs=True)
    _close(case.analyze(trace, "saliency")["readout"], grad.norm(dim=-1), attributed)
    signed = Saliency(forward).attribute(inputs, additional_forward_args=(mask, targets), abs=False)
    _close(case.analyze(trace, "saliency", abs=False, reduce="sum")["readout"], signed.sum(-1), attributed)

    ixg = InputXGradient(forward).attribute(inputs, additional_forward_args=(mask, targets))
    _close(case.analyze(trace, "input_x_gradient")["readout"], ixg.sum(-1), attributed)

    result = case.analyze(trace, "gradient_shap", n_samples=8, stdev=0.01)
    rows = []
    for b in range(len(inputs)):
        torch.manual_seed(0)
        np.random.seed(0)
        rows.append(GradientShap(forward).attribute(inputs[b:b + 1], baselines=baselines[b:b + 1], n_samples=8,
                                                    stdevs=0.01, additional_forward_args=(mask[b:b + 1], targets[b:b + 1])))
    _close(result["readout"], torch.cat(rows).sum(-1), attributed)
    assert count_hooks(case.model) == hooks


# LIME's Lasso penalty is alpha (0.01) × |F(x) − F(x')| per example, given to Captum's SkLearnLasso here too.
PERTURBATION_RUNS = [(family, name, method) for name, method, families in (
    ("feature_ablation", FeatureAblation, ("bert", "gpt2")), ("kernel_shap", KernelShap, ("bert", "gpt2")),
    ("lime", Lime, ("bert", "gpt2", "minilm"))) for family in families]


@pytest.mark.parametrize("family, name, method", PERTURBATION_RUNS)
def test_perturbation_methods_equal_captum(family: str, name: str, method) -> None:
    case, trace, inputs, baselines, attributed, mask, targets = _setup(family)
    forward = _embeds_forward(case)
    sampled = name != "feature_ablation"
    params = {"n_samples": 60} if sampled else {}
    result = case.analyze(trace, name, **params)
    with torch.no_grad():
        gaps = (forward(inputs, mask, targets) - forward(baselines, mask, targets)).abs()
    rows = []
    for b in range(len(inputs)):
        torch.manual_seed(0)
        np.random.seed(0)
        made = Lime(forward, interpretable_model=SkLearnLasso(alpha=0.01 * float(gaps[b]))) if name == "lime" else method(forward)
        attr = made.attribute(
            inputs[b:b + 1], baselines=baselines[b:b + 1], feature_mask=_token_mask(attributed[b], inputs.shape[-1]),
            additional_forward_args=(mask[b:b + 1], targets[b:b + 1]), **params,
        )
        rows.append(attr[..., 0])
    _close(result["readout"], torch.cat(rows), attributed)


def test_sampling_depends_on_the_seed_and_is_reproducible() -> None:
    import interpret

    case, trace, *_ = _setup("bert")
    run = lambda seed: interpret.analyze(trace, "kernel_shap", model=case.model, tokenizer=case.tokenizer, seed=seed,
                                         params={"n_samples": 20})["readout"]
    np.testing.assert_array_equal(run(0), run(0))
    assert not np.array_equal(run(0), run(1))


GRADIENT_ANALYZERS = ["integrated_gradients", "saliency", "input_x_gradient", "gradient_shap", "feature_ablation",
                      "lime", "kernel_shap", "attention_x_gradient", "gradient_weighted_rollout"]


@pytest.mark.parametrize("name", GRADIENT_ANALYZERS)
def test_no_hook_survives_any_gradient_analyzer_also_when_it_raises(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from interpret.analysis.runner import ModelRunner

    case = tiny_bert()
    trace = case.trace()
    hooks = count_hooks(case.model)
    small = {"integrated_gradients": {"steps": 4}, "gradient_shap": {"n_samples": 2},
             "lime": {"n_samples": 8}, "kernel_shap": {"n_samples": 8}}.get(name, {})
    case.analyze(trace, name, **small)
    assert count_hooks(case.model) == hooks
    original = ModelRunner._scores
    calls = []

    single_pass = name in ("saliency", "input_x_gradient", "attention_x_gradient", "gradient_weighted_rollout")

    def fail_on_second(self, *args, **kwargs):  # a method of many passes fails in its second, with hooks in place
        calls.append(1)
        if len(calls) > (0 if single_pass else 1):
            raise RuntimeError("the score fails on purpose")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ModelRunner, "_scores", fail_on_second)
    with pytest.raises(RuntimeError, match="on purpose"):
        case.analyze(trace, name, **small)
    assert count_hooks(case.model) == hooks
