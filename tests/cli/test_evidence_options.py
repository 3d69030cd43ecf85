"""`interpret report --evidence/--no-evidence --removal`: the JSON holds every evidence metric with the removal
used; a contradictory pair of options is a usage error before the model loads."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import run

TEXT = "the cat sat on the mat"


def test_json_holds_the_evidence_with_the_removal_asked(classifier_dir: Path) -> None:
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "--format", "json", "-o", "-",
                 "-a", "rollout", "--removal", "mask", "-q")
    assert result.exit_code == 0, result.stderr
    evidence = json.loads(result.stdout)["evidence"]
    assert evidence["removal"] == "mask" and [m["method"] for m in evidence["methods"]] == ["rollout"]
    assert set(evidence["methods"][0]) >= {"comprehensiveness", "sufficiency", "area", "morf", "lerf"}


def test_no_evidence(classifier_dir: Path) -> None:
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "--format", "json", "-o", "-",
                 "-a", "rollout", "--no-evidence", "-q")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["evidence"] is None


def test_bad_combinations_are_refused_before_loading(classifier_dir: Path, loads: list[str]) -> None:
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "--no-evidence", "--removal", "zero")
    assert result.exit_code == 2 and "drop --no-evidence, or drop --removal" in result.stderr
    bad = run("report", "--model", str(classifier_dir), "--text", TEXT, "--removal", "drop")
    assert bad.exit_code == 2 and "--removal" in bad.stderr
    assert loads == []
