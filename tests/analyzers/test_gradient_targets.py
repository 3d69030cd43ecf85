"""Class-specific and contrastive attributions on the default model (MiniLM with its sentiment head): asking for
the other class changes Integrated Gradients (and gradient-weighted rollout), and the contrastive attribution
(score = logit(A) − logit(B)) equals IG(A) − IG(B), because IG is linear in the score (1e-5)."""

from __future__ import annotations

import numpy as np
import pytest
from gradient_cases import minilm

import interpret
from interpret.decision.decide import TargetRequest, decide


def _run(case, trace, name: str, request: TargetRequest, **params):
    targets = [decision.target for decision in decide(case.model, trace, case.tokenizer, request, head=case.head)]
    return interpret.analyze(trace, name, model=case.model, tokenizer=case.tokenizer, head=case.head, targets=targets,
                             params=params)


@pytest.fixture(scope="module")
def setting():
    case = minilm()
    return case, case.trace()


@pytest.mark.parametrize("name", ["integrated_gradients", "gradient_weighted_rollout", "input_x_gradient"])
def test_another_class_changes_the_attributions(setting, name: str) -> None:
    case, trace = setting
    positive = _run(case, trace, name, TargetRequest(target="positive"))["readout"]
    negative = _run(case, trace, name, TargetRequest(target="negative"))["readout"]
    for b in range(trace.encoded.batch):
        assert np.abs(positive[b] - negative[b]).max() > 1e-3 * np.abs(positive[b]).max()


def test_a_two_class_head_gives_opposite_integrated_gradients(setting) -> None:
    """With two classes, logit(negative) − logit(positive) = −(logit(positive) − logit(negative))."""
    case, trace = setting
    ab = _run(case, trace, "integrated_gradients", TargetRequest(target="positive", contrast="negative"))["readout"]
    ba = _run(case, trace, "integrated_gradients", TargetRequest(target="negative", contrast="positive"))["readout"]
    np.testing.assert_allclose(ab, -ba, atol=1e-5, rtol=0)


@pytest.mark.parametrize("baseline", ["pad", "zero"])
def test_contrast_equals_the_difference_of_the_two_classes(setting, baseline: str) -> None:
    case, trace = setting
    contrast = _run(case, trace, "integrated_gradients", TargetRequest(target="positive", contrast="negative"),
                    baseline=baseline)
    positive = _run(case, trace, "integrated_gradients", TargetRequest(target="positive"), baseline=baseline)
    negative = _run(case, trace, "integrated_gradients", TargetRequest(target="negative"), baseline=baseline)
    np.testing.assert_allclose(contrast["readout"], positive["readout"] - negative["readout"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(contrast["gap"], positive["gap"] - negative["gap"], atol=1e-5, rtol=0)
