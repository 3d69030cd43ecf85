"""One audit per directory (a lock a killed process does not leave stuck), and parts that fail their check
(swapped, truncated, deleted, edited records) recomputed, never read."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from pandas.testing import assert_frame_equal

from interpret.audit import AuditOptions, run_audit
from interpret.audit.lock import AuditLock, DirectoryLocked
from interpret.cli.main import cli
from interpret.reading.datasets import Example

N_EXAMPLES = 12

WORDS = "the cat sat on mat a dog saw good bad red blue".split()  # the vocabulary of conftest's tokenizer


def _examples(n: int = N_EXAMPLES) -> list[Example]:
    return [Example(i, " ".join(WORDS[(5 * i + 3 * j) % len(WORDS)] for j in range(1 + i % 6)), f"class {i % 2}")
            for i in range(n)]


def _audit(model, tokenizer, out: Path, fresh: bool = False):
    return run_audit(model, tokenizer, _examples(), out, batch_size=2, analyzers=["rollout", "attention_entropy"],
                     options=AuditOptions(part_examples=2, fresh=fresh))


def _outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes()
            for name in ("tokens.parquet", "examples.parquet", "tokens.csv", "examples.csv", "heads.csv", "summary.html")}


@pytest.fixture(scope="module")
def reference(model, tokenizer, tmp_path_factory) -> dict[str, bytes]:
    """The outputs of one uninterrupted audit (one part per batch: parts 0-0 .. 5-5)."""
    out = tmp_path_factory.mktemp("whole")
    _audit(model, tokenizer, out)
    return _outputs(out)


def _part(out: Path, index: int, suffix: str) -> Path:
    return out / "parts" / f"part-{index:05d}-{index:05d}{suffix}"


# --- the lock -------------------------------------------------------------------------------------------------

def test_a_held_directory_is_refused_at_once_naming_the_holder(model, tokenizer, tmp_path) -> None:
    _audit(model, tokenizer, tmp_path / "warm")  # imports and compiled kernels loaded: the timing is the refusal's
    with AuditLock(tmp_path):
        started = time.perf_counter()
        with pytest.raises(DirectoryLocked) as caught:
            _audit(model, tokenizer, tmp_path)
        assert time.perf_counter() - started < 5
    message = str(caught.value)
    assert f"pid {os.getpid()} on host " in message and " since 20" in message and "\n" not in message
    assert not (tmp_path / "manifest.json").exists() and not (tmp_path / "parts").exists()
    assert _audit(model, tokenizer, tmp_path).n_computed == N_EXAMPLES  # released when the block ends


def test_the_cli_refuses_a_held_directory_with_exit_1_before_loading(tmp_path, monkeypatch) -> None:
    import interpret.cli.common

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(interpret.cli.common, "load_model", no_loading)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"text": "the cat sat"}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    with AuditLock(out):
        result = CliRunner().invoke(cli, ["audit", "--input", str(data), "-o", str(out), "-q"], catch_exceptions=False)
    assert result.exit_code == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"in use by another audit (pid {os.getpid()}" in lines[0], result.stderr


_HOLD = """
import sys, time
from pathlib import Path
from interpret.audit.lock import AuditLock
lock = AuditLock(Path(sys.argv[1])); lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_killed_holder_leaves_no_stuck_lock(tmp_path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryLocked, match=f"pid {holder.pid} "):
            AuditLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    lock = AuditLock(tmp_path)
    lock.acquire()  # the kernel released the dead process's lock
    lock.release()


_RACE = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import torch
    from interpret.audit import AuditOptions, run_audit
    from interpret.audit.lock import DirectoryLocked
    from interpret.reading.datasets import Example
    from interpret.reference import EncoderClassifier, TransformerConfig
    from interpret.reference.vocab import word_tokenizer
    words = "the cat sat on mat a dog saw good bad red blue".split()
    tokenizer = word_tokenizer(words, model_max_length=16)
    torch.manual_seed(0)
    model = EncoderClassifier(TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64,
        vocab_size=len(tokenizer), max_positions=16, n_classes=2)).eval()
    examples = [Example(i, " ".join(words[(5 * i + 3 * j) % len(words)] for j in range(1 + i % 6)), None)
                for i in range(200)]
    go = Path(sys.argv[2])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.001)
    try:
        result = run_audit(model, tokenizer, examples, sys.argv[1], batch_size=1, analyzers=["rollout"],
                           options=AuditOptions(part_examples=10))
        print(json.dumps({"computed": result.n_computed}), flush=True)
    except DirectoryLocked as err:
        print(json.dumps({"refused": str(err)}), flush=True)
        sys.exit(1)
