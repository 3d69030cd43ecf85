"""An exclusive lock on an audit's output directory, so two audits never write into one directory.

The lock is `fcntl.flock` on `out_dir/.audit.lock`: the kernel releases it when the holding process ends in
any way (SIGKILL included), so a killed audit never leaves the directory stuck (the file a killed audit
leaves behind is harmless). While held, the file says who holds it (pid, host, start time in UTC); a second
audit does not wait: it raises `DirectoryLocked` at once with that line. flock also works between hosts on
NFS v4 and most shared file systems (Linux emulates it with POSIX record locks there).

The holder deletes the file before it lets go, so a finished audit leaves none. That is safe because a
process that locks the file checks that the name still leads to the file it locked: one that opened the
file just before it was deleted, and locked it just after, finds it gone and starts over on a new file.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from interpret.errors import InterpretError

LOCK_NAME = ".audit.lock"
_READ_RETRIES = 20  # the holder writes its line just after locking; wait up to 20 × 10 ms to read it


class DirectoryLocked(InterpretError):
    """Another audit holds the output directory (its message names the holder)."""


class AuditLock:
    """`with AuditLock(out_dir):` holds the directory's lock for the block; DirectoryLocked when it is held."""

    def __init__(self, out_dir: Path) -> None:
        self.root = Path(out_dir)
        self.path = self.root / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock without waiting, and record this process as its holder; DirectoryLocked if taken."""
        self.root.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                error = self._locked(fd)
                os.close(fd)
                raise error from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder deleted it as we locked it: lock the file now under the name
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}) + "\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode("utf-8"), 0)
        self._fd = fd

    def probe(self) -> None:
        """Raise DirectoryLocked when another process holds the lock now; leave the lock file as it is."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._locked(fd) from None
        finally:
            os.close(fd)  # also releases the lock if it was taken

    def release(self) -> None:
        """Delete the lock file while still holding it, then release the lock (see the module docstring)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def _locked(self, fd: int) -> DirectoryLocked:
        return DirectoryLocked(
            f"{self.root} is in use by another audit ({_holder(fd)}); wait for it to finish, or choose another"
            " output directory (--output)."
        )

    def __enter__(self) -> AuditLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    """Return whether `path` names the file open as `fd` (False when it was deleted or replaced meanwhile)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino)


def _holder(fd: int) -> str:
    """Return "pid P on host H since T" from the lock file, or a plain phrase when it cannot be read yet."""
    for _ in range(_READ_RETRIES):
        try:
            data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
            return f"pid {int(data['pid'])} on host {str(data['host'])[:64]} since {str(data['started'])[:32]}"
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.01)
    return "holder not recorded"
