"""Each faithfulness metric equals a direct statement of its formula on a bag-of-words classifier whose
answer is known by hand: m(x) = σ(b + Σ_{t kept} w_t), so deleting a token changes the logit by exactly w_t."""

from __future__ import annotations

import math

import numpy as np
import pytest

from interpret.evidence.agreement import rank_agreement
from interpret.evidence.metrics import BINS, FRACTIONS, score_rankings, trapezoid
from interpret.evidence.ranking import order_of

# Ten word positions after a [CLS] at 0 (never a candidate); weights chosen by hand.
WEIGHTS = np.array([0.0, 2.0, -1.0, 0.5, 0.0, 3.0, -0.5, 1.0, 0.25, -2.0, 0.75])
BIAS = -1.0
POS = len(WEIGHTS)
CANDIDATES = np.arange(1, POS)


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


def m(kept: set[int]) -> float:
    """The bag-of-words probability with only the tokens in `kept` (plus [CLS]) present."""
    return sigmoid(BIAS + sum(WEIGHTS[t] for t in kept))


def bag_of_words(removed: np.ndarray) -> np.ndarray:
    calls.append(len(removed))
    return np.array([sigmoid(BIAS + WEIGHTS[~row].sum()) for row in removed])


calls: list[int] = []
ALL = set(CANDIDATES.tolist())
# The right ranking (by weight): 5 (3.0), 1 (2.0), 7 (1.0), 10 (0.75), 3 (0.5), 8 (0.25), 4 (0), 6, 2, 9.
RIGHT = [5, 1, 7, 10, 3, 8, 4, 6, 2, 9]


def test_comprehensiveness_and_sufficiency_equal_eraser_by_hand() -> None:
    order = order_of(WEIGHTS, CANDIDATES)
    assert order.tolist() == RIGHT
    scores = score_rankings(bag_of_words, POS, {"right": order})["right"]
    full = m(ALL)
    # 10 candidates: bins 1%, 5%, 10% hold ⌈0.1⌉ = ⌈0.5⌉ = ⌈1⌉ = 1 token, 20% two, 50% five.
    tops = [RIGHT[:1], RIGHT[:1], RIGHT[:1], RIGHT[:2], RIGHT[:5]]
    comp = [full - m(ALL - set(top)) for top in tops]
    suff = [full - m(set(top)) for top in tops]
    assert scores.full == pytest.approx(full, abs=1e-12)
    np.testing.assert_allclose(scores.comp_bins, comp, atol=1e-12)
    np.testing.assert_allclose(scores.suff_bins, suff, atol=1e-12)
    assert scores.comprehensiveness == pytest.approx(sum(comp) / 5, abs=1e-12)
    assert scores.sufficiency == pytest.approx(sum(suff) / 5, abs=1e-12)
    # Known by hand: removing token 5 alone drops the logit from 3 (−1 + 4) to 0.
    assert comp[0] == pytest.approx(sigmoid(3.0) - sigmoid(0.0), abs=1e-12)


def test_curves_and_area_between_them() -> None:
    order = order_of(WEIGHTS, CANDIDATES)
    scores = score_rankings(bag_of_words, POS, {"right": order})["right"]
    morf = [m(ALL - set(RIGHT[:k])) for k in range(11)]  # f = k/10 of 10 tokens is k tokens
    lerf = [m(ALL - set(RIGHT[::-1][:k])) for k in range(11)]
    np.testing.assert_allclose(scores.morf, morf, atol=1e-12)
    np.testing.assert_allclose(scores.lerf, lerf, atol=1e-12)
    area = sum(0.1 * ((lerf[k] - morf[k]) + (lerf[k + 1] - morf[k + 1])) / 2 for k in range(10))
    assert scores.area == pytest.approx(area, abs=1e-12)
    assert scores.area > 0.3  # the right ranking separates the curves widely


def test_right_ranking_beats_reversed_and_random() -> None:
    right = order_of(WEIGHTS, CANDIDATES)
    rng = np.random.default_rng(0)
    orders = {"right": right, "reversed": right[::-1], **{f"random{s}": rng.permutation(CANDIDATES) for s in range(20)}}
    scores = score_rankings(bag_of_words, POS, orders)
    randoms = [scores[f"random{s}"] for s in range(20)]
    assert scores["right"].comprehensiveness > max(r.comprehensiveness for r in randoms)
    assert scores["right"].sufficiency < min(r.sufficiency for r in randoms)
    assert scores["reversed"].area == pytest.approx(-scores["right"].area, abs=1e-12)


def test_every_removal_scored_once_in_one_call() -> None:
    calls.clear()
    right = order_of(WEIGHTS, CANDIDATES)
    score_rankings(bag_of_words, POS, {"a": right, "b": right[::-1]})
    assert len(calls) == 1
    # distinct masks: the two rankings share the empty and the full removal, so far fewer than 2·(5+5+11+11)+1
    assert calls[0] < 2 * (2 * len(BINS) + 2 * len(FRACTIONS)) + 1


def test_bins_for_a_long_input() -> None:
    weights = np.linspace(1.0, -1.0, 200)
    positions = np.arange(200)

    def linear(removed: np.ndarray) -> np.ndarray:
        return np.array([weights[~row].sum() for row in removed])

    scores = score_rankings(linear, 200, {"right": order_of(weights, positions)})["right"]
    expected = [weights[:count].sum() for count in (2, 10, 20, 40, 100)]  # ⌈k·200/100⌉ tokens removed
    np.testing.assert_allclose(scores.comp_bins, expected, atol=1e-9)


def test_trapezoid() -> None:
    assert trapezoid(np.array(FRACTIONS), FRACTIONS) == pytest.approx(0.5, abs=1e-12)


def test_rank_agreement_equals_direct_formulas() -> None:
    first = np.array([0.9, 0.1, 0.5, 0.3, 0.7])
    second = np.array([0.8, 0.2, 0.3, 0.4, 0.9])
    rho, tau = rank_agreement([first, second, -first])
    # Spearman without ties: 1 − 6 Σ d² / (n (n² − 1)); ranks (5,1,3,2,4) vs (4,1,2,3,5): Σd² = 1+0+1+1+1 = 4
    assert rho[0, 1] == pytest.approx(1 - 6 * 4 / (5 * 24), abs=1e-12)
    # Kendall: (concordant − discordant) / C(5, 2)
    pairs = [(i, j) for i in range(5) for j in range(i + 1, 5)]
    sign = [np.sign(first[i] - first[j]) * np.sign(second[i] - second[j]) for i, j in pairs]
    assert tau[0, 1] == pytest.approx(sum(sign) / len(pairs), abs=1e-12)
    assert rho[0, 2] == pytest.approx(-1.0) and tau[0, 2] == pytest.approx(-1.0)
    assert np.isnan(rank_agreement([first, np.ones(5)])[0][0, 1])
