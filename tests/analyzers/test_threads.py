"""The thread policy (interpret/runtime/threads.py) and the compiled kernels it runs: same numbers on any thread count."""

from __future__ import annotations

import math
import os
import threading

import numpy as np
import pytest
from fake_traces import random_pattern_trace

from interpret.errors import ConfigError
from interpret.plugins import rollout_math
from interpret.runtime import threads


def test_cores_are_the_affinity_mask() -> None:
    if hasattr(os, "sched_getaffinity"):
        assert threads.available_cores() == len(os.sched_getaffinity(0))
    assert threads.available_cores() >= 1


def _load(monkeypatch: pytest.MonkeyPatch, load: float) -> None:
    """Make the one-minute load average read `load`, this process's own share of it one thread."""
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(threads, "own_load", lambda: 1.0)


def test_small_jobs_run_on_one_thread_and_requests_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 0.0)  # an idle machine
    cores = threads.available_cores()
    assert threads.threads_for(threads.SERIAL_WORK - 1) == 1
    assert threads.threads_for(threads.SERIAL_WORK) == cores
    assert threads.threads_for(threads.SERIAL_WORK, requested=0) == cores  # 0: every core
    assert threads.threads_for(threads.SERIAL_WORK, requested=cores + 5) == cores
    assert threads.threads_for(threads.SERIAL_WORK, requested=1) == 1
    with pytest.raises(ConfigError, match="workers=-1"):
        threads.threads_for(10, requested=-1)


def test_busy_machines_get_fewer_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = os.cpu_count() or 1
    monkeypatch.setattr(threads, "available_cores", lambda: machine)
    _load(monkeypatch, 1.0)  # only ourselves
    assert threads.free_cores() == machine
    _load(monkeypatch, 1.0 + machine)  # another process spinning on every core
    assert threads.free_cores() == 1
    assert threads.threads_for(10 * threads.SERIAL_WORK) == 1
    if machine >= 2:
        _load(monkeypatch, 2.0)  # one other busy process: one core fewer
        assert threads.free_cores() == machine - 1


def test_own_load_follows_this_process_cpu_time_like_the_load_average(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that kept two threads busy for a minute reads most of a load of 2 as its own: its later jobs
    get both cores of an otherwise idle 2-core machine, while another process's load still counts."""
    clock = {"wall": 100.0, "cpu": 5.0}
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(threads.time, "process_time", lambda: clock["cpu"])
    monkeypatch.setattr(threads, "_own_sample", [])
    assert threads.own_load() == 1.0  # the first sample: our calling thread
    for _ in range(60):  # two busy threads for a minute, sampled every second
        clock["wall"] += 1.0
        clock["cpu"] += 2.0
        threads.own_load()
    expected = 2.0 - math.exp(-1.0)  # from 1 towards 2 with the load average's one-minute time constant
    assert threads.own_load() == pytest.approx(expected, rel=1e-9)
    clock["wall"] += 0.1  # too soon for a new sample: the last value stands
    clock["cpu"] += 5.0
    assert threads.own_load() == pytest.approx(expected, rel=1e-9)
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads, "_machine_cores", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.7, 1.7, 1.7))
    assert threads.free_cores() == 2  # 1.7 is almost all ours
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (2.7, 2.7, 2.7))
    assert threads.free_cores() == 1  # one more busy thread elsewhere
    for _ in range(600):  # idle for ten minutes: back to one thread (our calling one)
        clock["wall"] += 1.0
        threads.own_load()
    assert threads.own_load() == 1.0


def test_blas_threads_caps_the_products(monkeypatch: pytest.MonkeyPatch) -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    _load(monkeypatch, 0.0)

    def blas_counts() -> set[int]:
        return {pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"}

    before = blas_counts()
    with threads.blas_threads(threads.SERIAL_WORK - 1) as count:
        assert count == 1
        assert blas_counts() <= {1}
    assert blas_counts() == before  # restored


@pytest.mark.parametrize(("count", "n_threads"), [(0, 2), (1, 4), (7, 1), (10, 2), (100, 3), (5, 8)])
def test_spans_cover_the_range_once(count: int, n_threads: int) -> None:
    spans = threads.spans(count, n_threads)
    covered = [index for start, stop in spans for index in range(start, stop)]
    assert covered == list(range(count))
    assert all(stop > start for start, stop in spans)
    assert len(spans) <= max(1, n_threads * threads.CHUNKS_PER_THREAD)
    if n_threads == 1 and count:
        assert spans == [(0, count)]


def test_run_uses_the_threads_and_raises_the_first_error() -> None:
    seen: set[int] = set()
    barrier = threading.Barrier(2, timeout=10)

    def job() -> None:
        seen.add(threading.get_ident())
        barrier.wait()  # both jobs are running at once: two threads

    threads.run([job, job], 2)
    assert len(seen) == 2
    done: list[int] = []

    def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        threads.run([lambda: done.append(1), fails, lambda: done.append(2)], 2)
    assert sorted(done) == [1, 2]  # the other jobs still ran
    order: list[int] = []
    threads.run([lambda: order.append(1), lambda: order.append(2)], 1)
    assert order == [1, 2]  # one thread: in order, on the caller's thread


@pytest.mark.parametrize("how", ["mean", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_compiled_rows_equal_the_numpy_path(how: str, dtype: type, n_threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "SERIAL_WORK", 0)  # the compiled pass, split in row ranges, even when small
    pattern = random_pattern_trace(batch=1, layers=3, heads=4, pos=11, seed=5).stack("attn.hook_pattern").cpu().numpy()[0]
    pattern = pattern.astype(dtype)
    pattern[1, :, 4, :] = 0.0  # an absent query row stays all zero in both paths
    compiled = rollout_math.augmented_layers(list(pattern), head_fusion=how, residual_weight=0.3, workers=n_threads)
    numpy_path = rollout_math.augmented_attention(pattern, head_fusion=how, residual_weight=0.3)
    np.testing.assert_allclose(compiled, numpy_path, rtol=0, atol=1e-15)
    assert (compiled[1, 4] == 0).all()


def test_compiled_rows_refuse_what_the_numpy_path_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "SERIAL_WORK", 0)
    heads = np.zeros((1, 2, 4, 4), dtype=np.float32)
    heads[0, 0, :, 0] = 1.0  # disjoint supports: min-fusion leaves rows 1-3 with nothing
    heads[0, 1] = np.eye(4)
    np.testing.assert_array_equal(rollout_math.augmented_layers(list(heads), head_fusion="min"), np.eye(4)[None])
    with pytest.raises(ConfigError, match="head fusion 'min' leaves query 1 of layer 0"):
        rollout_math.augmented_layers(list(heads), head_fusion="min", residual_weight=0.0)
    with pytest.raises(ConfigError, match="NaN or infinite"):
        rollout_math.augmented_layers(list(np.where(heads > 0, np.nan, heads)), head_fusion="mean")
