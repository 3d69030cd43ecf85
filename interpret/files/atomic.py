"""Atomic writes: a file appears whole under its name or not at all, and an older one survives a failure."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `target`; on a clean exit it replaces `target`, else it is deleted."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        # mkstemp makes the file private (0600); give it the mode a plain open() would have.
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    finally:
        if temporary.exists():
            temporary.unlink()


def write_atomically(target: str | Path, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to `target` atomically; return the target path."""
    with atomic_path(target) as temporary:
        if isinstance(data, str):
            temporary.write_text(data, encoding="utf-8")
        else:
            temporary.write_bytes(data)
    return Path(target)


def _umask() -> int:
    """Return the process's umask (reading it means setting it, so set it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
