"""Faithfulness of every installed analyzer with a readout, in one table.

Columns: on the default model (MiniLM-L6 with its sentiment head) over the first N held-out sentences
(interpret/data/sentiment_heldout.jsonl, both classes), by the project's evidence (`interpret.evidence`: ERASER
AOPC over the bins {1, 5, 10, 20, 50}%, ⌈k·n⌉ tokens each, tokens deleted, ties ranked by position):
comprehensiveness (↑), sufficiency (↓), area between LeRF and MoRF (↑); the share of sentences whose
comprehensiveness exceeds the mean of 10 seeded random rankings' ("beats random (comp)"), and the share the
report marks better than random (comp − suff above random's mean + sd); the analyzer's CPU time per example as
a multiple of one forward pass of model and head on the same batch, measured in the same process (the shared
trace capture is its own row: analyzers read it, so a method's whole cost is its multiple plus the capture's);
then evidence recovery (precision at k of the planted evidence) on each known-answer task. Rows, most
comprehensive first: every registered analyzer that provides a per-token readout, "random" (10 seeds) and, on
the tasks, the planted evidence.

Also: the time the evidence adds to a default report (`explain` with and without evidence), min and median
of the repeats.

    python benchmarks/faithfulness.py [--sentences 40] [--repeat 3] [--no-tasks] [--no-overhead]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import table, timings  # noqa: E402

import interpret  # noqa: E402
from interpret.analysis import registry  # noqa: E402
from interpret.analysis.run import required_names, run_context  # noqa: E402
from interpret.decision.decide import TargetRequest, decide  # noqa: E402
from interpret.evidence import evaluate_evidence  # noqa: E402
from interpret.evidence.suite import run_suite  # noqa: E402

DATA = Path(interpret.__file__).parent / "data" / "sentiment_heldout.jsonl"
SEEDS = 10
CAPTURE = "trace capture"


def readout_analyzers() -> list[str]:
    """Return the registered analyzers that provide a readout, in registry order."""
    return [name for name in registry.names() if "readout" in registry.get(name).provides]


def default_model_rows(
    names: list[str], sentences: int, batch: int = 8, progress: Path | None = None
) -> tuple[dict[str, dict[str, float]], dict[str, str], int]:
    """Return (per method the mean metrics over the held-out sentences done, the analyzers that failed on the
    default model with their one-line reason, how many sentences were done). With `progress`, the table so far
    is written there (JSON) after every batch, so an interrupted run still leaves its numbers."""
    from interpret.models.default_model import load_default
    from interpret.errors import InterpretError

    model, tokenizer, head = load_default("cpu")
    texts = [json.loads(line)["text"] for line in DATA.read_text(encoding="utf-8").splitlines()[:sentences]]
    hooks = list(dict.fromkeys(["*attn.hook_pattern", *required_names(names)]))
    per: dict[str, dict[str, list[float]]] = {name: {} for name in [*names, "random", CAPTURE]}
    failed: dict[str, str] = {}
    done = 0
    for start in range(0, len(texts), batch):
        chunk = texts[start:start + batch]
        forward = _forward_seconds(model, tokenizer, head, chunk)
        started = time.process_time()
        trace = interpret.collect(model, tokenizer, chunk, names=hooks)
        per[CAPTURE].setdefault("cost", []).append((time.process_time() - started) / forward)
        targets = [d.target for d in decide(model, trace, tokenizer, TargetRequest(), head)]
        ctx = run_context(trace, model, tokenizer, head=head, targets=targets)
        results = []
        for name in names:
            if name in failed:
                continue
            started = time.process_time()
            try:
                results.append(interpret.analyze(trace, name, context=ctx))
            except InterpretError as error:  # e.g. a decoder-only method on this encoder: say so, go on
                failed[name] = str(error).splitlines()[0]
                continue
            per[name].setdefault("cost", []).append((time.process_time() - started) / forward)
        started = time.perf_counter()
        evidence = evaluate_evidence(trace, results, ctx, seeds=SEEDS)
        per["random"].setdefault("seconds", []).append((time.perf_counter() - started) / len(chunk))
        for method in [*evidence.methods, evidence.random]:
            stats = per[method.method]
            stats.setdefault("comp", []).extend(method.comprehensiveness.tolist())
            stats.setdefault("suff", []).extend(method.sufficiency.tolist())
            stats.setdefault("area", []).extend(method.area.tolist())
            if method.method != "random":
                beats = method.comprehensiveness > evidence.random.comprehensiveness
                stats.setdefault("beats", []).extend(beats.astype(float).tolist())
                stats.setdefault("better", []).extend(evidence.better_than_random(method.method).astype(float).tolist())
        done += len(chunk)
        summary = _summarise(per)
        if progress is not None:
            progress.write_text(json.dumps({"sentences": done, "failed": failed, "methods": summary}, indent=1))
        print(f"  default model: {done}/{len(texts)} sentences", flush=True)
    return _summarise(per), failed, done


def _forward_seconds(model: torch.nn.Module, tokenizer: object, head: torch.nn.Module, texts: list[str]) -> float:
    """Return the CPU seconds of one plain forward pass of model and head on `texts` (one batch, no hooks):
    the least of three after a warm-up, so a passing stall does not deflate every multiple."""
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        return min(timings(lambda: head(model(**encoded).last_hidden_state, encoded["attention_mask"]), 3,
                           clock=time.process_time))


def _summarise(per: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Return per method the mean of each metric over sentences (of each batch's cost multiple: the batches
    are the same size, but for the last)."""
    return {
        name: {key: float(np.nanmean(values)) for key, values in stats.items()} for name, stats in per.items() if stats
    }


