"""`evaluate_evidence`: how faithful each result's readout is on these very inputs, against random rankings.

For every result that declares a readout on the input side, and for `seeds` random rankings of the same
candidates, each example is re-run with tokens removed (`interpret.evidence.removal`) and scored by the
metrics of `interpret.evidence.metrics`; the random rankings (seeded by the run's seed and the example's own
inputs, so an example's evidence does not depend on its batch) give the baseline (their mean and standard
deviation over seeds). Methods are ordered by faithfulness, the mean over examples of comp − suff
(comprehensiveness AOPC minus sufficiency AOPC: both of DeYoung et al. 2020 in one number, higher better).
A method is *no better than random* on an example when its comp − suff does not exceed the random
rankings' mean comp − suff by more than their standard deviation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from jaxtyping import Bool, Float

from interpret.analysis.contract import RunContext
from interpret.analysis.result import AnalyzerResult
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.evidence.agreement import rank_agreement
from interpret.evidence.metrics import BINS, FRACTIONS, RankingScores, score_rankings
from interpret.evidence.ranking import order_of
from interpret.evidence.removal import REMOVALS, RemovalScorer, candidates, decoder_side, default_removal
from interpret.inputs import Encoded
from interpret.request import DEFAULT_SEEDS
from interpret.runtime.progress import Stage, begin
from interpret.trace import Trace

RANDOM = "random"
SCALAR_METRICS = ("comprehensiveness", "sufficiency", "area")  # one value per example
METRIC_FIELDS = (*SCALAR_METRICS, "comp_bins", "suff_bins", "morf", "lerf")  # MethodEvidence's, in field order


@dataclass(frozen=True)
class MethodEvidence:
    """One method's metrics per example (random: the mean over seeds; `spread` their standard deviation).

    comprehensiveness / sufficiency / area: [batch]; comp_bins / suff_bins: [batch, bins];
    morf / lerf: [batch, fractions]. NaN for an example without candidates to remove.
    """

    method: str
    comprehensiveness: Float[np.ndarray, " batch"]
    sufficiency: Float[np.ndarray, " batch"]
    area: Float[np.ndarray, " batch"]
    comp_bins: Float[np.ndarray, "batch bins"]
    suff_bins: Float[np.ndarray, "batch bins"]
    morf: Float[np.ndarray, "batch fractions"]
    lerf: Float[np.ndarray, "batch fractions"]
    spread: dict[str, Float[np.ndarray, " batch"]] = field(default_factory=dict)

    @property
    def gap(self) -> Float[np.ndarray, " batch"]:
        """comp − suff per example (higher: more faithful)."""
        return self.comprehensiveness - self.sufficiency

    def to_dict(self) -> dict[str, Any]:
        """Return every metric as plain lists (NaN as None)."""
        out = {"method": self.method, **{key: _plain(getattr(self, key)) for key in METRIC_FIELDS}}
        if self.spread:
            out["spread"] = {key: _plain(value) for key, value in self.spread.items()}
        return out


@dataclass(frozen=True)
class Evidence:
    """The faithfulness evidence of a report.

    removal: how tokens were removed; bins / fractions: AOPC bins and curve fractions; seeds: random rankings.
    full: [batch] m(x), the explained target's probability on the full input (its logit where the decision has
    no probability: `measure`); candidates: [batch] how many
    tokens could be removed. methods: in the order of the results; random: the baseline (mean over seeds,
    spread = standard deviation). spearman / kendall: [batch, method, method] agreement of the methods'
    readouts (the order of `methods`). skipped: (method, reason) for results without a usable readout.
    """

    removal: str
    bins: tuple[float, ...]
    fractions: tuple[float, ...]
    seeds: int
    full: Float[np.ndarray, " batch"]
    candidates: tuple[int, ...]
    methods: tuple[MethodEvidence, ...]
    random: MethodEvidence
    spearman: Float[np.ndarray, "batch method method"]
    kendall: Float[np.ndarray, "batch method method"]
    skipped: tuple[tuple[str, str], ...] = ()
    measure: str = "probability"  # what m is: "probability", or "logit" for a decision without one (a score)

    def ranked(self) -> list[MethodEvidence]:
        """Return the methods ordered by faithfulness: mean comp − suff over examples, highest first."""
        return sorted(self.methods, key=lambda method: -finite_mean(method.gap, float("-inf")))

    def better_than_random(self, method: str) -> Bool[np.ndarray, " batch"]:
        """Return [batch] bool: the method's comp − suff exceeds random's mean by more than random's spread."""
        found = next(m for m in self.methods if m.method == method)
        threshold = self.random.gap + self.random.spread["gap"]
        return np.asarray(found.gap > threshold)

    def no_better_than_random(self, example: int) -> list[str]:
        """Return the methods evaluated on `example` (a finite comp − suff) that are not better than random there."""
        return [m.method for m in self.methods
                if np.isfinite(m.gap[example]) and not self.better_than_random(m.method)[example]]

    def to_dict(self) -> dict[str, Any]:
        """Return every metric as plain JSON-ready values."""
        return {
            "removal": self.removal,
            "bins": list(self.bins),
            "fractions": list(self.fractions),
            "seeds": self.seeds,
            "measure": self.measure,
            "full_probability": _plain(self.full),
            "candidates": list(self.candidates),
            "methods": [m.to_dict() for m in self.methods],
            "random": self.random.to_dict(),
            "order": [m.method for m in self.ranked()],
            "better_than_random": {m.method: [bool(v) for v in self.better_than_random(m.method)] for m in self.methods},
            "agreement": {
                "methods": [m.method for m in self.methods],
                "spearman": _plain(self.spearman),
                "kendall": _plain(self.kendall),
            },
            "skipped": [list(item) for item in self.skipped],
        }


