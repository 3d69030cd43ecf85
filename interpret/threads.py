"""How many threads a CPU job may use, and running it on them: one policy for the compiled kernels and torch.

The cores are the ones this process may run on (`os.sched_getaffinity`: a container's or `taskset`'s limit,
not the machine's count). Torch's intra-op pool and NumPy's BLAS already size themselves to those cores and
run while the kernels wait, so the kernels share the same count: whichever runs uses at most every core,
never more, and nothing spins while the other works. The kernels take no thread pool of their own (no numba
`parallel=True`): the work is cut into more chunks than threads and handed to a `ThreadPoolExecutor` whose
threads sleep when idle, so a core that another process holds slows its thread alone instead of stalling a
barrier that every layer passes.

Small jobs run on the calling thread. Starting threads and waiting for the slowest costs ~0.1 ms on an idle
machine, but on a machine where other processes keep every core busy a thread that has to wait for a time
slice costs a scheduler tick (several milliseconds) per parallel step: rollout at 32 tokens took 45 ms on a
thread pool instead of 1 ms on one thread. `SERIAL_WORK` is where one thread's time reaches ~2 ms
(`benchmarks/rollout.py --threads` measures it on idle and on busy cores): below it, threads cannot gain
more than they risk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from interpret.errors import ConfigError

# Element operations (a kernel's inner-loop steps, ~1 ns each) below which a job runs on one thread.
SERIAL_WORK = 2_000_000
# Chunks per thread: uneven chunks (pairs of unequal cost, a core shared with another process) even out.
CHUNKS_PER_THREAD = 4


def available_cores() -> int:
    """Return the number of cores this process may run on (its affinity mask; the CPU count elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def threads_for(work: int, requested: int | None = None) -> int:
    """Return the threads a job of `work` element operations should use.

    requested: the caller's limit (None or 0: every available core); never more than the available cores,
    and one thread for a job below `SERIAL_WORK`.
    """
    if requested is not None and requested < 0:
        raise ConfigError(f"workers={requested} cannot run anything; use a positive number, or 0/None for all cores.")
    cores = available_cores()
    limit = cores if not requested else min(requested, cores)
    return 1 if work < SERIAL_WORK else limit


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