def evidence_overhead(sentences: int, repeat: int) -> tuple[list[float], list[float]]:
    """Return the wall times of a default `explain` (the default analyzers) on `sentences` sentences, without
    and with evidence, `repeat` times each (after one warm-up of each)."""
    from interpret.models.default_model import load_default

    model, tokenizer, head = load_default("cpu")
    texts = [json.loads(line)["text"] for line in DATA.read_text(encoding="utf-8").splitlines()[:sentences]]
    runs: dict[bool, list[float]] = {False: [], True: []}
    for with_evidence in (False, True):
        interpret.explain(model, tokenizer, texts, head=head, evidence=with_evidence)
    for _ in range(repeat):
        for with_evidence in (False, True):
            started = time.perf_counter()
            interpret.explain(model, tokenizer, texts, head=head, evidence=with_evidence)
            runs[with_evidence].append(time.perf_counter() - started)
    return runs[False], runs[True]


def _cell(value: float | None, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--tasks-n", type=int, default=16, help="examples with evidence per known-answer task")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--analyzers", default="", help="comma-separated subset (default: every readout analyzer)")
    parser.add_argument("--no-tasks", action="store_true", help="skip the known-answer tasks")
    parser.add_argument("--no-default", action="store_true", help="skip the default model (tasks only)")
    parser.add_argument("--no-overhead", action="store_true", help="skip the report-overhead timing")
    parser.add_argument("--progress", type=Path, default=None, help="write the default-model table so far here")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    names = [name for name in args.analyzers.split(",") if name] or readout_analyzers()
    print(f"analyzers with a readout: {', '.join(names)}", flush=True)
    started = time.perf_counter()
    task_rows = [] if args.no_tasks else run_suite(names, n=args.tasks_n)
    print(f"known-answer tasks: {time.perf_counter() - started:.1f} s", flush=True)
    tasks = list(dict.fromkeys(row.task for row in task_rows))
    recovery = {(row.task, row.method): row.recovery for row in task_rows}
    task_comp = {(row.task, row.method): row.comprehensiveness for row in task_rows}
    started = time.perf_counter()
    default, failed, done = ({}, {}, 0)
    if not args.no_default:
        default, failed, done = default_model_rows(names, args.sentences, progress=args.progress)
    for row in task_rows:
        if row.failed:
            print(f"  {row.method} refused the {row.task} task: {row.failed}")
    print(f"default model, {done} sentences: {time.perf_counter() - started:.1f} s", flush=True)
    for name, reason in failed.items():
        print(f"  {name} did not run on the default model: {reason}")
    headers = ["method", "comp AOPC ↑", "suff AOPC ↓", "area ↑", "beats random (comp)", "better (report)",
               "cost × forward", *[f"{task} P@k" for task in tasks], *[f"{task} comp" for task in tasks]]
    rows = []
    ranked = sorted(names, key=lambda name: -default.get(name, {}).get("comp", -math.inf))
    for name in [*ranked, "random", CAPTURE, *(["planted"] if task_rows else [])]:
        stats = default.get(name, {})
        rows.append([
            name, _cell(stats.get("comp")), _cell(stats.get("suff")), _cell(stats.get("area")),
            _share(stats.get("beats")), _share(stats.get("better")), _cell(stats.get("cost"), 1),
            *[_cell(recovery.get((task, name))) for task in tasks],
            *[_cell(task_comp.get((task, name))) for task in tasks],
        ])
    print(table(headers, rows))
    evidence_seconds = default.get("random", {}).get("seconds")
    print(f"(default model: {done} held-out sentences, random = mean of {SEEDS} seeded rankings; the whole evidence "
          f"computation, every method and the random rankings, took {_cell(evidence_seconds, 2)} s per sentence.)")
    accuracy = {row.task: row.accuracy for row in task_rows}
    if tasks:
        print("task model accuracy: " + ", ".join(f"{task} {accuracy[task]:.3f}" for task in tasks))
    if args.no_overhead:
        return
    without, with_evidence = evidence_overhead(min(args.sentences, 8), args.repeat)
    print(table(
        ["default report (8 sentences)", "min s", "median s"],
        [["without evidence", f"{min(without):.2f}", f"{statistics.median(without):.2f}"],
         ["with evidence", f"{min(with_evidence):.2f}", f"{statistics.median(with_evidence):.2f}"]],
    ))


if __name__ == "__main__":
    main()