def evaluate_evidence(
    trace: Trace,
    results: Sequence[AnalyzerResult],
    ctx: RunContext,
    *,
    removal: str | None = None,
    seeds: int = DEFAULT_SEEDS,
    bins: tuple[float, ...] = BINS,
    fractions: tuple[float, ...] = FRACTIONS,
    progress: Stage | None = None,
) -> Evidence:
    """Return the Evidence of every result's readout on `trace`'s examples (ctx: the run context with the model).

    removal: "delete", "mask" or "zero"; None: `default_removal`. seeds: random rankings (≥ 2 for a spread).
    progress: the progress hook (`interpret.runtime.progress`), one unit per example scored.
    """
    encoded = trace.encoded
    chosen = removal or default_removal(encoded)
    if chosen not in REMOVALS:
        raise AnalyzerError(f"removal {chosen!r} is not one of {', '.join(REMOVALS)}.")
    if seeds < 2:
        raise AnalyzerError(f"seeds={seeds}: the random baseline needs at least 2 seeds for its spread.")
    scorer = RemovalScorer(ctx, encoded, chosen)
    on_decoder = decoder_side(ctx, encoded)
    readouts: dict[str, np.ndarray] = {}
    skipped: list[tuple[str, str]] = []
    for result in results:
        declared = result.readout_of
        if declared is None or result.readout is None:
            skipped.append((result.analyzer, "declares no readout"))
        elif declared.side != "main":
            skipped.append((result.analyzer, "its readout runs over the decoder's tokens, which are not removed"))
        else:
            readouts[result.analyzer] = np.asarray(result.readout, dtype=float)
    if not readouts:
        raise AnalyzerError("no result declares a readout over the input tokens, so there is nothing to evaluate.")
    names = list(readouts)
    batch, pos = encoded.batch, encoded.pos
    per_method: dict[str, list[RankingScores | None]] = {name: [] for name in [*names, *_random_names(seeds)]}
    full = np.full(batch, np.nan)
    counts: list[int] = []
    spearman = np.full((batch, len(names), len(names)), np.nan)
    kendall = np.full_like(spearman, np.nan)
    advance = begin(progress, f"evidence ({len(names)} methods, {seeds} random rankings)", batch)
    for example in range(batch):
        positions = candidates(encoded, example, ctx.targets[example], decoder_side=on_decoder)
        counts.append(len(positions))
        if len(positions) == 0:
            for values in per_method.values():
                values.append(None)
            advance(1)
            continue
        orders = {name: order_of(readouts[name][example], positions) for name in names}
        rng = np.random.default_rng([ctx.seed, _content_seed(encoded, example)])
        for name in _random_names(seeds):
            orders[name] = rng.permutation(positions)
        scored = score_rankings(
            lambda removed, e=example: scorer.probabilities(e, removed), pos, orders, bins=bins, fractions=fractions
        )
        full[example] = next(iter(scored.values())).full
        for name, scores in scored.items():
            per_method[name].append(scores)
        spearman[example], kendall[example] = rank_agreement([readouts[name][example][positions] for name in names])
        advance(1)
    methods = tuple(_stack(name, per_method[name], len(bins), len(fractions)) for name in names)
    random_runs = [_stack(name, per_method[name], len(bins), len(fractions)) for name in _random_names(seeds)]
    return Evidence(
        removal=chosen, bins=tuple(bins), fractions=tuple(fractions), seeds=seeds, full=full,
        candidates=tuple(counts), methods=methods, random=_mean_of(random_runs), spearman=spearman,
        kendall=kendall, skipped=tuple(skipped), measure=scorer.measure,
    )


