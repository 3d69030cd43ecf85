"""Content hashes for cache keys: sha256 of a file's bytes, memoised by path, size, inode, mtime and ctime.

A cache keyed by a file's size alone goes stale when the file is replaced by one of the same size (a
re-fitted checkpoint, a different revision); hashing the content is right but costs a read of the whole
file (about 0.1 s for MiniLM's 91 MB), so each digest is remembered in memory and in `cache_dir()` under
file-sha256.json, and recomputed when the file's size, inode number, mtime or ctime changes. Size and mtime
alone are not enough: `cp -p` or `rsync -t` give a replacement the old size and mtime, but no user-level
call can set the status-change time (ctime), which every write and every `utime` moves forward, and a file
renamed into place (`mv`, `write_atomically`) has a new inode.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path

from interpret.files.atomic import write_atomically
from interpret.files.cache import cache_dir

log = logging.getLogger("interpret")

_MEMO_FILE = "file-sha256.json"
_CHUNK = 1 << 20
_memo: dict[tuple[str, int, int, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """Return the hex sha256 of the file at `path`, reusing the digest last computed for the same file state
    (size, inode, mtime and ctime)."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    state = {
        "size": stat.st_size,
        "ino": stat.st_ino,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
    }
    key = (str(resolved), *state.values())
    if key in _memo:
        return _memo[key]
    stored = _read_memo()
    entry = stored.get(key[0])
    if _matches(entry, state):
        digest = entry["sha256"]
    else:
        digest = _hash_file(resolved)
        stored[key[0]] = {**state, "sha256": digest}
        try:
            write_atomically(cache_dir() / _MEMO_FILE, json.dumps(stored, indent=1, sort_keys=True))
        except OSError as err:  # a read-only cache only costs a re-hash in the next process
            log.debug("could not record the digest of %s (%s)", resolved, err)
    _memo[key] = digest
    return digest


def content_digest(parts: Iterable[bytes]) -> str:
    """Return the hex sha256 of `parts`, each length-prefixed so that no two sequences collide by splicing."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def _matches(entry: object, state: dict[str, int]) -> bool:
    """Return whether a stored entry is a well-formed digest recorded for this file state (an entry written
    before the inode and ctime were recorded lacks them, so it does not match and the file is hashed again)."""
    if not isinstance(entry, dict) or any(entry.get(field) != value for field, value in state.items()):
        return False
    digest = entry.get("sha256")
    return isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_memo() -> dict[str, object]:
    """Return the stored digests, or {} when the memo file is missing or unreadable (it is only a memo)."""
    try:
        stored = json.loads((cache_dir() / _MEMO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}
