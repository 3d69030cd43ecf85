"""Shared measuring tools for the benchmark scripts: median wall time, peak memory, a plain-text table, and the
CPU cores other processes left free during a run (`CpuWatch`).

Peak memory on CUDA is `torch.cuda.max_memory_allocated` above what was allocated before the call. On the
CPU it is the process's peak resident set (VmHWM) above the resident set before the call, with the peak
reset through /proc/self/clear_refs first (Linux); elsewhere it is reported as unavailable.
"""

from __future__ import annotations

import argparse
import gc
import os
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


def interleaved(runs: dict[str, Callable[[], Any]], repeats: int, device: str = "cpu") -> dict[str, list[float]]:
    """Return each run's seconds over `repeats` rounds, the runs interleaved round by round (so a slower or
    busier machine weighs on every configuration alike), after one warm-up call of each."""
    for run in runs.values():
        run()
    samples: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(repeats):
        for key, run in runs.items():
            samples[key] += timings(run, repeat=1, warmup=0, device=device)
    return samples


def ratio_rows(label: Sequence[Any], runs: dict[str, Callable[[], Any]], samples: dict[str, list[float]],
               references: Sequence[str], device: str = "cpu") -> list[list[Any]]:
    """Return one table row per run: `label`, the run's name, median and min ms, peak MiB, and its median over
    each reference run's median."""
    medians = {key: statistics.median(times) for key, times in samples.items()}
    rows = []
    for key, run in runs.items():
        peak = peak_bytes(run, device=device)
        rows.append([*label, key, f"{medians[key] * 1e3:.1f}", f"{min(samples[key]) * 1e3:.1f}",
                     "-" if peak is None else f"{peak / 2**20:.0f}",
                     *(f"{medians[key] / medians[reference]:.2f}" for reference in references)])
    return rows


def model_parser(doc: str, models: Sequence[str]) -> argparse.ArgumentParser:
    """Return a parser with the options every per-model benchmark takes: --models, --repeats, --device, --threads
    (applied by `parsed`)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(models), choices=list(models))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=None)
    return parser


def parsed(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Return the parsed arguments, with torch's thread count set from --threads."""
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def with_kernel(model: Any, kernel: str, device: str) -> Any:
    """Return `model` in eval mode on `device`, run with attention `kernel` (eager where it has no SDPA)."""
    model.eval().config._attn_implementation = kernel if model._supports_sdpa or kernel == "eager" else "eager"
    return model.to(device)


def capture_rows(name: str, fast: Any, eager: Any, inputs: dict[str, Any], repeats: int, device: str,
                 collected: Any = None, **collect: Any) -> list[list[Any]]:
    """Return the table rows of one model: the plain forward (`fast`), the eager model's own output_attentions and
    interpret.collect of every pattern (`collect`: its options) on the same `inputs` (`collected`: what collect is
    given for them, where that is not their one value), timed interleaved, with the positions and each run's ratio
    to the first two."""
    import interpret

    value = collected if collected is not None else next(iter(inputs.values()))

    def forward() -> None:
        with torch.no_grad():
            fast(**inputs)

    def attentions() -> None:
        with torch.no_grad():
            eager(**inputs, output_attentions=True)

    def capture() -> None:
        interpret.collect(fast, None, value, **collect)

    runs = {"forward": forward, "eager + attentions": attentions, "capture all": capture}
    samples = interleaved(runs, repeats, device)  # the capture's first call probes the model
    positions = interpret.collect(fast, None, value, **collect).encoded.pos
    return ratio_rows([name, positions], runs, samples, ["forward", "eager + attentions"], device)


def capture_table(title: str, rows: Sequence[Sequence[Any]], args: argparse.Namespace, positions: str = "positions") -> str:
    """Return `capture_rows`' table under a title line that ends with the device, threads and repeats."""
    headers = ["model", positions, "configuration", "median ms", "min ms", "peak MiB", "× forward", "× eager+attn"]
    heading = f"{title}, {args.device}, {torch.get_num_threads()} threads, median and min of {args.repeats}"
    return f"{heading}\n{table(headers, rows)}"


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


class CpuWatch:
    """How many CPU cores the other processes on the machine left free while a benchmark ran (issue 28: a
    timing on a shared machine says how loaded it was).

    Linux: the machine's busy CPU seconds (/proc/stat: every state but idle and iowait) minus this process's
    own CPU seconds, over the wall time between `start()` and `line()`, is the cores the others kept busy;
    the cores this process may run on (its affinity) minus that is the cores free for it. Elsewhere only the
    load average is given.
    """

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self._wall, self._own, self._busy = time.perf_counter(), time.process_time(), _busy_seconds()
        self._load = _load()

    def line(self) -> str:
        """Return one line: cores online and usable, torch's threads, the load averages, the cores left free."""
        wall = time.perf_counter() - self._wall
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        text = (f"CPU: {os.cpu_count()} cores online, {usable} usable by this process, {torch.get_num_threads()} torch"
                f" threads; 1-min load average {self._load} at the start, {_load()} at the end")
        busy = _busy_seconds()
        if busy is None or self._busy is None or wall <= 0:
            return text + " (no /proc/stat: cores left free by other processes not measured)"
        others = max(busy - self._busy - (time.process_time() - self._own), 0.0) / wall
        return text + f"; other processes kept {others:.1f} cores busy: about {max(usable - others, 0.0):.1f} free for this run"


def _busy_seconds() -> float | None:
    """Return the machine's busy CPU seconds since boot (/proc/stat's first line), or None off Linux."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is inside user)
    return busy / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"
