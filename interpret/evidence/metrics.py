"""Faithfulness of one ranking of an example's tokens, by re-running the model with tokens removed.

m(x) is the probability of the explained target on the full input, r_k the k% most relevant candidate
tokens of the ranking (`top_count`: ⌈k·n/100⌉ of the n candidates, at least one), x \\ r the input without r:

- comprehensiveness (DeYoung et al. 2020, ERASER, eq. in §4.2): comp_k = m(x) − m(x \\ r_k), and its
  AOPC over the bins B = {1, 5, 10, 20, 50}%: comp = (1/|B|) Σ_{k∈B} comp_k. Higher: the ranked tokens matter.
- sufficiency (ibid.): suff_k = m(x) − m(r_k) (only r_k kept: every other candidate removed), AOPC the same
  way. Lower: the ranked tokens alone suffice.
- deletion curves (Samek et al. 2017, "Evaluating the visualization of what a deep neural network has
  learned", MoRF; LeRF as in Schulz et al. 2020 / Ancona et al. 2018): MoRF(f) = m(x \\ top ⌊f·n⌉) and
  LeRF(f) = m(x \\ bottom ⌊f·n⌉) for the fractions f ∈ {0, 0.1, …, 1} (`curve_count`: ⌊·⌉ rounds half
  to even), and the area between them ABC = ∫_0^1 (LeRF(f) − MoRF(f)) df by the trapezoid rule. Higher: the
  ranking separates what matters from what does not.

A ranking is formed by `interpret.evidence.ranking.order_of` (scores tied within a tolerance rank by
position). Every removal an example needs (all rankings, all bins and curve steps) is scored together, each
distinct removal once, in ceil(rows / ROWS_PER_PASS) forward passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool, Float, Int

from interpret.evidence.removal import removal_masks

BINS: tuple[float, ...] = (0.01, 0.05, 0.10, 0.20, 0.50)
FRACTIONS: tuple[float, ...] = tuple(step / 10 for step in range(11))

# probabilities(removed [rows, pos] bool) -> m(x \ r) [rows]
ProbabilityFn = Callable[[Bool[np.ndarray, "rows pos"]], Float[np.ndarray, " rows"]]


@dataclass(frozen=True)
class RankingScores:
    """The metrics of one ranking on one example.

    full: m(x). comp_bins / suff_bins [bins]: comp_k and suff_k per bin. morf / lerf [fractions]: the curves.
    comprehensiveness / sufficiency: AOPC over the bins. area: the area between LeRF and MoRF.
    """

    full: float
    comp_bins: Float[np.ndarray, " bins"]
    suff_bins: Float[np.ndarray, " bins"]
    morf: Float[np.ndarray, " fractions"]
    lerf: Float[np.ndarray, " fractions"]

    @property
    def comprehensiveness(self) -> float:
        """AOPC of comprehensiveness: the mean of comp_k over the bins."""
        return float(self.comp_bins.mean())

    @property
    def sufficiency(self) -> float:
        """AOPC of sufficiency: the mean of suff_k over the bins."""
        return float(self.suff_bins.mean())

    @property
    def area(self) -> float:
        """∫ (LeRF − MoRF) df over [0, 1], trapezoid rule on FRACTIONS."""
        return trapezoid(self.lerf - self.morf, FRACTIONS)


def trapezoid(values: Float[np.ndarray, " steps"], grid: tuple[float, ...]) -> float:
    """Return ∫ values d(grid) by the trapezoid rule."""
    steps = np.diff(np.asarray(grid, dtype=float))
    return float(np.sum(steps * (values[1:] + values[:-1]) / 2.0))


def top_count(fraction: float, n: int) -> int:
    """Return how many of n tokens an AOPC bin of `fraction` holds: ⌈fraction · n⌉, at least 1 when n > 0."""
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(fraction * n - 1e-9)))  # 1e-9: 0.07 · 100 is 7.000000000000001


def curve_count(fraction: float, n: int) -> int:
    """Return how many of n tokens a deletion curve removes at `fraction`: fraction · n rounded half to even."""
    return int(round(fraction * n))


def score_rankings(
    probabilities: ProbabilityFn,
    pos: int,
    orders: Mapping[str, Int[np.ndarray, " n"]],
    *,
    bins: tuple[float, ...] = BINS,
    fractions: tuple[float, ...] = FRACTIONS,
) -> dict[str, RankingScores]:
    """Return each ranking's RankingScores on one example, scoring every distinct removal once.

    probabilities: m(x \\ r) for removal masks [rows, pos]; pos: the example's sequence length; orders: per
    ranking, the same n candidate positions sorted most relevant first.
    """
    plans: dict[str, list[Bool[np.ndarray, "steps pos"]]] = {}
    for name, order in orders.items():
        n = len(order)
        tops = [top_count(k, n) for k in bins]
        steps = [curve_count(f, n) for f in fractions]
        plans[name] = [
            removal_masks(pos, order, tops, most_relevant=True),  # x \ r_k
            removal_masks(pos, order, [n - t for t in tops], most_relevant=False),  # r_k alone
            removal_masks(pos, order, steps, most_relevant=True),  # MoRF
            removal_masks(pos, order, steps, most_relevant=False),  # LeRF
        ]
    every = np.concatenate([np.zeros((1, pos), dtype=bool), *(m for parts in plans.values() for m in parts)])
    unique, inverse = np.unique(every, axis=0, return_inverse=True)
    scored = probabilities(unique)[inverse.reshape(-1)]
    full, cursor = float(scored[0]), 1
    out: dict[str, RankingScores] = {}
    for name, parts in plans.items():
        values = []
        for part in parts:
            values.append(scored[cursor:cursor + len(part)])
            cursor += len(part)
        out[name] = RankingScores(full, full - values[0], full - values[1], values[2], values[3])
    return out
