"""Resuming trusts content, not paths: weights replaced at the same path, a dtype, an edited input file,
changed parameters or tokenizer are each refused in one line naming what changed (exit 1 from the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from hf_tiny import save_tiny_classifier, word_tokenizer

import interpret
from interpret.audit import AuditOptions, run_audit
from interpret.audit.identity import tensors_digest, weights_digest
from interpret.audit.parts import fingerprint
from interpret.cli.main import cli
from interpret.errors import InputError
import interpret.files.file_digest
from interpret.reading.datasets import Example, Skipped

TEXTS = ["the cat sat", "a dog saw red", "the mat", "red blue dog"]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return save_tiny_classifier(tmp_path / "model", seed=0)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": "positive"}) + "\n" for t in TEXTS), encoding="utf-8")
    return path


def _audit(model_dir: Path, data: Path, out: Path, *extra: str):
    args = ["audit", "--model", str(model_dir), "--input", str(data), "-o", str(out), "--batch-size", "2",
            "-a", "rollout", "-q", *extra]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _refusal(result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_weights_replaced_at_the_same_path_are_refused(model_dir: Path, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    assert _audit(model_dir, data, out).exit_code == 0
    save_tiny_classifier(model_dir, seed=1)  # a new checkpoint saved to the same place
    line = _refusal(_audit(model_dir, data, out))
    assert "weights (files sha256" in line and "--fresh" in line
    assert "dtype" not in line and "input_file" not in line and "params" not in line  # only what changed
    assert _audit(model_dir, data, out, "--fresh").exit_code == 0


def test_unchanged_weight_files_are_not_hashed_again(model_dir: Path, data: Path, tmp_path: Path, monkeypatch) -> None:
    hashed: list[str] = []
    real = interpret.files.file_digest._hash_file
    monkeypatch.setattr(interpret.files.file_digest, "_hash_file", lambda path: hashed.append(path.name) or real(path))
    assert _audit(model_dir, data, tmp_path / "a").exit_code == 0
    assert "model.safetensors" in hashed
    hashed.clear()
    interpret.files.file_digest._memo.clear()  # as a new process: only the on-disk memo is left
    assert _audit(model_dir, data, tmp_path / "a").exit_code == 0
    assert "model.safetensors" not in hashed


def test_dtype_changed_is_refused(model_dir: Path, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    assert _audit(model_dir, data, out).exit_code == 0
    line = _refusal(_audit(model_dir, data, out, "--dtype", "bfloat16"))
    assert "dtype (float32 there, bfloat16 now)" in line and "weights" not in line


def test_input_edited_is_refused(model_dir: Path, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    assert _audit(model_dir, data, out).exit_code == 0
    data.write_text(data.read_text(encoding="utf-8").replace("the mat", "the cat"), encoding="utf-8")
    line = _refusal(_audit(model_dir, data, out))
    assert "examples (4 examples, sha256" in line and "input_file (sha256" in line
    # A change to a field the audit does not read still changes the file, and is refused too.
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    assert _audit(model_dir, data, out, "--fresh").exit_code == 0
    data.write_text("".join(json.dumps({**row, "note": "x"}) + "\n" for row in rows), encoding="utf-8")
    line = _refusal(_audit(model_dir, data, out))
    assert "input_file (sha256" in line and "examples" not in line


def test_params_changed_are_refused(model_dir: Path, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    assert _audit(model_dir, data, out).exit_code == 0
    line = _refusal(_audit(model_dir, data, out, "--set", "rollout.head_fusion=max"))
    assert "params (rollout.head_fusion: mean there, max now)" in line


def test_python_api_hashes_tensors_in_memory(model_dir: Path, tmp_path: Path) -> None:
    model, tokenizer = interpret.load(model_dir)
    examples = [Example(i, text, "positive") for i, text in enumerate(TEXTS)]
    run_audit(model, tokenizer, examples, tmp_path, analyzers=["rollout"])
    original = model.classifier.weight.detach().clone()
    with torch.no_grad():
        model.classifier.weight[0, 0] += 1.0  # changed after loading: the files would not tell
    with pytest.raises(InputError, match=r"weights \(tensors sha256") as caught:
        run_audit(model, tokenizer, examples, tmp_path, analyzers=["rollout"])
    assert "\n" not in str(caught.value)
    with torch.no_grad():
        model.classifier.weight.copy_(original)
    assert run_audit(model, tokenizer, examples, tmp_path, analyzers=["rollout"]).n_resumed == 4
    other = word_tokenizer(["the", "cat", "sat", "a", "dog", "saw", "red", "mat", "blue", "on", "!", "marker"])
    with pytest.raises(InputError, match="tokenizer"):
        run_audit(model, other, examples, tmp_path, analyzers=["rollout"])


def test_digests_see_every_byte() -> None:
    base = {"w": torch.zeros(3, dtype=torch.bfloat16)}
    flipped = {"w": torch.tensor([0.0, 0.0, 2.0**-8], dtype=torch.bfloat16)}
    assert tensors_digest(base.items()) != tensors_digest(flipped.items())
    assert tensors_digest(base.items()) != tensors_digest({"w": torch.zeros(3, dtype=torch.float16)}.items())
    assert tensors_digest(base.items()) != tensors_digest({"v": torch.zeros(3, dtype=torch.bfloat16)}.items())
    module = torch.nn.Linear(2, 2)
    assert weights_digest(module).startswith("tensors sha256 ")
    assert weights_digest(module, "/nonexistent") == weights_digest(module)  # no files: the tensors decide


def test_the_classes_the_labels_name_are_part_of_the_fingerprint(tmp_path: Path) -> None:
    # The same weights in memory (no model_dir: fingerprinted by tensors, not by config.json) with the classes
    # renamed: the label "1" now names "pos", so the finished parts' label column is stale.
    model, tokenizer = interpret.load(save_tiny_classifier(tmp_path / "model", seed=0))
    examples = [Example(i, text, str(i % 2)) for i, text in enumerate(TEXTS)]
    first = run_audit(model, tokenizer, examples, tmp_path / "out", analyzers=["rollout"])
    assert pd.read_parquet(first.examples)["label"].tolist() == ["negative", "positive"] * 2
    model.config.id2label = {0: "neg", 1: "pos"}
    with pytest.raises(InputError, match=r"holds an audit of a different examples \("):
        run_audit(model, tokenizer, examples, tmp_path / "out", analyzers=["rollout"])


def test_the_rows_skipped_are_part_of_the_fingerprint(tmp_path: Path) -> None:
    model, tokenizer = interpret.load(save_tiny_classifier(tmp_path / "model", seed=0))
    examples = [Example(i, text) for i, text in enumerate(TEXTS)]
    first = run_audit(model, tokenizer, examples, tmp_path / "out", analyzers=["rollout"],
                      options=AuditOptions(skipped=(Skipped(4, 6, "gone"),)))
    assert (first.n_skipped, first.skipped) == (1, tmp_path / "out" / "skipped.csv")
    for other in (Skipped(4, 7, "gone"), Skipped(4, 6, None)):  # another line, or the same line without its id
        with pytest.raises(InputError, match=r"holds an audit of a different skipped \(1 rows, sha256 \w+ there"):
            run_audit(model, tokenizer, examples, tmp_path / "out", analyzers=["rollout"],
                      options=AuditOptions(skipped=(other,)))


def test_parts_of_the_table_layout_before_are_refused_in_one_line(tmp_path: Path) -> None:
    """A directory written before the tables gained their columns (identity.FORMAT 4: tokens without `id`) is
    refused naming the format, never resumed into tables that mix the two layouts."""
    model, tokenizer = interpret.load(save_tiny_classifier(tmp_path / "model", seed=0))
    examples = [Example(i, text, id=f"e{i}") for i, text in enumerate(TEXTS)]
    first = run_audit(model, tokenizer, examples, tmp_path / "out", analyzers=["rollout"])
    manifest = json.loads(first.manifest.read_text())
    manifest["components"]["format"] = "4"
    manifest["fingerprint"] = fingerprint(manifest["components"])
    first.manifest.write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"holds an audit of a different format \(4 there, 5 now\); pass a new output"):
        run_audit(model, tokenizer, examples, tmp_path / "out", analyzers=["rollout"])
