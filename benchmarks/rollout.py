"""Attention rollout on MiniLM-L6's real attention: the full rollout and the streamed readout row.

For each length n (real English text repeated and cut to n tokens) it prints median wall times of

    full rollout    rollout_math.rollout(pattern): head mean, residual, row normalisation, all L products
    bare statement  the paper in plain NumPy: pattern.mean(heads), 0.5·I + 0.5·A, rows divided, L − 1 products
    vs bare         full rollout / bare statement (target: within 2x)
    products only   the L − 1 matrix products alone on Â computed beforehand (a floor no rollout reaches: the
                    head mean alone reads 12x more memory than the products touch)
    streaming       rollout_math.rollout(pattern, readout=0): one row propagated, O(L·n²)
    analyzer        interpret.analyze(trace, "rollout") on the float32 patterns a collector stores: everything a
                    user waits for (stacking, head mean, residual, products, readout, checks)
    vs products     analyzer / products only
    max |Δ|         the streamed row against the full rollout's row 0
    peak MiB        the peak of the memory the full rollout allocates (tracemalloc: NumPy reports to it)

The products use NumPy's BLAS threads: on a machine shared with other jobs their times scatter widely, so
each is the median of --repeat runs.

    python benchmarks/rollout.py [--lengths 128 512] [--repeat 9]
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
from flow import minilm_attention  # noqa: E402

import torch  # noqa: E402

import interpret  # noqa: E402
from interpret.inputs import from_ids  # noqa: E402
from interpret.plugins import rollout_math  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    rows = []
    for n, pattern in minilm_attention(args.lengths).items():
        augmented = rollout_math.augmented_attention(pattern)
        full_s = median_seconds(lambda: rollout_math.rollout(pattern), repeat=args.repeat)
        bare_s = median_seconds(lambda: bare_statement(pattern), repeat=args.repeat)
        products_s = median_seconds(lambda: products_only(augmented), repeat=args.repeat)
        stream_s = median_seconds(lambda: rollout_math.rollout(pattern, readout=0), repeat=args.repeat)
        trace = as_trace(pattern)
        analyzer_s = median_seconds(lambda: interpret.analyze(trace, "rollout"), repeat=args.repeat)
        full = rollout_math.rollout(pattern)
        assert np.abs(full - bare_statement(pattern)).max() < 1e-12
        delta = np.abs(rollout_math.rollout(pattern, readout=0)[0] - full[0]).max()
        rows.append([
            n, f"{full_s * 1e3:.2f}", f"{bare_s * 1e3:.2f}", f"{full_s / bare_s:.2f}x", f"{products_s * 1e3:.2f}",
            f"{stream_s * 1e3:.2f}", f"{analyzer_s * 1e3:.2f}", f"{analyzer_s / products_s:.2f}x", f"{delta:.1e}",
            mib(allocated_peak(lambda: rollout_math.rollout(pattern))),
        ])
    print(f"MiniLM-L6 (6 layers, 12 heads) attention of real text, float64, mean fusion, residual 0.5;"
          f" load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(table(
        ["n", "full rollout ms", "bare statement ms", "vs bare", "products only ms", "streaming ms", "analyzer ms",
         "vs products", "max |Δ|", "peak MiB"],
        rows,
    ))


if __name__ == "__main__":
    main()
