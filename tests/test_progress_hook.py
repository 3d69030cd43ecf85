"""The library's progress hook (`interpret.runtime.progress.Stage`): `explain` (analyzers, then evidence), the
cascading-randomisation sanity check (in examples) and the known-answer task suite (in tasks) open their stages
with their totals and advance to exactly those totals; the library draws and prints nothing itself (the CLI
draws the bars)."""

from __future__ import annotations

import pytest

import interpret
from interpret.evidence import DEFAULT_SEEDS
from interpret.evidence.sanity import block_modules, cascading_randomisation
from interpret.evidence.suite import run_suite
from interpret.reference.toy import marker_dataset, marker_task

TEXTS = list(marker_dataset(3, seed=1).texts)


class Recorder:
    """A Stage that records each stage as [description, total, unit, units advanced]."""

    def __init__(self) -> None:
        self.stages: list[list] = []

    def __call__(self, description: str, total: int, unit: str):
        self.stages.append([description, total, unit, 0])
        entry = self.stages[-1]

        def advance(n: int) -> None:
            entry[3] += n

        return advance


def test_explain_reports_its_analyzers_and_evidence_in_examples(capsys: pytest.CaptureFixture) -> None:
    model, tokenizer = marker_task()
    hook = Recorder()
    interpret.explain(model, tokenizer, TEXTS, ["rollout", "last_layer_attention"], progress=hook)
    assert hook.stages == [["analyze (2 analyzers × 3 examples)", 6, "example", 6],
                           [f"evidence (2 methods, {DEFAULT_SEEDS} random rankings)", 3, "example", 3]]
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_the_sanity_check_counts_each_analyzer_over_each_example_at_each_step(capsys: pytest.CaptureFixture) -> None:
    model, tokenizer = marker_task()
    hook = Recorder()
    cascading_randomisation(model, tokenizer, TEXTS, ["rollout"], progress=hook)
    steps = len(block_modules(model, tokenizer)) + 1
    assert hook.stages == [[f"sanity check (1 analyzers × 3 examples × {steps} steps)", 3 * steps, "example", 3 * steps]]
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_the_task_suite_counts_tasks(capsys: pytest.CaptureFixture) -> None:
    hook = Recorder()
    run_suite(["last_layer_attention"], tasks=["balance"], n=4, progress=hook)
    assert hook.stages == [["known-answer tasks (1 analyzers × 4 examples each)", 1, "task", 1]]
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
