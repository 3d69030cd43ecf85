"""How many threads a CPU job may use, and running it on them: one policy for the compiled kernels and BLAS.

The cores are the ones this process may run on (`os.sched_getaffinity`: a container's or `taskset`'s limit,
not the machine's count), less the ones other processes keep busy (the one-minute load average less this
process's own share, its CPU seconds per second averaged the same way, at least one thread). The compiled kernels and NumPy's BLAS share that count: the kernels take no
thread pool of their own (no numba `parallel=True`) but hand chunks of work to a `ThreadPoolExecutor` whose
threads sleep when idle, and the matrix products run under `blas_threads`, which caps OpenBLAS / MKL
through threadpoolctl. Torch's intra-op pool already sizes itself to the affinity mask and runs (the
model's forward pass) while neither of the others does.

Why a job runs on one thread: starting threads and waiting for the slowest costs ~0.1 ms on an idle machine,
but where other processes keep the cores busy, a thread that has to wait for a time slice costs a scheduler
tick (milliseconds) at every parallel step, and spinning BLAS threads far more. Measured on 2 cores beside
two busy loops (benchmarks/rollout.py): the rollout analyzer at 32 tokens took 115 ms with every step on both
cores and 0.6 ms on one thread; the six 128×128 products of a rollout took 136 ms on OpenBLAS's two threads
and 0.45 ms on one; the compiled augmentation of a 512-token layer 17.7 ms on two threads and 2.1 ms on one.
On idle cores two threads gain only from about 3 million head entries on (512 tokens × 12 heads: 1.8 ms
against 2.5 ms), hence `SERIAL_WORK`: jobs below it run on the calling thread, and so does every job while
the load leaves fewer than two cores free.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from threadpoolctl import ThreadpoolController

from interpret.errors import ConfigError

# Element operations (a kernel's inner-loop steps or a product's multiply-adds, ~1 ns each) below which a job
# runs on one thread: where two threads first beat one on idle cores (see the module docstring).
SERIAL_WORK = 2_000_000
# Chunks per thread: uneven chunks (pairs of unequal cost, a core shared with another process) even out.
CHUNKS_PER_THREAD = 4
_blas: ThreadpoolController | None = None  # found once: looking the libraries up takes milliseconds


def available_cores() -> int:
    """Return the number of cores this process may run on (its affinity mask; the CPU count elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def free_cores() -> int:
    """Return the available cores that other processes leave free: the one-minute load average less this
    process's own share of it (`own_load`, at least one thread)."""
    cores = available_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform: assume the cores are ours
        return cores
    others = max(0.0, load - own_load())
    return max(1, min(cores, int((_machine_cores() or cores) - others + 0.5)))


_LOAD_WINDOW = 60.0  # seconds: the time constant of the kernel's one-minute load average
_MIN_SAMPLE = 0.5  # seconds between samples of this process's CPU time, below which the last value stands
_own_lock = threading.Lock()
_own_sample: list[float] = []  # [monotonic time, process CPU seconds, averaged running threads]


def own_load() -> float:
    """Return this process's running threads averaged as the one-minute load average averages them (its CPU
    seconds per second, exponentially weighted over `_LOAD_WINDOW`), at least 1: our own calling thread.

    Without it a process whose forward passes keep torch's threads on every core would read its own load
    as other processes' and leave its later jobs one thread (2 idle cores: the load average nears 2).
    """
    now, cpu = time.monotonic(), time.process_time()
    with _own_lock:
        if not _own_sample:
            _own_sample.extend((now, cpu, 1.0))
            return 1.0
        then, cpu_then, running = _own_sample
        elapsed = now - then
        if elapsed >= _MIN_SAMPLE:
            decay = math.exp(-elapsed / _LOAD_WINDOW)
            running = decay * running + (1.0 - decay) * max(0.0, cpu - cpu_then) / elapsed
            _own_sample[:] = (now, cpu, running)
    return max(1.0, running)


@functools.cache
def _machine_cores() -> int | None:
    """Return the machine's core count, which the load average is spread over (asked once: it can take 0.5 ms)."""
    return os.cpu_count()


def threads_for(work: int, requested: int | None = None) -> int:
    """Return the threads a job of `work` element operations should use.

    requested: the caller's limit (None or 0: every available core). Never more than the cores other
    processes leave free, and one thread for a job below `SERIAL_WORK`.
    """
    if requested is not None and requested < 0:
        raise ConfigError(f"workers={requested} cannot run anything; use a positive number, or 0/None for all cores.")
    if work < SERIAL_WORK:
        return 1
    free = free_cores()
    return free if not requested else min(requested, free)


@contextlib.contextmanager
def blas_threads(work: int, requested: int | None = None) -> Iterator[int]:
    """Cap NumPy's BLAS at `threads_for(work, requested)` threads inside the block; yield that count."""
    global _blas
    count = threads_for(work, requested)
    if _blas is None:
        _blas = ThreadpoolController()
    with _blas.limit(limits=count, user_api="blas"):
        yield count


def spans(count: int, threads: int) -> list[tuple[int, int]]:
    """Return contiguous, non-empty (start, stop) ranges covering range(count): one, or CHUNKS_PER_THREAD per thread."""
    pieces = 1 if threads <= 1 else min(count, threads * CHUNKS_PER_THREAD)
    cuts = [round(count * part / max(pieces, 1)) for part in range(pieces + 1)]
    return [(start, stop) for start, stop in zip(cuts[:-1], cuts[1:]) if stop > start]


def run(jobs: Sequence[Callable[[], None]], threads: int) -> None:
    """Run the jobs (functions that release the GIL, such as nogil numba kernels) on `threads` threads.

    One thread runs them in order on the calling thread; otherwise a pool of `threads` takes them as they
    come, and the first exception is raised once every job has finished.
    """
    if threads <= 1 or len(jobs) <= 1:
        for job in jobs:
            job()
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(jobs))) as pool:
        futures = [pool.submit(job) for job in jobs]
    for future in futures:
        future.result()
