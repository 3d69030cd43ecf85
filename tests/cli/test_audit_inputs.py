"""`interpret audit` reads its input one way and keeps it whole: labels by one rule, the input's ids beside every
row, rows without text skipped only when asked, SIGTERM handled as Ctrl-C, final tables that never mix."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
from cli_runner import run
from hf_tiny import WORDS

from interpret.files.csv_io import read_csv

NAMES = ("negative", "positive")  # classifier_dir's classes


def _texts(n: int) -> list[str]:
    return [" ".join(WORDS[(7 * i + 3 * j) % len(WORDS)] for j in range(1 + i % 6)) for i in range(n)]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _audit(classifier_dir: Path, data: Path, out: Path, *extra: str) -> dict:
    result = run("audit", "--model", str(classifier_dir), "--input", str(data), "-o", str(out), "-a", "rollout",
                 "--batch-size", "50", "--format", "json", "-q", *extra)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_labels_mixing_indices_and_names_score_as_the_same_labels_written_one_way(
    classifier_dir: Path, tmp_path: Path
) -> None:
    texts = _texts(200)
    classes = [(3 * i + i // 7) % 2 for i in range(200)]
    forms = {
        "names": [NAMES[c] for c in classes],
        "indices": [str(c) for c in classes],
        "mixed": [[c, str(c), NAMES[c]][i % 3] for i, c in enumerate(classes)],  # 0, "0" and "negative" alike
    }
    tables = {}
    for form, labels in forms.items():
        data = _write_jsonl(tmp_path / f"{form}.jsonl", [{"text": t, "label": g} for t, g in zip(texts, labels)])
        summary = _audit(classifier_dir, data, tmp_path / form)
        tables[form] = (summary["accuracy"], pd.read_parquet(tmp_path / form / "examples.parquet"))
    accuracy, names = tables["names"]
    assert accuracy == (names["prediction"] == pd.Series([NAMES[c] for c in classes])).mean()
    for form in ("indices", "mixed"):
        assert tables[form][0] == accuracy, form
        for column in ("label", "correct", "prediction"):
            pd.testing.assert_series_equal(tables[form][1][column], names[column], check_exact=True)
    # --target gold explains the class the label names, however it is written.
    _audit(classifier_dir, tmp_path / "mixed.jsonl", tmp_path / "gold", "--target", "gold")
    gold = pd.read_parquet(tmp_path / "gold" / "examples.parquet")
    assert gold["target"].tolist() == [NAMES[c] for c in classes] and set(gold["target_source"]) == {"gold"}
    assert not any((tmp_path / form / ".audit.lock").exists() for form in (*forms, "gold"))  # gone once done


def test_report_reads_the_input_labels_by_the_same_rule(classifier_dir: Path, tmp_path: Path) -> None:
    forms = {"mixed": [0, "0", "negative", 1, "1", "positive"], "names": [NAMES[i // 3] for i in range(6)]}
    decisions = {}
    for form, labels in forms.items():
        data = _write_jsonl(tmp_path / f"{form}.jsonl", [{"text": t, "label": g} for t, g in zip(_texts(6), labels)])
        result = run("report", "--model", str(classifier_dir), "--input", str(data), "-a", "rollout", "--format",
                     "json", "-o", str(tmp_path / f"{form}.json"), "-q")
        assert result.exit_code == 0, result.stderr
        report = json.loads((tmp_path / f"{form}.json").read_text("utf-8"))
        decisions[form] = [(d["gold"], d["correct"], d["predicted"]) for d in report["run"]["decisions"]]
    assert decisions["mixed"] == decisions["names"]
    assert [gold for gold, _, _ in decisions["mixed"]] == forms["names"]
    assert [correct for _, correct, _ in decisions["mixed"]] == [p == g for g, _, p in decisions["names"]]


def test_the_input_ids_stay_beside_every_row_in_input_order(classifier_dir: Path, tmp_path: Path) -> None:
    ids = ["z-9", "007", "a", "=cmd", "m\x00n"]  # not sorted; a formula start and a NUL survive the CSV
    data = _write_jsonl(tmp_path / "ids.jsonl", [{"id": i, "text": t} for i, t in zip(ids, _texts(5))])
    _audit(classifier_dir, data, tmp_path / "out", "--evidence")
    for table in (pd.read_parquet(tmp_path / "out" / "examples.parquet"), read_csv(tmp_path / "out" / "examples.csv")):
        assert list(table.columns[:3]) == ["row", "id", "text"]
        assert table["row"].tolist() == [0, 1, 2, 3, 4] and table["id"].tolist() == ids
    tokens = pd.read_parquet(tmp_path / "out" / "tokens.parquet")
    assert str(tokens["id"].dtype) == "string" and len(tokens) == len(read_csv(tmp_path / "out" / "tokens.csv"))
    for tokens in (tokens, read_csv(tmp_path / "out" / "tokens.csv", {"id": str})):
        assert list(tokens.columns[:3]) == ["row", "id", "analyzer"]
        assert tokens["id"].tolist() == [ids[row] for row in tokens["row"]] and tokens["row"].is_monotonic_increasing
    evidence = read_csv(tmp_path / "out" / "evidence_examples.csv", {"id": str})
    assert list(evidence.columns[:2]) == ["row", "id"]
    assert evidence["id"].tolist() == [ids[row] for row in evidence["row"]] and set(evidence["row"]) == set(range(5))


def test_skip_invalid_skips_rows_without_text_counts_and_lists_them(classifier_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "gaps.csv"
    data.write_text('id,text,label\nr0,the cat sat,positive\nr1,"",negative\n,a dog saw red,0\n007,"   ",1\n'
                    'r4,the red mat,1\n', encoding="utf-8")
    out = tmp_path / "out"
    refused = run("audit", "--model", str(classifier_dir), "--input", str(data), "-o", str(out), "-a", "rollout")
    assert refused.exit_code == 2 and "--input: gaps.csv line 3 has an empty text" in refused.stderr
    assert "--skip-invalid" in refused.stderr and not out.exists()

    args = ["audit", "--model", str(classifier_dir), "--input", str(data), "-o", str(out), "-a", "rollout",
            "--skip-invalid"]
    first = run(*args, "--format", "json")
    assert first.exit_code == 0, first.stderr
    assert "skipped 2 rows of gaps.csv with an empty text (lines 3, 5)" in first.stderr
    summary = json.loads(first.stdout)
    assert (summary["examples"], summary["skipped"]) == (3, 2) and str(out / "skipped.csv") in summary["files"]
    skipped = read_csv(out / "skipped.csv", {"id": str})
    assert list(skipped.columns) == ["row", "id", "line"]  # the input's id kept, "007" as written
    assert skipped.values.tolist() == [[1, "r1", 3], [3, "007", 5]]
    assert "skipped rows" in (out / "summary.html").read_text("utf-8")
    examples = pd.read_parquet(out / "examples.parquet")
    assert examples["row"].tolist() == [0, 2, 4] and examples["label"].tolist() == ["positive", "negative", "positive"]
    again = run(*args)  # resumes: the same rows skipped, the same fingerprint
    assert again.exit_code == 0, again.stderr
    assert "3 (0 computed, 3 resumed)" in again.stdout and "skipped   2 rows with an empty text" in again.stdout


_AUDIT = [sys.executable, "-m", "interpret", "audit", "-a", "rollout", "--batch-size", "1"]


def test_sigterm_stops_the_audit_like_ctrl_c_and_it_resumes(classifier_dir: Path, tmp_path: Path) -> None:
    n = 120
    data = _write_jsonl(tmp_path / "data.jsonl", [{"text": t} for t in _texts(n)])
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([*_AUDIT, "--model", str(classifier_dir), "--input", str(data), "-o", str(out), "--progress"],
                               stderr=subprocess.PIPE, env=env)  # --progress: the bar into a pipe
    seen: list[bytes] = []
    progress = threading.Event()

    def watch() -> None:  # the progress bar on stderr says when examples are done
        assert process.stderr is not None
        while chunk := process.stderr.read1(4096):
            seen.append(chunk)
            done = re.findall(rb"\| *(\d+)/%d " % n, b"".join(seen))
            if done and int(done[-1]) >= 5:
                progress.set()

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    try:
        assert progress.wait(timeout=300), b"".join(seen).decode(errors="replace")[-2000:]
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    reader.join(timeout=30)
    stderr = b"".join(seen).decode()
    lines = [line for line in re.split(r"[\r\n]", stderr) if line.strip()]
    assert code == 130 and [line for line in lines if "error" in line] == lines[-1:], stderr[-2000:]
    assert lines[-1] == "error: interrupted; nothing more was written."
    assert any(path.suffix == ".json" for path in (out / "parts").iterdir())  # the finished batches were kept
    assert not (out / ".audit.lock").exists() and not (out / "tokens.parquet").exists()
    resumed = _audit(classifier_dir, data, out, "--batch-size", "1")
    assert resumed["resumed"] >= 5 and resumed["computed"] + resumed["resumed"] == n


_RESUME = """
import resource, signal, sys
from interpret.audit import run_audit
from interpret.reading.datasets import Example
from interpret.reference import EncoderClassifier, TransformerConfig
from interpret.reference.vocab import word_tokenizer
import torch
if len(sys.argv) > 2:  # a file-size limit: writing past it fails with EFBIG, as a full disk fails with ENOSPC
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
words = "the cat sat on mat a dog saw good bad red blue".split()
tokenizer = word_tokenizer(words, model_max_length=16)
torch.manual_seed(0)
model = EncoderClassifier(TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer),
                                            max_positions=16, n_classes=2)).eval()
