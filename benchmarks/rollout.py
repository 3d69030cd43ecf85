"""Attention rollout on MiniLM-L6's real attention: the full rollout and the streamed readout row.

For each length n (real English text repeated and cut to n tokens) it prints median wall times of

    full rollout    chain(augmented_attention(pattern)): head mean, residual, row normalisation, all L products
    bare statement  the paper in plain NumPy: pattern.mean(heads), 0.5·I + 0.5·A, rows divided, L − 1 products
                    (NumPy's BLAS on its default threads: on a busy machine far slower than the capped products)
    vs bare         full rollout / bare statement (target: within 2x)
    products only   the L − 1 matrix products alone on Â computed beforehand (a floor no rollout reaches: the
                    head mean alone reads 12x more memory than the products touch)
    streaming       chain(augmented_attention(pattern), [0], streaming=True): one row propagated, O(L·n²)
    analyzer        interpret.analyze(trace, "rollout") on the float32 patterns a collector stores: everything a
                    user waits for (stacking, head mean, residual, products, readout, checks)
    vs products     analyzer / products only
    max |Δ|         the streamed row against the full rollout's row 0
    peak MiB        the peak of the memory the full rollout allocates (tracemalloc: NumPy reports to it)

The products use NumPy's BLAS threads: on a machine shared with other jobs their times scatter widely, so
each is the median of --repeat runs.

Two more tables show the thread policy (interpret/runtime/threads.py), each on idle cores and beside a busy loop on
every core (another process spinning, as on a shared machine):

    threshold       the compiled augmentation pass of one layer (12 heads) on 1 thread and on every core
                    (whatever the load), by n: where threads start to pay is where `threads.SERIAL_WORK`
                    (heads·n² entries) is set
    analyzer        interpret.analyze(trace, "rollout") at --thread-lengths under the policy, with every job
                    forced onto every core (SERIAL_WORK = 0: what a numba parallel=True pass did), and on one
                    thread (workers=1)

A last table times a padded batch, as an audit's batch reaches the analyzer: 32 examples of MiniLM's real
attention at n, 3n/4, n/2 and n/4 tokens (each its own forward pass), padded to n:

    batched         interpret.analyze(trace, "rollout") as it runs: the batch at once (`plugins/rollout_batch.py`)
    per example     the same with the per-example statement (`rollout_math` on each example's real block)
    max |Δ|         between the two, over every array

    python benchmarks/rollout.py [--lengths 128 512] [--repeat 9] [--thread-lengths 32 512]
                                 [--threshold-lengths 64 128 256 384 512] [--batch-lengths 64 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import median_seconds, mib, table  # noqa: E402
from flow import busy_cores, minilm_attention  # noqa: E402

import torch  # noqa: E402

import interpret  # noqa: E402
from interpret.inputs import from_ids  # noqa: E402
from interpret.plugins import rollout_math  # noqa: E402
from interpret.runtime import threads  # noqa: E402
from interpret.trace import Trace, TraceMeta  # noqa: E402


def allocated_peak(fn: Callable[[], Any]) -> int:
    """Return the peak bytes allocated while `fn()` runs, above what was allocated before it."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def products_only(augmented: np.ndarray) -> np.ndarray:
    """Return Â_{L−1} ··· Â_0 [query, key] by plain products on a prepared Â."""
    current = augmented[0]
    for layer in range(1, augmented.shape[0]):
        current = augmented[layer] @ current
    return current


def bare_statement(pattern: np.ndarray) -> np.ndarray:
    """Return the rollout [query, key] as the paper states it, with nothing else (no options, no checks)."""
    attention = pattern.mean(axis=1)
    augmented = 0.5 * np.eye(pattern.shape[-1]) + 0.5 * attention
    augmented /= augmented.sum(axis=-1, keepdims=True)
    return products_only(augmented)


def as_trace(pattern: np.ndarray) -> Trace:
    """Return a Trace holding `pattern` [layer, head, n, n] as the float32 patterns of one example."""
    tensors = {f"blocks.{i}.attn.hook_pattern": torch.from_numpy(layer[None]).float() for i, layer in enumerate(pattern)}
    meta = TraceMeta(model_id="MiniLM-L6", kind="encoder", n_layers=pattern.shape[0], n_heads=pattern.shape[1],
                     layers=tuple(range(pattern.shape[0])))
    return Trace(tensors=tensors, encoded=from_ids(torch.zeros(1, pattern.shape[-1], dtype=torch.long)), meta=meta)


