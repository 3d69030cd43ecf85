"""Upper bounds on the attention flow of every (query, key) pair, compiled with numba.

Layer numbering as in `_dinic.py`: caps[l, i, j] is the capacity from (l + 1, i) down to (l, j).
"""

from __future__ import annotations

from typing import no_type_check

import numba
import numpy as np

# Every compiled function is marked @no_type_check: the tests' jaxtyping import hook would otherwise wrap it
# in a type-checking closure before numba sees it, which numba can neither compile nor cache.


@numba.njit(cache=True, nogil=True)
@no_type_check
def flow_bounds(caps, queries, keys, forward, backward):
    """Fill forward[r, node] [query, node] for queries[r] and backward[c, node] [key, node] for keys[c].

    forward[r, i] bounds the flow from (L, queries[r]) that can arrive at layer-1 node i, and backward[c, j]
    the flow that layer-(L − 1) node j can pass on to (0, keys[c]): layer by layer, the flow on an arc is at
    most min(its capacity, the bound of its tail), and a node gets at most the sum over its arcs. Hence
    Σ_i min(forward[q, i], caps[0, i, k]) and Σ_j min(caps[L − 1, q, j], backward[k, j]) bound the max flow.
    """
    n_layer, n = caps.shape[0], caps.shape[1]
    buffer = np.empty(n)
    for r in range(queries.shape[0]):
        forward[r, :] = caps[n_layer - 1, queries[r], :]
        for layer in range(n_layer - 2, 0, -1):
            buffer[:] = 0.0
            for j in range(n):
                supply = forward[r, j]
                if supply > 0.0:
                    for i in range(n):
                        buffer[i] += min(supply, caps[layer, j, i])
            forward[r, :] = buffer
    for c in range(keys.shape[0]):
        backward[c, :] = caps[0, :, keys[c]]
        for layer in range(1, n_layer - 1):
            for j in range(n):
                total = 0.0
                for i in range(n):
                    total += min(caps[layer, j, i], backward[c, i])
                buffer[j] = total
            backward[c, :] = buffer
