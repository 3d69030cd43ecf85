"""A compiled pass that turns one layer's per-head attention into its residual-augmented matrix Â.

It does in one read of the heads what `rollout_math.fuse_heads` followed by `add_residual` does in several
NumPy passes: fuse the heads (mean accumulated in float64, or max / min), add w·I on present rows, scale
the rest by 1 − w and divide each row by its sum. Rows run in parallel. At 512 tokens the heads are 12x
larger than Â, so reading them once is what keeps rollout close to the cost of its matrix products.
"""

from __future__ import annotations

from typing import no_type_check

import numba
import numpy as np

# Marked @no_type_check: the tests' jaxtyping import hook would otherwise wrap the function before numba
# sees it, which numba can neither compile nor cache.

FUSIONS = {"mean": 0, "max": 1, "min": 2}


@no_type_check
@numba.njit(parallel=True, cache=True, nogil=True)
def augment_layer(pattern: np.ndarray, how: int, weight: float, out: np.ndarray) -> None:
    """Write Â [query, key] float64 of `pattern` [head, query, key] into `out`; absent (all-zero) rows stay 0."""
    n_head, n_query, n_key = pattern.shape
    for i in numba.prange(n_query):
        row = out[i]
        for k in range(n_key):
            row[k] = pattern[0, i, k]
        for h in range(1, n_head):
            if how == 0:
                for k in range(n_key):
                    row[k] += pattern[h, i, k]
            elif how == 1:
                for k in range(n_key):
                    row[k] = max(row[k], pattern[h, i, k])
            else:
                for k in range(n_key):
                    row[k] = min(row[k], pattern[h, i, k])
        if how == 0:
            for k in range(n_key):
                row[k] /= n_head
        present = False
        for k in range(n_key):
            if row[k] != 0.0:
                present = True
                break
        if not present:
            continue
        for k in range(n_key):
            row[k] *= 1.0 - weight
        row[i] += weight
        total = 0.0
        for k in range(n_key):
            total += row[k]
        for k in range(n_key):
            row[k] /= total