""")


def test_two_audits_started_at_once_give_one_table(tmp_path) -> None:
    out, go = tmp_path / "out", tmp_path / "go"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    runs = [subprocess.Popen([sys.executable, "-c", _RACE, str(out), str(go)], stdout=subprocess.PIPE, text=True,
                             env=env) for _ in range(2)]
    for run in runs:
        assert run.stdout.readline().strip() == "ready"
    go.touch()  # both start their audit now
    outcomes = [json.loads(run.communicate(timeout=300)[0].splitlines()[-1]) for run in runs]
    codes = sorted(run.returncode for run in runs)
    assert codes == [0, 1], outcomes
    refused = next(outcome["refused"] for outcome in outcomes if "refused" in outcome)
    winner = next(run for run in runs if run.returncode == 0)
    assert f"pid {winner.pid} on host" in refused
    assert next(outcome for outcome in outcomes if "computed" in outcome) == {"computed": 200}
    examples = pd.read_parquet(out / "examples.parquet")
    tokens = pd.read_parquet(out / "tokens.parquet")
    assert examples["row"].tolist() == list(range(200))
    assert not tokens.duplicated(["row", "analyzer", "position"]).any()


# --- checked parts --------------------------------------------------------------------------------------------

def _swap_tokens(out: Path) -> None:
    """Part 1's tokens file replaced by part 0's (another batch's rows)."""
    shutil.copyfile(_part(out, 0, "-tokens.parquet"), _part(out, 1, "-tokens.parquet"))


def _swap_whole_part(out: Path) -> None:
    """All of part 1 replaced by part 0 under part 1's names (its record then names the wrong batch)."""
    for suffix in ("-tokens.parquet", "-examples.parquet", ".json"):
        shutil.copyfile(_part(out, 0, suffix), _part(out, 1, suffix))


def _swap_whole_part_and_record(out: Path) -> None:
    """Part 1's tables replaced by part 0's and its record rewritten to match their bytes (rows still differ)."""
    record = json.loads(_part(out, 1, ".json").read_text())
    _swap_tokens(out)
    shutil.copyfile(_part(out, 0, "-examples.parquet"), _part(out, 1, "-examples.parquet"))
    zero = json.loads(_part(out, 0, ".json").read_text())
    for table in ("tokens", "examples"):
        record["files"][table].update({key: zero["files"][table][key] for key in ("bytes", "sha256")})
    _part(out, 1, ".json").write_text(json.dumps(record))


def _truncate(out: Path) -> None:
    path = _part(out, 2, "-tokens.parquet")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _delete_table(out: Path) -> None:
    _part(out, 3, "-examples.parquet").unlink()


def _delete_record(out: Path) -> None:
    _part(out, 4, ".json").unlink()


def _garbled_record(out: Path) -> None:
    _part(out, 5, ".json").write_text("{not json")


def _overlapping_part(out: Path) -> None:
    """A stray part claiming batches 1..2 beside parts 1-1 and 2-2."""
    for suffix in ("-tokens.parquet", "-examples.parquet", ".json"):
        shutil.copyfile(_part(out, 1, suffix), out / "parts" / f"part-00001-00002{suffix}")


@pytest.mark.parametrize(
    ("damage", "recomputed"),
    [
        (_swap_tokens, 2), (_swap_whole_part, 2), (_swap_whole_part_and_record, 2), (_truncate, 2),
        (_delete_table, 2), (_delete_record, 2), (_garbled_record, 2), (_overlapping_part, 0),
    ],
)
def test_parts_failing_their_check_are_recomputed(model, tokenizer, tmp_path, reference, damage, recomputed) -> None:
    _audit(model, tokenizer, tmp_path)
    damage(tmp_path)
    again = _audit(model, tokenizer, tmp_path)
    assert (again.n_computed, again.n_resumed) == (recomputed, N_EXAMPLES - recomputed)
    assert _outputs(tmp_path) == reference
    assert sorted(path.name for path in (tmp_path / "parts").iterdir() if path.name.endswith(".json")) == [
        f"part-{i:05d}-{i:05d}.json" for i in range(6)
    ]


def test_a_part_changed_after_its_check_is_recomputed_not_read(model, tokenizer, tmp_path, reference, monkeypatch) -> None:
    from interpret.audit.parts import AuditDir

    _audit(model, tokenizer, tmp_path)
    real_read, damaged = AuditDir.read, []

    def read_after_damage(self, part):
        if not damaged:
            _truncate(tmp_path)  # between the check and the read
            damaged.append(part)
        return real_read(self, part)

    monkeypatch.setattr(AuditDir, "read", read_after_damage)
    again = _audit(model, tokenizer, tmp_path)
    assert again.n_computed == 2
    assert _outputs(tmp_path) == reference


def test_the_table_read_is_the_table_written(model, tokenizer, tmp_path, reference) -> None:
    result = _audit(model, tokenizer, tmp_path, fresh=True)
    tokens = pd.read_parquet(result.tokens)
    parts = pd.concat([pd.read_parquet(_part(tmp_path, i, "-tokens.parquet")) for i in range(6)], ignore_index=True)
    assert_frame_equal(tokens, parts.sort_values(["row", "analyzer", "position"], kind="mergesort")
                       .reset_index(drop=True), check_exact=True)


def test_a_batch_computed_twice_in_one_call_counts_once(model, tokenizer, tmp_path, reference, monkeypatch) -> None:
    from interpret.audit.parts import AuditDir

    real_read, damaged = AuditDir.read, []

    def read_after_damage(self, part):
        if not damaged:
            _truncate(tmp_path)  # a part this very call wrote, damaged before it is read back
            damaged.append(part)
        return real_read(self, part)

    monkeypatch.setattr(AuditDir, "read", read_after_damage)
    result = _audit(model, tokenizer, tmp_path)
    assert (result.n_computed, result.n_resumed) == (N_EXAMPLES, 0)
    assert _outputs(tmp_path) == reference
