"""The command line reads a model directory as it is: a checkpoint lacking weights of its class fails (exit 1,
one line) unless --allow-missing-weights, and then the report and the audit name the random tensors; a shard
outside the directory is refused before the model loads (exit 2); a damaged weight file is named (exit 1)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_runner import run
from safetensors.torch import load_file, save_file

TEXT = "the cat sat on the mat"


@pytest.fixture
def headless(tmp_path: Path, classifier_dir: Path) -> Path:
    """The tiny classifier without its classifier.* tensors."""
    directory = tmp_path / "headless"
    shutil.copytree(classifier_dir, directory)
    tensors = load_file(directory / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if not k.startswith("classifier.")}, directory / "model.safetensors",
              metadata={"format": "pt"})
    return directory


def _failure(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_missing_weights_fail_unless_allowed_and_then_the_report_names_them(headless: Path, tmp_path: Path) -> None:
    common = ("--model", str(headless), "-q")
    line = _failure(run("report", *common, "--text", TEXT, "-a", "rollout", "--format", "json", "-o", "-"), 1)
    assert "classifier.bias, classifier.weight" in line and "--allow-missing-weights" in line
    _failure(run("collect", *common, "--text", TEXT, "-o", str(tmp_path / "t.safetensors")), 1)
    result = run("report", *common, "--allow-missing-weights", "--text", TEXT, "-a", "rollout", "--format", "json", "-o", "-")
    assert result.exit_code == 0, result.output
    notes = dict(json.loads(result.stdout)["run"]["notes"])
    assert "classifier.bias, classifier.weight" in notes["Random weights"]
    result = run("collect", *common, "--allow-missing-weights", "--text", TEXT, "-o", str(tmp_path / "t.safetensors"))
    assert result.exit_code == 0, result.output
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": TEXT}) + "\n" + json.dumps({"text": "a dog"}) + "\n", encoding="utf-8")
    audit = ("audit", *common, "--input", str(data), "-a", "rollout", "-o")
    _failure(run(*audit, str(tmp_path / "never")), 1)
    result = run(*audit, str(tmp_path / "audit"), "--allow-missing-weights")
    assert result.exit_code == 0, result.output
    weights = json.loads((tmp_path / "audit" / "manifest.json").read_text())["components"]["weights"]
    assert weights.startswith("tensors sha256 ") and "2 random: classifier.bias, classifier.weight" in weights
    assert "2 random: classifier.bias, classifier.weight" in (tmp_path / "audit" / "summary.html").read_text()
    for command in ("evaluate", "heads"):
        assert "--allow-missing-weights" in run(command, "--help").stdout


def test_a_shard_outside_the_directory_is_refused_before_the_model_loads(tmp_path: Path, classifier_dir: Path,
                                                                        loads: list[str]) -> None:
    directory = tmp_path / "model"
    shutil.copytree(classifier_dir, directory)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.replace(directory / "model.safetensors", outside / "shard.safetensors")
    names = load_file(outside / "shard.safetensors")
    index = {"metadata": {}, "weight_map": {name: "../outside/shard.safetensors" for name in names}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    line = _failure(run("report", "--model", str(directory), "--text", TEXT, "-o", str(tmp_path / "r.html")), 2)
    assert "'../outside/shard.safetensors', which lies outside" in line and loads == []


def test_a_damaged_weight_file_is_named(tmp_path: Path, classifier_dir: Path) -> None:
    directory = tmp_path / "model"
    shutil.copytree(classifier_dir, directory)
    path = directory / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    line = _failure(run("report", "--model", str(directory), "--text", TEXT, "-o", str(tmp_path / "r.html"), "-q"), 1)
    assert f"the weight file {str(path)!r} is damaged" in line and "--allow-pickle" not in line