examples = [Example(i, " ".join(words[(5 * i + 3 * j) % len(words)] for j in range(1 + i % 6)), f"class {i % 2}")
            for i in range(60)]
run_audit(model, tokenizer, examples, sys.argv[1], batch_size=8, analyzers=["rollout"])
"""
FINAL = ("tokens.parquet", "tokens.csv", "examples.parquet", "examples.csv", "heads.csv", "summary.html",
         "drivers.parquet", "drivers.csv", "counterfactuals.csv")  # the drivers are checked by default (issue 27)


def test_a_failure_while_writing_the_final_tables_leaves_the_earlier_ones_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _RESUME, str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr

    def state() -> dict[str, tuple[int, int, bytes]]:
        return {name: ((out / name).stat().st_ino, (out / name).stat().st_mtime_ns, (out / name).read_bytes())
                for name in FINAL}

    before = state()
    limit = len(before["tokens.parquet"][2]) + 1  # the first table fits, the tokens CSV does not
    assert len(before["tokens.csv"][2]) > limit
    failed = subprocess.run([sys.executable, "-c", _RESUME, str(out), str(limit)], capture_output=True, text=True,
                            env=env, timeout=600)
    assert failed.returncode != 0 and "File too large" in failed.stderr, failed.stderr[-2000:]
    assert state() == before  # not one table replaced: never new tables beside old ones
    assert sorted(path.name for path in out.iterdir()) == sorted([*FINAL, "manifest.json", "parts"])  # nothing left over
    again = subprocess.run([sys.executable, "-c", _RESUME, str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    after = state()
    assert all(after[name][0] != before[name][0] and after[name][2] == before[name][2] for name in FINAL)
