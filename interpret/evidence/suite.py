"""The known-answer suite: every method on every task of `interpret.evidence.tasks`, scored by evidence
recovery (precision at k of the planted evidence) beside a random ranking and the planted ranking itself,
and by the faithfulness metrics of `interpret.evidence` on the same examples."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from interpret.analysis import analyze
from interpret.analysis.result import AnalyzerResult, NamedArray, Readout
from interpret.analysis.run import required_names, run_context
from interpret.capture import collect
from interpret.data.shipped import write_weights
from interpret.errors import AnalyzerError
from interpret.evidence.evidence import SCALAR_METRICS, evaluate_evidence, finite_mean
from interpret.evidence.removal import candidates
from interpret.evidence.tasks import TASKS, evidence_recovery, task_accuracy, task_dataset, task_model, weights_name
from interpret.runtime.progress import Stage, begin

PLANTED = "planted"
MIN_ACCURACY = 0.95  # on 400 held-out examples
MIN_MARGIN = 0.5  # of the planted ranking's comp − suff over random rankings' (both lie in [-1, 1])


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


@dataclass(frozen=True)
class PlantedCheck:
    """Whether a task's model uses the evidence planted in its examples, so that methods may be scored on it:
    its accuracy on held-out examples, and the faithfulness (comprehensiveness − sufficiency AOPC, the mean
    over examples) of the planted ranking beside that of random rankings. A model that decides by the
    evidence loses its decision when the evidence is deleted and keeps it when only the evidence is kept."""

    accuracy: float
    planted: float
    random: float

    @property
    def failure(self) -> str:
        """Return '' when the model passes, else the one-line reason it does not."""
        if not self.accuracy >= MIN_ACCURACY:
            return f"the task model's held-out accuracy is {self.accuracy:.3f}, under {MIN_ACCURACY}"
        if not self.planted - self.random >= MIN_MARGIN:
            return (f"the task model does not use the planted evidence: deleting it is worth {self.planted:.3f} "
                    f"(comp − suff), random tokens {self.random:.3f}; need {MIN_MARGIN} more")
        return ""


def run_suite(
    analyzers: Sequence[str], *, tasks: Sequence[str] = tuple(TASKS), n: int = 16, seed: int = 0,
    progress: Stage | None = None,
) -> list[TaskRow]:
    """Return a TaskRow per task × (each analyzer, "random", "planted"), on `n` examples that hold evidence,
    each task on its shipped model (`task_model`); `progress`: the progress hook (`interpret.runtime.progress`), in tasks."""
    advance, rows = begin(progress, f"known-answer tasks ({len(analyzers)} analyzers × {n} examples each)",
                          len(tasks), "task"), []
    for task in tasks:
        rows += score_task(task, *task_model(task), analyzers, n=n, seed=seed)
        advance(1)
    return rows


def score_task(
    task: str, model: Any, tokenizer: Any, analyzers: Sequence[str] = (), *, n: int = 16, seed: int = 0
) -> list[TaskRow]:
    """Return `task`'s TaskRows on `model`: each analyzer's, then the planted ranking's and random rankings'.

    When the model fails the planted-evidence check (`planted_check`), no method is scored: each analyzer's
    row is NaN with the reason in `failed`, beside the planted and random rows that show why."""
    accuracy = task_accuracy(model, tokenizer, task_dataset(task, 400, seed + 1000))
    pool = task_dataset(task, 4 * n, seed + 7)
    keep = [i for i, found in enumerate(pool.evidence) if found][:n]
    texts = [pool.texts[i] for i in keep]
    evidence = [pool.evidence[i] for i in keep]
    names = list(dict.fromkeys(["*attn.hook_pattern", *required_names(analyzers)]))
    trace = collect(model, tokenizer, texts, names=names)
    ctx = run_context(trace, model, tokenizer, seed=seed)
    positions = [candidates(trace.encoded, b, ctx.targets[b]) for b in range(len(texts))]
    rows: list[TaskRow] = []
    results: list[AnalyzerResult] = []
    seconds: dict[str, float] = {}
    for name in analyzers:
        started = time.perf_counter()
        try:
            results.append(analyze(trace, name, context=ctx))
        except AnalyzerError as error:  # e.g. ALTI on an example whose contributions all clip to zero
            rows.append(_refused(task, name, accuracy, str(error).splitlines()[0]))
            continue
        seconds[name] = (time.perf_counter() - started) / len(texts)
    results.append(_planted(trace, evidence))
    found = evaluate_evidence(trace, results, ctx, seeds=5)
    recovery = [*(evidence_recovery(result.readout, positions, evidence) for result in results),
                _random_recovery(positions, evidence, seed)]
    for metrics, recovered in zip([*found.methods, found.random], recovery):
        means = [finite_mean(getattr(metrics, key)) for key in SCALAR_METRICS]
        rows.append(TaskRow(task, metrics.method, recovered, *means, seconds.get(metrics.method, 0.0), accuracy))
    failure = planted_check(rows).failure
    if failure:  # the methods' numbers would describe a model that does not decide by the evidence
        return [_refused(task, row.method, accuracy, failure) if row.method in analyzers else row for row in rows]
    return rows


def planted_check(rows: Sequence[TaskRow]) -> PlantedCheck:
    """Return the planted-evidence check of one task's rows (those of `score_task`)."""
    by_method = {row.method: row for row in rows}
    planted, random = by_method[PLANTED], by_method["random"]
    return PlantedCheck(
        planted.accuracy, planted.comprehensiveness - planted.sufficiency, random.comprehensiveness - random.sufficiency
    )


def ship(task: str, model: Any, tokenizer: Any, *, seed: int = 0, directory: Path | None = None) -> PlantedCheck:
    """Return `model`'s planted-evidence check on `task`; only a model that passes is written as the task's
    shipped weights (`weights_name`, in `directory`, default the package's interpret/data/models, with its
    sha256 in SHA256SUMS). A model that fails is refused: nothing is written."""
    check = planted_check(score_task(task, model, tokenizer, seed=seed))
    if not check.failure:
        numbers = {"accuracy": check.accuracy, "planted": check.planted, "random": check.random}
        metadata = {"task": task, "seed": str(seed), **{key: repr(value) for key, value in numbers.items()}}
        write_weights(weights_name(task), model.state_dict(), metadata, directory)
    return check


def _refused(task: str, method: str, accuracy: float, reason: str) -> TaskRow:
    return TaskRow(task, method, *([float("nan")] * 4), 0.0, accuracy, reason)


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
