"""`interpret evaluate`: the sanity check with the faithfulness metrics on a saved model, as text and JSON;
contradictory options are usage errors before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import run

TEXT = "the cat sat on the mat"


def test_sanity_check_json_and_text(classifier_dir: Path) -> None:
    result = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "--text", "a dog saw red",
                 "-a", "last_layer_attention", "--format", "json", "-q")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["sanity"]["steps"] == ["none", "blocks 1-1", "blocks 0-1"]
    assert data["sanity"]["methods"]["last_layer_attention"]["mean"][0] == 1.0
    assert data["evidence"]["methods"][0]["method"] == "last_layer_attention"
    text = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "-a", "last_layer_attention", "-q")
    assert text.exit_code == 0 and "sanity check" in text.stdout and "random" in text.stdout


def test_usage_errors_before_loading(classifier_dir: Path, loads: list[str]) -> None:
    both = run("evaluate", "--tasks", "--text", TEXT)
    assert both.exit_code == 2 and "drop --tasks" in both.stderr
    neither = run("evaluate", "--model", str(classifier_dir))
    assert neither.exit_code == 2 and "--text" in neither.stderr
    silent = run("evaluate", "--model", str(classifier_dir), "--text", TEXT, "-a", "attention_entropy")
    assert silent.exit_code == 2 and "readout" in silent.stderr
    assert loads == []
