"""The weight-digest memo (interpret.files.file_digest) sees a file replaced with the old size and mtime (`cp -p`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from interpret.files import file_digest

# File timestamps come from the kernel's coarse clock (one tick, at most 10 ms): a replacement made within
# the tick of the first hash could carry the same ctime, so the tests wait out a tick as any real
# checkpoint replacement does.
_TICK_S = 0.05


@pytest.fixture()
def fresh_memo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(file_digest, "_memo", {})


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("new_process", [False, True], ids=["same process", "new process"])
def test_a_file_replaced_with_cp_p_is_hashed_again(
    fresh_memo: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_process: bool
) -> None:
    weights, replacement = tmp_path / "model.safetensors", tmp_path / "other.safetensors"
    weights.write_bytes(b"a" * 4096)
    replacement.write_bytes(b"b" * 4096)
    os.utime(replacement, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns))
    assert file_digest.file_sha256(weights) == _sha(b"a" * 4096)
    time.sleep(_TICK_S)
    before = weights.stat()
    subprocess.run(["cp", "-p", str(replacement), str(weights)], check=True)
    after = weights.stat()
    # The case the old key (path, size, mtime) could not tell apart: cp -p keeps both, writing in place.
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    if new_process:
        monkeypatch.setattr(file_digest, "_memo", {})  # only the on-disk memo is left
    assert file_digest.file_sha256(weights) == _sha(b"b" * 4096)


def test_a_file_renamed_into_place_with_the_old_times_is_hashed_again(fresh_memo: None, tmp_path: Path) -> None:
    weights, staged = tmp_path / "model.safetensors", tmp_path / "staged.tmp"
    weights.write_bytes(b"a" * 4096)
    assert file_digest.file_sha256(weights) == _sha(b"a" * 4096)
    time.sleep(_TICK_S)
    staged.write_bytes(b"c" * 4096)
    shutil.copystat(weights, staged)  # same size, atime and mtime; a new inode once renamed over the old
    os.replace(staged, weights)
    assert file_digest.file_sha256(weights) == _sha(b"c" * 4096)


def test_an_unchanged_file_is_not_hashed_again_in_a_new_process(
    fresh_memo: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 4096)
    assert file_digest.file_sha256(weights) == _sha(b"a" * 4096)
    monkeypatch.setattr(file_digest, "_memo", {})

    def no_hashing(_: Path) -> str:
        raise AssertionError("hashed again although the file did not change")

    monkeypatch.setattr(file_digest, "_hash_file", no_hashing)
    assert file_digest.file_sha256(weights) == _sha(b"a" * 4096)


def test_a_memo_entry_without_inode_and_ctime_is_not_trusted(
    fresh_memo: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry written by the older key (size and mtime only) cannot vouch for the file: it is hashed again."""
    import json

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 4096)
    stat = weights.stat()
    memo = tmp_path / "cache" / "file-sha256.json"
    memo.parent.mkdir(parents=True)
    stale = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": _sha(b"z")}
    memo.write_text(json.dumps({str(weights.resolve()): stale}))
    assert file_digest.file_sha256(weights) == _sha(b"a" * 4096)
    assert json.loads(memo.read_text())[str(weights.resolve())]["ctime_ns"] == stat.st_ctime_ns
