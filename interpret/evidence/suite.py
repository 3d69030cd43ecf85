"""The known-answer suite: every method on every task of `interpret.evidence.tasks`, scored by evidence
recovery (precision at k of the planted evidence) beside a random ranking and the planted ranking itself,
and by the faithfulness metrics of `interpret.evidence` on the same examples."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interpret.analyze import analyze
from interpret.analyze.result import AnalyzerResult, NamedArray, Readout
from interpret.analyze.run import required_names, run_context
from interpret.collect import collect
from interpret.errors import AnalyzerError
from interpret.evidence.evidence import evaluate_evidence
from interpret.evidence.removal import candidates
from interpret.evidence.tasks import TASKS, evidence_recovery, task_accuracy, task_dataset, task_model

PLANTED = "planted"


@dataclass(frozen=True)
class TaskRow:
    """One method on one task: evidence recovery (precision@k), comp / suff AOPC, area, seconds per example;
    `failed` holds the one-line reason when the method refused the task's examples (its numbers are NaN)."""

    task: str
    method: str
    recovery: float
    comprehensiveness: float
    sufficiency: float
    area: float
    seconds_per_example: float
    accuracy: float
    failed: str = ""


def run_suite(
    analyzers: Sequence[str], *, tasks: Sequence[str] = tuple(TASKS), n: int = 16, seed: int = 0
) -> list[TaskRow]:
    """Return a TaskRow per task × (each analyzer, "random", "planted"), on `n` examples that hold evidence."""
    rows: list[TaskRow] = []
    for task in tasks:
        model, tokenizer = task_model(task)
        accuracy = task_accuracy(model, tokenizer, task_dataset(task, 400, seed + 1000))
        pool = task_dataset(task, 4 * n, seed + 7)
        keep = [i for i, found in enumerate(pool.evidence) if found][:n]
        texts = [pool.texts[i] for i in keep]
        evidence = [pool.evidence[i] for i in keep]
        names = list(dict.fromkeys(["*attn.hook_pattern", *required_names(analyzers)]))
        trace = collect(model, tokenizer, texts, names=names)
        ctx = run_context(trace, model, tokenizer, seed=seed)
        positions = [candidates(trace.encoded, b, ctx.targets[b]) for b in range(len(texts))]
        results: list[AnalyzerResult] = []
        seconds: dict[str, float] = {}
        for name in analyzers:
            started = time.perf_counter()
            try:
                results.append(analyze(trace, name, context=ctx))
            except AnalyzerError as error:  # e.g. ALTI on an example whose contributions all clip to zero
                rows.append(TaskRow(task, name, *([float("nan")] * 4), 0.0, accuracy, str(error).splitlines()[0]))
                continue
            seconds[name] = (time.perf_counter() - started) / len(texts)
        results.append(_planted(trace, evidence))
        found = evaluate_evidence(trace, results, ctx, seeds=5)
        random_recovery = _random_recovery(positions, evidence, seed)
        for result, metrics in zip(results, found.methods):
            rows.append(TaskRow(
                task, result.analyzer, evidence_recovery(result.readout, positions, evidence),
                _mean(metrics.comprehensiveness), _mean(metrics.sufficiency), _mean(metrics.area),
                seconds.get(result.analyzer, 0.0), accuracy,
            ))
        rows.append(TaskRow(
            task, "random", random_recovery, _mean(found.random.comprehensiveness), _mean(found.random.sufficiency),
            _mean(found.random.area), 0.0, accuracy,
        ))
    return rows


def _planted(trace: object, evidence: Sequence[Sequence[int]]) -> AnalyzerResult:
    """The right explanation by construction: 1 on the planted evidence, 0 elsewhere."""
    values = np.zeros(tuple(trace.encoded.attention_mask.shape))
    for b, found in enumerate(evidence):
        values[b, list(found)] = 1.0
    return AnalyzerResult(
        analyzer=PLANTED, version="1", params={}, arrays={"readout": NamedArray(values, ("batch", "key"))},
        tokens=tuple(tuple(row) for row in trace.encoded.tokens), readout_of=Readout("readout"),
    )


def _random_recovery(positions: Sequence[np.ndarray], evidence: Sequence[Sequence[int]], seed: int, draws: int = 50) -> float:
    """Return the mean precision at k of `draws` uniformly random rankings per example."""
    rng = np.random.default_rng(seed)
    scores = []
    for candidates_b, found in zip(positions, evidence):
        for _ in range(draws):
            top = rng.permutation(candidates_b)[: len(found)]
            scores.append(len(set(top.tolist()) & set(found)) / len(found))
    return float(np.mean(scores))


def _mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")
