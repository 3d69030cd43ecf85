"""`interpret audit --engine ray`: its options are checked before the model loads (one line, exit 2), it says how
to install Ray when Ray is missing, and on a tiny classifier its tables equal the local engine's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from cli_runner import run
from pandas.testing import assert_frame_equal


def _data(tmp_path: Path, n: int = 12) -> Path:
    words = "the cat sat on mat a dog saw red blue".split()
    path = tmp_path / "data.jsonl"
    lines = [json.dumps({"text": " ".join(words[(3 * i + j) % len(words)] for j in range(1 + i % 5))}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("option", [["--workers", "2"], ["--address", "auto"], ["--num-gpus-per-worker", "1"]])
def test_ray_options_need_the_ray_engine(option, classifier_dir: Path, tmp_path: Path, loads: list[str]) -> None:
    result = run("audit", "--model", str(classifier_dir), "--input", str(_data(tmp_path)), *option)
    assert result.exit_code == 2
    assert option[0] in result.stderr and "--engine ray" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not loads


def test_the_ray_engine_without_ray_says_how_to_install_it(classifier_dir: Path, tmp_path: Path, loads: list[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    result = run("audit", "--model", str(classifier_dir), "--input", str(_data(tmp_path)), "--engine", "ray")
    assert result.exit_code == 2
    assert 'pip install "transformer-audit[ray]"' in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not loads


def test_a_ray_audit_from_the_command_line_equals_the_local_one(classifier_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    data = _data(tmp_path)
    common = ["audit", "--model", str(classifier_dir), "--input", str(data), "-a", "rollout", "--batch-size", "3", "-q"]
    local = run(*common, "-o", str(tmp_path / "local"))
    assert local.exit_code == 0, local.stderr
    on_ray = run(*common, "-o", str(tmp_path / "ray"), "--engine", "ray", "--workers", "2")
    assert on_ray.exit_code == 0, on_ray.stderr
    for table in ("tokens.parquet", "examples.parquet"):
        assert_frame_equal(pd.read_parquet(tmp_path / "ray" / table), pd.read_parquet(tmp_path / "local" / table),
                           check_exact=False, rtol=1e-6, atol=1e-6)


def test_a_local_ray_audit_counts_every_actor_s_memory(classifier_dir: Path, tmp_path: Path, loads: list[str]) -> None:
    """Each CPU actor of a local Ray cluster loads the model and runs batches: the estimate the refusal states is
    the one process's times the actors, plus the driver's base and weights (`estimate.audit`)."""
    pytest.importorskip("ray")
    common = ["audit", "--model", str(classifier_dir), "--input", str(_data(tmp_path)), "-a", "rollout",
              "--max-memory", "1MB", "-o", str(tmp_path / "out")]
    stated = {}
    for engine in (["--engine", "local"], ["--engine", "ray", "--workers", "3", "--num-gpus-per-worker", "0"]):
        refused = run(*common, *engine)
        assert refused.exit_code == 2, refused.stderr
        (message,) = [line for line in refused.stderr.splitlines() if line.strip()]
        value, unit = message.split("would need about ")[1].split(" of memory")[0].split()
        stated[engine[1]] = float(value) * {"kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
        assert ("driver " in message) == (engine[1] == "ray")
    # three actors' processes and the driver's base and weights: on a tiny model with short texts a process is
    # almost all base and weights, so about four times the local audit's (as printed: three digits)
    assert stated["ray"] == pytest.approx(4 * stated["local"], rel=0.01) and loads == []
