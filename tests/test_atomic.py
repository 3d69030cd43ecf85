"""Atomic writes: all or nothing, an older file survives a failure, and the mode is a plain file's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interpret.files.atomic import atomic_path, write_atomically


def test_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = write_atomically(tmp_path / "out.txt", "old")
    with pytest.raises(RuntimeError), atomic_path(target) as temporary:
        temporary.write_text("half")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_mode_follows_the_umask(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        target = write_atomically(tmp_path / "out.txt", b"data")
    finally:
        os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o644
