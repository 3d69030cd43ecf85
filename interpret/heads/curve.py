"""Iterative head pruning (Michel, Levy and Neubig 2019, Sec. 4.2): gate off heads step by step, re-estimating
the importance of the heads still on before each step, and record the metric after each step.

Order "least" removes the least important heads first (the method); order "most" removes the most important
first (the contrast: if importance means anything, this curve falls much sooner). Each step removes
max(1, ⌊fraction · heads still on⌋) heads (default 10% of the remaining). The run stops after the first step
whose quality falls below `threshold` (default 0.9) of the original — quality = metric / original for
accuracy and agreement, original / perplexity for perplexity (lower is better) — or when every head is off;
`last_passing` is the mask of the last step still at or above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from jaxtyping import Float
from torch import Tensor

from interpret.errors import AnalyzerError
from interpret.estimate.heads import step_size
from interpret.heads.importance import normalize_by_layer

Order = Literal["least", "most"]


@dataclass(frozen=True)
class CurvePoint:
    """One step: heads off so far, the metric and the quality (relative to the original) under `mask`."""

    pruned: int
    metric: float
    quality: float
    mask: Float[Tensor, "layer head"]


@dataclass(frozen=True)
class PruningCurve:
    """A pruning run: its order, metric name, original metric, threshold, points (the first is the unpruned
    model) and the last mask whose quality stayed at or above the threshold."""

    order: Order
    metric: str
    original: float
    threshold: float
    points: tuple[CurvePoint, ...]
    last_passing: Float[Tensor, "layer head"]

    @property
    def heads(self) -> int:
        """Heads of the model."""
        return int(self.last_passing.numel())

    @property
    def pruned_passing(self) -> int:
        """Heads off in the last passing mask."""
        return int((self.last_passing == 0).sum())


def quality_of(metric: float, original: float, lower_is_better: bool) -> float:
    """Return the metric relative to the original (1 = unchanged, smaller = worse)."""
    if lower_is_better:
        return original / metric if metric > 0 else float("inf")
    return metric / original


def pruning_curve(
    importance_of: Callable[[Tensor], Tensor],
    metric_of: Callable[[Tensor | None], float],
    shape: tuple[int, int],
    *,
    metric: str = "accuracy",
    order: Order = "least",
    fraction: float = 0.1,
    threshold: float = 0.9,
    lower_is_better: bool = False,
    by_layer: bool = True,
    to_the_end: bool = False,
    on_step: Callable[[CurvePoint], None] | None = None,
) -> PruningCurve:
    """Return the pruning curve.

    importance_of(mask [layer, head]) -> raw importance [layer, head] with gates held at `mask`.
    metric_of(mask or None) -> the metric (None: the ungated model).
    to_the_end: keep pruning after the threshold is crossed, until every head is off (the last passing mask
        is still the last one at or above the threshold).
    """
    if not 0.0 < fraction <= 1.0:
        raise AnalyzerError(f"fraction={fraction} must be in (0, 1]; 0.1 prunes 10% of the remaining heads per step.")
    if not 0.0 < threshold <= 1.0:
        raise AnalyzerError(f"threshold={threshold} must be in (0, 1]; 0.9 keeps 90% of the original metric.")
    original = metric_of(None)
    if not original > 0:
        raise AnalyzerError(
            f"the unpruned model's {metric} is {original}; a pruning curve relative to it is meaningless."
        )
    mask = torch.ones(shape, dtype=torch.float32)
    points = [CurvePoint(0, original, 1.0, mask.clone())]
    last_passing = mask.clone()
    failed = False
    while bool(mask.sum() > 0) and not (failed and not to_the_end):
        remaining = int(mask.sum())
        scores = importance_of(mask).to(torch.float64)
        if by_layer:
            scores = normalize_by_layer(scores)
        on = [(float(scores[l, h]), l, h) for l in range(shape[0]) for h in range(shape[1]) if mask[l, h] != 0]
        on.sort(key=lambda item: (item[0], item[1], item[2]), reverse=order == "most")
        for _, layer, head in on[: step_size(remaining, fraction)]:
            mask[layer, head] = 0.0
        value = metric_of(mask.clone())
        point = CurvePoint(int((mask == 0).sum()), value, quality_of(value, original, lower_is_better), mask.clone())
        points.append(point)
        if on_step is not None:
            on_step(point)
        if point.quality >= threshold and not failed:
            last_passing = mask.clone()
        else:
            failed = True
    return PruningCurve(order, metric, original, threshold, tuple(points), last_passing)
