"""`interpret evaluate`: `--checks` chooses which checks run (erasers, sanity, tasks), each with a verdict per
method and its numbers, as text and JSON; unknown checks and contradictory options are usage errors before any
model loads."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import run

TEXT = "the cat sat on the mat"


def test_sanity_check_json_and_text(classifier_dir: Path) -> None:
    result = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "--text", "a dog saw red",
                 "-a", "last_layer_attention", "--checks", "sanity,erasers", "--format", "json", "-q")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["checks"] == ["erasers", "sanity"]
    assert data["sanity"]["steps"] == ["none", "blocks 1-1", "blocks 0-1"]
    method = data["sanity"]["methods"]["last_layer_attention"]
    assert method["mean"][0] == 1.0 and method["passed"] == (method["mean"][-1] < 0.5)
    assert data["erasers"]["methods"][0]["method"] == "last_layer_attention"
    text = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "-a", "last_layer_attention",
               "--checks", "erasers,sanity", "-q")
    assert text.exit_code == 0 and "sanity check" in text.stdout and "random" in text.stdout
    assert "sanity verdict: last_layer_attention: " in text.stdout
    assert "erasers verdict: last_layer_attention: " in text.stdout and " of 1 texts; comp " in text.stdout


def test_only_the_checks_chosen_run(classifier_dir: Path) -> None:
    result = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "-a", "last_layer_attention",
                 "--format", "json", "-q")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["checks"] == ["erasers"] and "erasers" in data and "sanity" not in data and "tasks" not in data


def test_usage_errors_before_loading(classifier_dir: Path, loads: list[str]) -> None:
    both = run("evaluate", "--checks", "tasks", "--text", TEXT)
    assert both.exit_code == 2 and "drop --text" in both.stderr
    neither = run("evaluate", "--model", str(classifier_dir))
    assert neither.exit_code == 2 and "--text" in neither.stderr
    silent = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "-a", "attention_entropy")
    assert silent.exit_code == 2 and "readout" in silent.stderr
    typo = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "--checks", "erasers,sanit")
    assert typo.exit_code == 2 and "'sanit' is not a check; Did you mean 'sanity'?" in typo.stderr
    assert "Traceback" not in typo.stderr and len(typo.stderr.strip().splitlines()) == 1
    empty = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "--checks", "erasers,")
    assert empty.exit_code == 2 and "empty item" in empty.stderr
    twice = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "--checks", "sanity,sanity")
    assert twice.exit_code == 2 and "names sanity twice" in twice.stderr
    removal = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "--checks", "sanity", "--removal", "mask")
    assert removal.exit_code == 2 and "add erasers to --checks" in removal.stderr
    assert loads == []