def evidence_or_reason(
    trace: Trace, results: Sequence[AnalyzerResult], ctx: RunContext, removal: str | None, seeds: int,
    progress: Stage | None = None,
) -> tuple[Evidence | None, str | None]:
    """Return (the Evidence, None), or (None, why none was computed) when the inputs or results allow none."""
    encoded = trace.encoded
    if ctx.runner is None:
        return None, "not computed: no model to re-run"
    if encoded.reads_media:
        return None, "not computed: removing tokens applies to text inputs, and this model reads pixels or audio"
    if not any(r.readout_of is not None and r.readout_of.side == "main" for r in results):
        return None, "not computed: no method declares a readout over the input tokens"
    if any(target.kind == "none" for target in ctx.targets):
        return None, "not computed: an example has no decision to score"
    return evaluate_evidence(trace, results, ctx, removal=removal, seeds=seeds, progress=progress), None


def _content_seed(encoded: Encoded, example: int) -> int:
    """Return a seed drawn from the example's real inputs (token ids, or embeddings), so that its random rankings,
    like the rest of its evidence, are the same whatever batch or batch position it is evaluated in."""
    inputs = encoded.input_ids if encoded.input_ids is not None else encoded.inputs_embeds
    real = encoded.attention_mask[example].bool()
    data = to_numpy(inputs[example][real].contiguous()).tobytes()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


def _random_names(seeds: int) -> list[str]:
    return [f"{RANDOM}#{seed}" for seed in range(seeds)]


def _stack(name: str, scores: list[RankingScores | None], bins: int, fractions: int) -> MethodEvidence:
    """Return the MethodEvidence of one method's scores per example (None: an example without candidates: NaN)."""
    shapes = {"comp_bins": (bins,), "suff_bins": (bins,), "morf": (fractions,), "lerf": (fractions,)}
    return MethodEvidence(name, **{
        key: np.stack([np.full(shapes.get(key, ()), np.nan) if s is None else np.asarray(getattr(s, key), dtype=float)
                       for s in scores])
        for key in METRIC_FIELDS
    })


def _mean_of(runs: list[MethodEvidence]) -> MethodEvidence:
    stacked = {key: np.stack([getattr(run, key) for run in runs]) for key in METRIC_FIELDS}
    gaps = np.stack([run.gap for run in runs])
    spread = {key: stacked[key].std(0, ddof=1) for key in SCALAR_METRICS}
    spread["gap"] = gaps.std(0, ddof=1)
    return MethodEvidence(method=RANDOM, **{key: stacked[key].mean(0) for key in METRIC_FIELDS}, spread=spread)


def finite_mean(values: np.ndarray, empty: Any = float("nan")) -> Any:
    """Return the mean of the finite entries of `values` (any shape) as a float; `empty` when there are none."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(finite.mean()) if finite.size else empty


def _plain(values: Any) -> Any:
    array = np.asarray(values, dtype=float)
    if array.ndim == 0:
        return None if not np.isfinite(array) else float(array)
    return [_plain(row) for row in array]