def threshold_table(lengths: list[int], repeat: int) -> str:
    """Return the compiled augmentation of one 12-head layer on 1 thread vs every core, idle and beside busy loops."""
    rng = np.random.default_rng(0)
    cores = threads.available_cores()
    saved, saved_free = threads.SERIAL_WORK, threads.free_cores
    threads.SERIAL_WORK = 0  # the compiled pass at every size, on the threads asked for
    threads.free_cores = threads.available_cores  # whatever the load: the threads asked for
    rows = []
    try:
        for n in lengths:
            heads = rng.random((12, n, n)).astype(np.float32)
            heads /= heads.sum(axis=-1, keepdims=True)
            cells = []
            for busy in (0, cores):
                with busy_cores(busy):
                    for workers in (1, cores):
                        seconds = median_seconds(
                            lambda: rollout_math.augmented_layers([heads], workers=workers), repeat=repeat
                        )
                        cells.append(f"{seconds * 1e3:.3f}")
            rows.append([n, f"{12 * n * n:,}", *cells])
    finally:
        threads.SERIAL_WORK, threads.free_cores = saved, saved_free
    return table(
        ["n", "heads·n²", "idle: 1 thread ms", f"idle: {cores} threads ms", "busy: 1 thread ms",
         f"busy: {cores} threads ms"],
        rows,
    )


def analyzer_threads_table(lengths: list[int], repeat: int) -> str:
    """Return the rollout analyzer's time under the policy, forced onto every core, and on one thread.

    forced: SERIAL_WORK = 0 and the load ignored, so even 32 tokens take the compiled pass and BLAS on every
    core (as the numba parallel=True pass and an uncapped BLAS did); one thread: the policy told that one core
    is available.
    """
    cores = threads.available_cores()
    saved_work, saved_cores, saved_free = threads.SERIAL_WORK, threads.available_cores, threads.free_cores
    rows = []
    for n, pattern in minilm_attention(lengths).items():
        trace = as_trace(pattern)
        interpret.analyze(trace, "rollout")
        cells = []
        for busy in (0, cores):
            with busy_cores(busy):
                for mode in ("policy", "forced", "one"):
                    if mode == "forced":
                        threads.SERIAL_WORK, threads.free_cores = 0, saved_cores
                    if mode == "one":
                        threads.available_cores = threads.free_cores = lambda: 1
                    try:
                        seconds = median_seconds(lambda: interpret.analyze(trace, "rollout"), repeat=repeat)
                    finally:
                        threads.SERIAL_WORK, threads.available_cores = saved_work, saved_cores
                        threads.free_cores = saved_free
                    cells.append(f"{seconds * 1e3:.2f}")
        rows.append([n, *cells])
    return table(
        ["n", "idle: policy ms", f"idle: all {cores} threads ms", "idle: 1 thread ms", "busy: policy ms",
         f"busy: all {cores} threads ms", "busy: 1 thread ms"],
        rows,
    )


