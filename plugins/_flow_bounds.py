"""Upper bounds on the attention flow of (query, key) pairs, compiled with numba.

Layer numbering as in `_dinic.py`: caps[l, i, j] is the capacity from (l + 1, i) down to (l, j). The forward
bound of a query costs O(L·n²) and serves all n keys of its row; the backward bound of a key costs the same
and serves all n rows of its column, so the caller computes backward bounds only when many rows are asked
for (`flow_math`): for one readout row they would cost n times the forward bound.

The loops are written element by element on purpose: whole-array assignments (`a[r, :] = b[...]`) take numba
several times longer to compile than the rest of this file together.
"""

from __future__ import annotations

from typing import no_type_check

import numba

# Every compiled function is marked @no_type_check: the tests' jaxtyping import hook would otherwise wrap it
# in a type-checking closure before numba sees it, which numba can neither compile nor cache.


@numba.njit(cache=True, nogil=True)
@no_type_check
def flow_bounds(caps, queries, keys, forward, backward, buffer):
    """Fill forward[r, node] [query, node] for queries[r] and backward[c, node] [key, node] for keys[c].

    forward[r, i] bounds the flow from (L, queries[r]) that can arrive at layer-1 node i, and backward[c, j]
    the flow that layer-(L − 1) node j can pass on to (0, keys[c]): layer by layer, the flow on an arc is at
    most min(its capacity, the bound of its tail), and a node gets at most the sum over its arcs. Hence
    Σ_i min(forward[q, i], caps[0, i, k]) and Σ_j min(caps[L − 1, q, j], backward[k, j]) bound the max flow.
    `buffer` is scratch of n entries.
    """
    n_layer, n = caps.shape[0], caps.shape[1]
    for r in range(queries.shape[0]):
        for j in range(n):
            forward[r, j] = caps[n_layer - 1, queries[r], j]
        for layer in range(n_layer - 2, 0, -1):
            for i in range(n):
                buffer[i] = 0.0
            for j in range(n):
                supply = forward[r, j]
                if supply > 0.0:
                    for i in range(n):
                        buffer[i] += min(supply, caps[layer, j, i])
            for i in range(n):
                forward[r, i] = buffer[i]
    for c in range(keys.shape[0]):
        for j in range(n):
            backward[c, j] = caps[0, j, keys[c]]
        for layer in range(1, n_layer - 1):
            for j in range(n):
                total = 0.0
                for i in range(n):
                    total += min(caps[layer, j, i], backward[c, i])
                buffer[j] = total
            for j in range(n):
                backward[c, j] = buffer[j]
