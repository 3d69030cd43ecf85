"""Shared measuring tools for the benchmark scripts: median wall time, peak memory, a plain-text table.

Peak memory on CUDA is `torch.cuda.max_memory_allocated` above what was allocated before the call. On the
CPU it is the process's peak resident set (VmHWM) above the resident set before the call, with the peak
reset through /proc/self/clear_refs first (Linux); elsewhere it is reported as unavailable.
"""

from __future__ import annotations

import gc
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch


def timings(
    fn: Callable[[], Any], repeat: int = 5, warmup: int = 1, device: str = "cpu",
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Return the seconds of each of `repeat` runs of `fn()` after `warmup` runs, read on `clock` (wall time by
    default; time.process_time for CPU time), the device synchronised around each run."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        _sync(device)
        start = clock()
        fn()
        _sync(device)
        times.append(clock() - start)
    return times


def median_seconds(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1, device: str = "cpu") -> float:
    """Return the median wall time of `fn()` over `repeat` runs after `warmup` runs."""
    return statistics.median(timings(fn, repeat, warmup, device))


def peak_bytes(fn: Callable[[], Any], device: str = "cpu") -> int | None:
    """Return the peak memory `fn()` adds above what was in use before it (None where unmeasurable)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        result = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        del result
        return peak
    status = Path("/proc/self/status")
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    before = _status_kib(status, "VmRSS")
    result = fn()
    peak = _status_kib(status, "VmHWM") - before
    del result
    return max(peak, 0) * 1024


def peak_in_fresh_process(script: str, args: Sequence[str]) -> int | None:
    """Return the peak bytes that `python script ARGS` (a child mode of the script) prints on its last line (None if it printed n/a).

    A fresh process per configuration keeps one configuration's freed-but-cached memory from hiding the
    next one's peak; the child measures its single run with `peak_bytes`.
    """
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, check=True)
    last = done.stdout.strip().splitlines()[-1]
    return None if last == "n/a" else int(last)


def _status_kib(status: Path, key: str) -> int:
    for line in status.read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{key} not in {status}")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def mib(n: int | None) -> str:
    """Return bytes as MiB with one decimal, or 'n/a'."""
    return "n/a" if n is None else f"{n / 2**20:.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Return a plain-text table with right-aligned columns (Markdown-compatible)."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