def padded_batch(n: int, batch: int = 32) -> Trace:
    """Return a Trace of `batch` examples of MiniLM's attention at n, 3n/4, n/2 and n/4 tokens, padded to n."""
    lengths = [max(2, n * k // 4) for k in (4, 3, 2, 1)]
    patterns = minilm_attention(lengths)
    layers, heads = patterns[n].shape[:2]
    tensors = {f"blocks.{i}.attn.hook_pattern": torch.zeros(batch, heads, n, n) for i in range(layers)}
    mask = torch.zeros(batch, n, dtype=torch.long)
    for b in range(batch):
        m = lengths[b % len(lengths)]
        mask[b, :m] = 1
        for i in range(layers):
            tensors[f"blocks.{i}.attn.hook_pattern"][b, :, :m, :m] = torch.from_numpy(patterns[m][i]).float()
    meta = TraceMeta(model_id="MiniLM-L6", kind="encoder", n_layers=layers, n_heads=heads, layers=tuple(range(layers)))
    return Trace(tensors=tensors, encoded=from_ids(torch.zeros(batch, n, dtype=torch.long), mask), meta=meta)


def batch_table(lengths: list[int], repeat: int) -> str:
    """Return the rollout analyzer on a padded batch of 32: batched as it runs, and example by example."""
    from interpret.plugins.rollout import Rollout

    rows = []
    for n in lengths:
        trace = padded_batch(n)
        for params in ({"rows": "readout", "readout": "0"}, {"readout": "0"}):
            batched_s = median_seconds(lambda: interpret.analyze(trace, "rollout", params=params), repeat=repeat)
            batched = interpret.analyze(trace, "rollout", params=params)
            saved = Rollout._batched
            Rollout._batched = lambda *args: None  # the per-example statement, as with a discard ratio
            try:
                alone_s = median_seconds(lambda: interpret.analyze(trace, "rollout", params=params), repeat=repeat)
                alone = interpret.analyze(trace, "rollout", params=params)
            finally:
                Rollout._batched = saved
            delta = max(float(np.abs(batched[name] - alone[name]).max()) for name in alone.arrays)
            rows.append([n, params.get("rows", "all"), f"{batched_s * 1e3:.2f}", f"{alone_s * 1e3:.2f}",
                         f"{alone_s / batched_s:.2f}x", f"{delta:.1e}"])
    return table(["n", "rows", "batched ms", "per example ms", "per example / batched", "max |Δ|"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--thread-lengths", type=int, nargs="*", default=[32, 512])
    parser.add_argument("--threshold-lengths", type=int, nargs="*", default=[64, 128, 256, 384, 512])
    parser.add_argument("--batch-lengths", type=int, nargs="*", default=[64, 128])
    args = parser.parse_args()
    rows = []
    for n, pattern in minilm_attention(args.lengths).items():
        augmented = rollout_math.augmented_attention(pattern)
        full_s = median_seconds(lambda: rollout_math.chain(rollout_math.augmented_attention(pattern)), repeat=args.repeat)
        bare_s = median_seconds(lambda: bare_statement(pattern), repeat=args.repeat)
        products_s = median_seconds(lambda: products_only(augmented), repeat=args.repeat)
        stream_s = median_seconds(lambda: rollout_math.chain(rollout_math.augmented_attention(pattern), [0], True), repeat=args.repeat)
        trace = as_trace(pattern)
        analyzer_s = median_seconds(lambda: interpret.analyze(trace, "rollout"), repeat=args.repeat)
        full = rollout_math.chain(rollout_math.augmented_attention(pattern))
        assert np.abs(full - bare_statement(pattern)).max() < 1e-12
        delta = np.abs(rollout_math.chain(rollout_math.augmented_attention(pattern), [0], True)[0] - full[0]).max()
        rows.append([
            n, f"{full_s * 1e3:.2f}", f"{bare_s * 1e3:.2f}", f"{full_s / bare_s:.2f}x", f"{products_s * 1e3:.2f}",
            f"{stream_s * 1e3:.2f}", f"{analyzer_s * 1e3:.2f}", f"{analyzer_s / products_s:.2f}x", f"{delta:.1e}",
            mib(allocated_peak(lambda: rollout_math.chain(rollout_math.augmented_attention(pattern)))),
        ])
    print(f"MiniLM-L6 (6 layers, 12 heads) attention of real text, float64, mean fusion, residual 0.5;"
          f" load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(table(
        ["n", "full rollout ms", "bare statement ms", "vs bare", "products only ms", "streaming ms", "analyzer ms",
         "vs products", "max |Δ|", "peak MiB"],
        rows,
    ))
    if args.threshold_lengths:
        print()
        print(f"Compiled augmentation of one 12-head layer (SERIAL_WORK is {threads.SERIAL_WORK:,} heads·n²), median"
              f" of {args.repeat}; busy = a spinning process on each of the {threads.available_cores()} cores:")
        print(threshold_table(args.threshold_lengths, args.repeat))
    if args.thread_lengths:
        print()
        print("The rollout analyzer under the thread policy, forced onto every core, and on one thread:")
        print(analyzer_threads_table(args.thread_lengths, args.repeat))
    if args.batch_lengths:
        print()
        print(f"The rollout analyzer on a padded batch of 32 (torch on {torch.get_num_threads()} threads), median of"
              f" {args.repeat}:")
        print(batch_table(args.batch_lengths, args.repeat))


if __name__ == "__main__":
    main()
