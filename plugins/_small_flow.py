"""The compact exact max-flow for small layered attention graphs, which compiles fast (`flow_math` says when
it runs): textbook Dinic (Dinic 1970: BFS levels, then augmenting paths along the level graph with
current-arc pointers, until the sink is out of reach).

The graph is the whole layered one: node layer·n + token for layers 0 … L, arc (l, i) → (l − 1, j) of
capacity caps[l − 1, i, j] whose flow is flow[l − 1, i, j]. Arc number a of a node is the down arc to token
a for a < n and the reverse of the up arc from token a − n above for a ≥ n. Arithmetic is float64 and a
residual at or below `eps` counts as saturated, as in `_dinic.py`.
"""

from __future__ import annotations

from typing import no_type_check

import numba
from numba.extending import register_jitable

# Every compiled function is marked @no_type_check: the tests' jaxtyping import hook would otherwise wrap it
# in a type-checking closure before numba sees it, which numba can neither compile nor cache.


@register_jitable
@no_type_check
def _residual(caps, flow, node, arc):
    """Return (head node or -1, residual capacity) of arc number `arc` of `node` (see the module docstring)."""
    n_layer, n = caps.shape[0], caps.shape[1]
    layer = node // n
    i = node - layer * n
    if arc < n:
        if layer == 0:
            return -1, 0.0
        return (layer - 1) * n + arc, caps[layer - 1, i, arc] - flow[layer - 1, i, arc]
    if layer == n_layer:
        return -1, 0.0
    j = arc - n
    return (layer + 1) * n + j, flow[layer, j, i]


@register_jitable
@no_type_check
def _push(flow, n, node, arc, amount):
    """Send `amount` along arc number `arc` of `node`: more flow down, or less flow on the arc from above."""
    layer = node // n
    i = node - layer * n
    if arc < n:
        flow[layer - 1, i, arc] += amount
    else:
        flow[layer, arc - n, i] -= amount


@numba.njit(cache=True, nogil=True, error_model="numpy")
@no_type_check
def small_max_flows(caps, sources, sinks, eps, out, flow, level, queue, current, path):
    """Write into out[p] the maximum flow from top node (L, sources[p]) to input node (0, sinks[p]).

    caps: [layer, query, key] float64 capacities. Scratch: flow [layer, n, n] float64 (zero on entry, left
    zero), level, queue, current and path [(layer + 1)·n] int64.
    """
    n_layer, n = caps.shape[0], caps.shape[1]
    n_nodes = (n_layer + 1) * n
    for p in range(sources.shape[0]):
        source = n_layer * n + sources[p]
        sink = sinks[p]
        total = 0.0
        while True:
            for node in range(n_nodes):
                level[node] = -1
            level[source] = 0
            queue[0] = source
            head, tail = 0, 1
            while head < tail and level[sink] < 0:
                node = queue[head]
                head += 1
                for arc in range(2 * n):
                    target, residual = _residual(caps, flow, node, arc)
                    if target >= 0 and level[target] < 0 and residual > eps:
                        level[target] = level[node] + 1
                        queue[tail] = target
                        tail += 1
            if level[sink] < 0:
                break
            for node in range(n_nodes):
                current[node] = 0
            depth = 0
            path[0] = source
            while True:
                node = path[depth]
                if node == sink:
                    bottleneck = 1e300
                    for d in range(depth):
                        residual = _residual(caps, flow, path[d], current[path[d]])[1]
                        bottleneck = min(bottleneck, residual)
                    for d in range(depth):
                        _push(flow, n, path[d], current[path[d]], bottleneck)
                    total += bottleneck
                    depth = 0  # back to the source: the pointers keep every exhausted arc skipped
                    continue
                advanced = False
                while current[node] < 2 * n:
                    target, residual = _residual(caps, flow, node, current[node])
                    if target >= 0 and residual > eps and level[target] == level[node] + 1:
                        depth += 1
                        path[depth] = target
                        advanced = True
                        break
                    current[node] += 1
                if advanced:
                    continue
                if depth == 0:
                    break
                level[node] = -1  # a dead end: no path through it in this phase
                depth -= 1
                current[path[depth]] += 1
        out[p] = total
        for layer in range(n_layer):
            for i in range(n):
                for j in range(n):
                    flow[layer, i, j] = 0.0
