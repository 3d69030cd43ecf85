"""`interpret audit --drivers K --slice-by COLUMN` (issue 27): bad values are refused before the model loads (one
line, exit 2; an unknown column names the input's columns), the outcome lists drivers.csv, counterfactuals.csv
and slices.csv and the drivers' time, and the Ray engine writes the same findings as the local one."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from cli_runner import run
from pandas.testing import assert_frame_equal

from interpret.files.csv_io import read_csv


def _data(tmp_path: Path, n: int = 12) -> Path:
    words = "the cat sat on mat a dog saw red blue".split()
    path = tmp_path / "data.jsonl"
    lines = [json.dumps({"id": f"e{i}", "text": " ".join(words[(3 * i + j) % len(words)] for j in range(1 + i % 5)),
                         "label": ("negative", "positive")[i % 2], "lang": "en" if i % 3 else "fr"}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("option", "said"), [
    (["--drivers", "-1"], "Invalid value for '--drivers': -1 is not in the range x>=0."),
    (["--drivers", "many"], "Invalid value for '--drivers': 'many' is not a valid integer"),
    (["--driver-rows", "-3"], "Invalid value for '--driver-rows': -3 is not in the range x>=0."),
    (["--removal", "cut"], "Invalid value for '--removal': 'cut' is not one of 'delete', 'mask', 'zero'."),
    (["--slice-by", "source"], "--slice-by: data.jsonl has no column 'source'; its columns: id, label, lang, text."),
])
def test_bad_findings_options_are_refused_before_the_model_loads(
    option: list[str], said: str, classifier_dir: Path, tmp_path: Path, loads: list[str]
) -> None:
    result = run("audit", "--model", str(classifier_dir), "--input", str(_data(tmp_path)), "-o", str(tmp_path / "o"), *option)
    assert result.exit_code == 2 and said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not loads and not (tmp_path / "o").exists()


def test_the_cost_is_stated_and_the_outcome_lists_the_findings_and_the_drivers_time(classifier_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("audit", "--model", str(classifier_dir), "--input", str(_data(tmp_path)), "-o", str(out), "-a", "rollout",
                 "--drivers", "3", "--slice-by", "lang")
    assert result.exit_code == 0, result.stderr
    assert ("after the batches, the top 3 drivers are checked in at most 200 rows each: 2 forward passes per row"
            " re-run, at most 12 rows") in result.stderr  # the cost, bounded before it runs
    assert "drivers.csv, counterfactuals.csv, slices.csv" in result.stdout
    assert " s (drivers " in result.stdout
    assert int(read_csv(out / "drivers.csv")["tested"].sum()) == 3
    assert read_csv(out / "slices.csv")["slice"].tolist() == ["en", "fr"]


def test_a_ray_audit_writes_the_local_audits_findings(classifier_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    common = ["audit", "--model", str(classifier_dir), "--input", str(_data(tmp_path)), "-a", "rollout",
              "--batch-size", "3", "--drivers", "4", "--slice-by", "lang", "-q"]
    local = run(*common, "-o", str(tmp_path / "local"))
    assert local.exit_code == 0, local.stderr
    on_ray = run(*common, "-o", str(tmp_path / "ray"), "--engine", "ray", "--workers", "2")
    assert on_ray.exit_code == 0, on_ray.stderr
    for name in ("counterfactuals.csv", "slices.csv"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    if (tmp_path / "ray" / "tokens.csv").read_bytes() == (tmp_path / "local" / "tokens.csv").read_bytes():
        assert (tmp_path / "ray" / "drivers.csv").read_bytes() == (tmp_path / "local" / "drivers.csv").read_bytes()
    # else the scores are the local ones to float rounding (test_audit_engine_cli), so their means are too
    ray, here = pd.read_parquet(tmp_path / "ray" / "drivers.parquet"), pd.read_parquet(tmp_path / "local" / "drivers.parquet")
    assert_frame_equal(ray, here, check_exact=False, rtol=1e-6, atol=1e-9)
    assert ray["token"].tolist() == here["token"].tolist()
