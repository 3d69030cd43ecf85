"""Progress bars of the long commands (issue 27, the first look: `report` with evidence, `evaluate` and `heads`
ran silently for 6-7.5 minutes on a CPU): one bar per stage on stderr, counted in examples, through the one
helper of the CLI (`interpret.cli.common.stages`). A bar is drawn on a terminal, or when `--progress` forces it
(a log file, CI); never with `-q` or `--no-progress`, and not on a stderr that is not a terminal (a test's
captured output, a log file), which would fill with redrawn bars. stdout never carries one."""

from __future__ import annotations

import re
from pathlib import Path

from cli_runner import run

from interpret.evidence import DEFAULT_SEEDS
from interpret.evidence.tasks import TASKS

TEXTS = ("--text", "the cat sat on the mat", "--text", "a dog saw red")


def _stages(stderr: str) -> dict[str, int]:
    """Return {stage: its total} for every bar drawn on stderr (tqdm redraws a bar after '\\r')."""
    return {match[0]: int(match[1]) for match in re.findall(r"([^\r\n:]+): +\d+%\|[^|]*\| *\d+/(\d+) ", stderr)}


def _report(classifier_dir: Path, tmp_path: Path, *flags: str):
    return run("report", "--model", str(classifier_dir), *TEXTS, "-a", "rollout", "-a", "integrated_gradients",
               "-o", str(tmp_path / f"report{len(flags)}.html"), *flags)


def test_report_with_evidence_shows_its_stages_in_examples(classifier_dir: Path, tmp_path: Path) -> None:
    shown = _report(classifier_dir, tmp_path, "--progress")
    assert shown.exit_code == 0, shown.stderr
    stages = _stages(shown.stderr)
    assert stages["analyze (2 analyzers × 2 examples)"] == 4, stages
    assert stages[f"evidence (2 methods, {DEFAULT_SEEDS} random rankings)"] == 2, stages
    assert "it/s" not in shown.stderr and "%|" not in shown.stdout
    for flags in ((), ("-q", "--progress"), ("--no-progress",)):  # stderr here is not a terminal
        quiet = _report(classifier_dir, tmp_path, *flags)
        assert quiet.exit_code == 0 and "%|" not in quiet.stderr and "\r" not in quiet.stderr, (flags, quiet.stderr)


def test_evaluate_shows_the_analyzers_the_evidence_and_the_sanity_check(classifier_dir: Path) -> None:
    shown = run("evaluate", "--model", str(classifier_dir), *TEXTS, "-a", "last_layer_attention", "--checks", "erasers,sanity",
                "--progress")
    assert shown.exit_code == 0, shown.stderr
    # the tiny classifier has 2 blocks: the sanity check runs the analyzer at 3 steps
    assert _stages(shown.stderr) == {"load model": 1, "analyze (1 analyzers × 2 examples)": 2,
                                     f"evidence (1 methods, {DEFAULT_SEEDS} random rankings)": 2,
                                     "sanity check (1 analyzers × 2 examples × 3 steps)": 6}, shown.stderr
    quiet = run("evaluate", "--model", str(classifier_dir), *TEXTS, "-a", "last_layer_attention", "--checks", "sanity",
                "--progress", "-q")
    assert quiet.exit_code == 0 and "%|" not in quiet.stderr


def test_heads_shows_importance_entropy_and_pruning(classifier_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("text,label\n" + "".join(f"{text},positive\n" for text in ["a dog", "the cat sat", "red mat"]),
                    encoding="utf-8")
    shown = run("heads", "--model", str(classifier_dir), "--input", str(data), "-o", str(tmp_path / "h.html"),
                "--fraction", "0.5", "--progress")
    assert shown.exit_code == 0, shown.stderr
    stages = _stages(shown.stderr)
    assert stages["head importance"] == 3 and stages["attention entropy"] == 3, stages
    # a pruning curve ends at its threshold, so its bar counts examples through the model without a total
    assert re.search(r"pruning \(least important first\): \d+ *example", shown.stderr), shown.stderr
    assert re.search(r"pruning \(most important first\): \d+ *example", shown.stderr), shown.stderr


def test_the_task_suite_counts_its_tasks() -> None:
    shown = run("evaluate", "--checks", "tasks", "-a", "last_layer_attention", "--format", "json", "--progress")
    assert shown.exit_code == 0, shown.stderr
    assert _stages(shown.stderr) == {"known-answer tasks (1 analyzers × 16 examples each)": len(TASKS)}, shown.stderr


def test_the_audit_follows_the_same_rule(classifier_dir: Path, tmp_path: Path) -> None:
    """The audit's bar too: drawn with --progress, not on a stderr that is not a terminal (it was: progress=not -q)."""
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "the cat sat on the mat"}\n{"text": "a dog saw red"}\n', encoding="utf-8")
    audit = ("audit", "--model", str(classifier_dir), "--input", str(data), "-a", "rollout", "--drivers", "0")
    shown = run(*audit, "-o", str(tmp_path / "a"), "--progress")
    assert shown.exit_code == 0, shown.stderr
    assert _stages(shown.stderr) == {"audit": 2}, shown.stderr
    plain = run(*audit, "-o", str(tmp_path / "b"))
    assert plain.exit_code == 0 and "audit:" not in plain.stderr and "%|" not in plain.stderr, plain.stderr
