"""Agreement between methods: rank correlation of every pair of readouts on one example.

Spearman's ρ (the Pearson correlation of the ranks, ties given their mean rank) and Kendall's τ_b (pairs
concordant minus discordant, normalised for ties), both over the example's removable candidate positions, as
scipy.stats.spearmanr and scipy.stats.kendalltau compute them on each readout's tie groups
(`interpret.evidence.ranking.tie_groups`: scores within its tolerance are tied, as every ranking of a readout
ties them). NaN when a readout is constant there (no ranking to compare).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from jaxtyping import Float
from scipy import stats

from interpret.evidence.ranking import tie_groups


def rank_agreement(
    readouts: Sequence[Float[np.ndarray, " n"]],
) -> tuple[Float[np.ndarray, "method method"], Float[np.ndarray, "method method"]]:
    """Return (Spearman ρ, Kendall τ_b) [method, method] of every pair of readouts over the same n positions."""
    count = len(readouts)
    readouts = [-tie_groups(readout).astype(float) for readout in readouts]  # higher score, higher value
    rho = np.eye(count)
    tau = np.eye(count)
    for i in range(count):
        for j in range(i + 1, count):
            rho[i, j] = rho[j, i] = _correlation(stats.spearmanr, readouts[i], readouts[j])
            tau[i, j] = tau[j, i] = _correlation(stats.kendalltau, readouts[i], readouts[j])
    return rho, tau


def _correlation(function: object, first: np.ndarray, second: np.ndarray) -> float:
    if len(first) < 2 or np.ptp(first) == 0 or np.ptp(second) == 0:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = function(first, second)[0]  # type: ignore[operator]
    return float(value)
