"""A compiled pass that turns one layer's per-head attention into its residual-augmented matrix Â.

It does in one read of the heads what `rollout_math.fuse_heads` followed by `add_residual` does in several
NumPy passes: fuse the heads (mean accumulated in float64, or max / min), add w·I on present rows, scale
the rest by 1 − w and divide each row by its sum. At 512 tokens the heads are 12x larger than Â, so reading
them once is what keeps rollout close to the cost of its matrix products.

The kernel is serial over a range of rows: `rollout_math.augmented_layers` hands row ranges to the threads
of `interpret.runtime.threads` (the kernel releases the GIL), and runs small inputs on NumPy without compiling it.
A numba `parallel=True` loop would compile several times slower and keep a thread pool of its own.
"""

from __future__ import annotations

from typing import no_type_check

import numba
import numpy as np

# Marked @no_type_check: the tests' jaxtyping import hook would otherwise wrap the function before numba
# sees it, which numba can neither compile nor cache.

FUSIONS = {"mean": 0, "max": 1, "min": 2}


@no_type_check
@numba.njit(cache=True, nogil=True)
def augment_rows(pattern, how, weight, out, start, stop):
    """Write rows start…stop − 1 of Â [query, key] float64 of `pattern` [head, query, key] into `out`.

    Absent rows (no head attends from them: padding) stay all zero. Return the number of present rows that
    could not be normalised (a sum that is zero or not finite); the caller raises for them.
    """
    n_head, n_key = pattern.shape[0], pattern.shape[2]
    failed = 0
    for i in range(start, stop):
        for k in range(n_key):
            out[i, k] = pattern[0, i, k]
        for h in range(1, n_head):
            if how == 0:
                for k in range(n_key):
                    out[i, k] += pattern[h, i, k]
            elif how == 1:
                for k in range(n_key):
                    out[i, k] = max(out[i, k], pattern[h, i, k])
            else:
                for k in range(n_key):
                    out[i, k] = min(out[i, k], pattern[h, i, k])
        if how == 0:
            for k in range(n_key):
                out[i, k] /= n_head
        present = False
        for h in range(n_head if how == 2 else 1):  # min-fusion can zero a row whose heads attend somewhere
            for k in range(n_key):
                if (pattern[h, i, k] if how == 2 else out[i, k]) != 0.0:
                    present = True
                    break
            if present:
                break
        if not present:
            continue
        for k in range(n_key):
            out[i, k] *= 1.0 - weight
        out[i, i] += weight
        total = 0.0
        for k in range(n_key):
            total += out[i, k]
        if not (0.0 < total < np.inf):  # also false for NaN
            failed += 1
            continue
        for k in range(n_key):
            out[i, k] /= total
    return failed
