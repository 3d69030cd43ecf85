"""What the report's evidence section draws, from an `interpret.evidence.Evidence`: rows of metrics ordered by
faithfulness beside the random baseline, each example's deletion curves as inline SVG polylines, and the mean
agreement matrix (the methods no better than random on an example are marked by the summary: `summary_tops`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interpret.evidence.evidence import Evidence, MethodEvidence, finite_mean

PLOT_WIDTH, PLOT_HEIGHT, PLOT_PAD = 320, 180, 28
# colour-blind-safe palette (Okabe & Ito); the random baseline is drawn grey and dashed
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")


@dataclass(frozen=True)
class MetricRow:
    """One method's metrics averaged over the report's examples (random: with its spread over seeds)."""

    method: str
    comprehensiveness: float | None
    sufficiency: float | None
    area: float | None
    gap: float | None
    better_examples: int | None  # examples on which it beat random (None for the random row)
    spread: dict[str, float | None]


@dataclass(frozen=True)
class Curve:
    """One polyline of a curve plot: its label, colour, dash and SVG points "x,y x,y ..."."""

    label: str
    colour: str
    dashed: bool
    points: str


@dataclass(frozen=True)
class EvidenceView:
    """The evidence section's content."""

    removal: str
    seeds: int
    bins: str
    rows: list[MetricRow]
    random: MetricRow
    curves: list[dict[str, list[Curve]]]  # per example: {"MoRF": [...], "LeRF": [...]}
    scales: list[tuple[str, str]]  # per example: the y axis's top and bottom labels (m's range: [0, 1] for a probability)
    agreement_methods: list[str]
    spearman: list[list[float | None]]
    kendall: list[list[float | None]]
    skipped: list[tuple[str, str]]
    measure: str = "probability"  # what m is (`Evidence.measure`): "probability", or "logit" for a score
    width: int = PLOT_WIDTH
    height: int = PLOT_HEIGHT
    pad: int = PLOT_PAD


def evidence_view(evidence: Evidence) -> EvidenceView:
    """Return the EvidenceView of `evidence`: methods ordered by faithfulness (mean comp − suff)."""
    ranked = evidence.ranked()
    batch = len(evidence.full)
    colours = {m.method: PALETTE[i % len(PALETTE)] for i, m in enumerate(evidence.methods)}
    curves, scales = [], []
    for b in range(batch):
        low, high = _range(evidence, b)
        per_kind: dict[str, list[Curve]] = {}
        for kind, key in (("MoRF (most relevant removed first)", "morf"), ("LeRF (least relevant removed first)", "lerf")):
            lines = [Curve(m.method, colours[m.method], False, _points(getattr(m, key)[b], evidence.fractions, low, high))
                     for m in ranked]
            lines.append(Curve("random", "#777777", True,
                               _points(getattr(evidence.random, key)[b], evidence.fractions, low, high)))
            per_kind[kind] = lines
        curves.append(per_kind)
        scales.append((f"{high:.3g}", f"{low:.3g}"))
    return EvidenceView(
        removal=evidence.removal,
        seeds=evidence.seeds,
        bins=", ".join(f"{round(100 * k)}%" for k in evidence.bins),
        rows=[_row(m, int(np.sum(evidence.better_than_random(m.method)))) for m in ranked],
        random=_row(evidence.random, None),
        curves=curves,
        scales=scales,
        measure=evidence.measure,
        agreement_methods=[m.method for m in evidence.methods],
        spearman=_mean_matrix(evidence.spearman),
        kendall=_mean_matrix(evidence.kendall),
        skipped=list(evidence.skipped),
    )


def _row(method: MethodEvidence, better: int | None) -> MetricRow:
    spread = {key: finite_mean(value, None) for key, value in method.spread.items()}
    means = [finite_mean(values, None) for values in (method.comprehensiveness, method.sufficiency, method.area, method.gap)]
    return MetricRow(method.method, *means, better, spread)


def _mean_matrix(values: np.ndarray) -> list[list[float | None]]:
    count = values.shape[-1]
    return [[finite_mean(values[:, i, j], None) for j in range(count)] for i in range(count)]


def _range(evidence: Evidence, example: int) -> tuple[float, float]:
    """Return the y axis's (bottom, top) for one example's curves: [0, 1] for a probability; for a logit, the range
    its curves span (one unit either side of a flat one)."""
    if evidence.measure == "probability":
        return 0.0, 1.0
    values = np.concatenate([np.ravel(getattr(m, key)[example]) for m in (*evidence.methods, evidence.random)
                             for key in ("morf", "lerf")])
    values = values[np.isfinite(values)]
    if not len(values):
        return 0.0, 1.0
    low, high = float(values.min()), float(values.max())
    return (low - 1.0, high + 1.0) if high - low < 1e-12 else (low, high)


def _points(curve: np.ndarray, fractions: tuple[float, ...], low: float = 0.0, high: float = 1.0) -> str:
    """Return SVG points of `curve` (m, drawn from `low` at the bottom to `high` at the top) over `fractions` in the
    plot's frame."""
    inner_w, inner_h = PLOT_WIDTH - 2 * PLOT_PAD, PLOT_HEIGHT - 2 * PLOT_PAD
    points = []
    for fraction, value in zip(fractions, curve):
        if not np.isfinite(value):
            continue
        x = PLOT_PAD + fraction * inner_w
        y = PLOT_PAD + (1.0 - float(np.clip((value - low) / (high - low), 0.0, 1.0))) * inner_h
        points.append(f"{x:.1f},{y:.1f}")
    return " ".join(points)
