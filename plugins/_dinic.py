"""Dinic's maximum flow, specialised to the layered attention graph and compiled with numba.

The graph of one (source, sink) pair: the source is the top node (L, q), the sink the input node (0, k), and
arcs run from (l, i) down to (l − 1, j) with capacity caps[l − 1, i, j]. Two exact reductions shrink it:
  * no other top-layer node can be reached, so the source keeps just its row caps[L − 1, q, :];
  * a layer-0 node other than k leads nowhere, so layer 1 keeps just its arcs into the sink, caps[0, :, k].
What is left are the internal layers 1 … L − 1, stored as "blocks" 0 … L − 2 of n nodes each (node id =
block·n + token), then the source and the sink. Block b's down arcs are caps[b], the arcs coming down into
it caps[b + 1], and flow[m] holds the flow on caps[m + 1]'s arcs. Residual arcs run down (capacity − flow)
or up (the flow on the arc above), so the level graph needs a real BFS after the first phase.

Each phase is one DFS that pushes as much as it can: a node splits its budget over its admissible arcs
(current-arc pointers) and an arc's flow is updated once per return, not once per source-to-sink path.
Exact shortcuts that make it fast on dense attention:
  * phase one needs no BFS: with no flow yet, distances are layer distances;
  * skip lists let the BFS visit only unlabelled nodes and the DFS only live nodes of the wanted level, so a
    dead end is passed once per phase rather than once per parent;
  * every node tries the arc into the sink's token first (whatever enters that chain runs straight down),
    then its own token's arc (the residual stream, weight ≥ w): flow then runs down whole token chains
    instead of spreading over small attention arcs (a third fewer pushes and time on MiniLM);
  * a layer-1 node next to the sink passes what it gets straight on, without a DFS step of its own, and in
    phase one a layer-2 node spreads its budget over those children in one tight loop;
  * each pair has an upper bound: the source's capacity, the forward bound of its query and, when many rows
    are asked for, the backward bound of its key (`flow_bounds`). The source asks for no more
    and the pair stops when the bound is reached (all but a few pairs on MiniLM), saving the final, failing BFS;
  * per pair only the touched flow entries are reset.
The hot loops live in one function on purpose: small numba helpers that take arrays were measurably slower.
The helpers are `register_jitable`, compiled into the kernel rather than as entry points of their own, and
the scratch arrays come from NumPy (`workspace`), packed into few arguments: numba's compile time, which a
first report pays, grows with every argument it unboxes and every array it creates or assigns whole.

Arithmetic is float64. A residual at or below `eps` (1e-15 of the largest capacity) counts as saturated,
which bounds the number of pushes; stopping at the bound allows a shortfall of 16·eps.
"""

from __future__ import annotations

from typing import no_type_check

import numba
import numpy as np
from numba.extending import register_jitable

# Every compiled function is marked @no_type_check: the tests' jaxtyping import hook would otherwise wrap it
# in a type-checking closure before numba sees it, which numba can neither compile nor cache.

# Current-arc states besides a position in a level bucket.
_SINK_ARC = -1
_FRESH = -2
_UP_START = -3
_DIAGONAL = -4
_FRESH_BUCKET = -5
_TARGET = -6
# Kinds of the arc from path[d] to path[d + 1].
_SOURCE_ARC, _TO_SINK, _DOWN, _UP = 0, 1, 2, 3
# Rows of the packed scratch arrays (see `workspace`).
_N_FLOATS = 7
_N_INTS = 11
_BLOCK_OF = 10


@register_jitable
@no_type_check
def find_live(skip, x):
    """Return the first position at or after x whose skip entry points to itself, halving the path on the way.

    A skip list as union-find: removing position x sets skip[x] = x + 1, so a scan passes a removed entry
    once for all later scans instead of once per scanning node.
    """
    while skip[x] != x:
        skip[x] = skip[skip[x]]
        x = skip[x]
    return x


@register_jitable
@no_type_check
def residual_levels(q, caps, sink_caps, flow, source_flow, sink_flow, eps, level, queue, unlabelled, ranges, block_of):
    """Label residual BFS distances from the source in `level`; return (the sink's distance or -1, nodes queued).

    `queue` ends up holding the labelled internal nodes in BFS order, hence sorted by distance. The search
    stops when it reaches the sink: every node nearer than the sink is labelled by then. `unlabelled` is a
    skip list over node ids, so each scan visits only nodes still without a label.
    """
    n_layer, n = caps.shape[0], caps.shape[1]
    down_lo, down_hi, up_lo, up_hi = ranges[0], ranges[1], ranges[2], ranges[3]
    source = (n_layer - 1) * n
    for x in range(source + 1):
        unlabelled[x] = x
    for x in range(source + 2):
        level[x] = -1
    level[source] = 0
    tail = 0
    top = (n_layer - 2) * n
    for j in range(down_lo[n_layer - 1, q], down_hi[n_layer - 1, q]):
        if caps[n_layer - 1, q, j] - source_flow[j] > eps:
            level[top + j] = 1
            unlabelled[top + j] = top + j + 1
            queue[tail] = top + j
            tail += 1
    head = 0
    while head < tail:
        node = queue[head]
        head += 1
        next_level = level[node] + 1
        block = block_of[node]
        i = node - block * n
        if block == 0:
            if sink_caps[i] - sink_flow[i] > eps:
                level[source + 1] = next_level
                return next_level, tail
        else:
            base = (block - 1) * n
            end = base + down_hi[block, i]
            x = find_live(unlabelled, base + down_lo[block, i])
            while x < end:
                if caps[block, i, x - base] - flow[block - 1, i, x - base] > eps:
                    level[x] = next_level
                    unlabelled[x] = x + 1
                    queue[tail] = x
                    tail += 1
                x = find_live(unlabelled, x + 1)
        if block <= n_layer - 3:
            base = (block + 1) * n
            end = base + up_hi[block + 1, i]
            x = find_live(unlabelled, base + up_lo[block + 1, i])
            while x < end:
                if flow[block, x - base, i] > eps:  # flow on the arc from (block + 1, x) down into this node
                    level[x] = next_level
                    unlabelled[x] = x + 1
                    queue[tail] = x
                    tail += 1
                x = find_live(unlabelled, x + 1)
    return -1, tail


def workspace(n_layer: int, n: int) -> tuple[np.ndarray, ...]:
    """Return the scratch arrays of `max_flow_pairs` for a graph of n_layer layers of n tokens (one per thread).

    Allocated here, in NumPy, rather than inside the kernel, and packed into few arguments: array creation,
    whole-array assignment and every argument the kernel unboxes add to numba's compile time, which a first
    report pays in full. The kernel reuses the buffers for every pair.
    """
    n_mid = max(n_layer - 2, 1)
    n_internal = (n_layer - 1) * n
    flow = np.zeros((n_mid, n, n))
    floats = np.zeros((_N_FLOATS, n_internal + 2))
    ints = np.empty((_N_INTS, n_internal + 3), dtype=np.int64)
    # 64-bit integer division costs tens of cycles; the hot loops look the block up instead.
    ints[_BLOCK_OF, : n_internal + 2] = np.arange(n_internal + 2) // n
    buckets = np.full((3, n_layer - 1, n_internal + 3), -1, dtype=np.int64)
    # Touched entries are recorded up to an eighth of the flow array; past that one full clear costs at most
    # eight times the work the pair already did.
    touched = np.empty(n_mid * n * n // 8 + n, dtype=np.int64)
    return flow, flow.reshape(-1), floats, ints, buckets, touched


@numba.njit(cache=True, nogil=True, error_model="numpy")
@no_type_check
def max_flow_pairs(
    caps, sources, sinks, eps, ranges, forward, forward_row, backward, backward_row, out,
    flow, flow_flat, floats, ints, buckets, touched,
):
    """Write into out[p] the maximum flow from top node (L, sources[p]) to input node (0, sinks[p]).

    caps: [layer, query, key] float64 capacities, at least two layers. ranges [4, layer, n]: down_lo / down_hi,
    [layer, query] half-open bounds of each row's positive columns, and up_lo / up_hi, [layer, key] of each
    column's positive rows, so a causal graph is scanned on its triangle only. forward[forward_row[p]] and
    backward[backward_row[p]] are the pair's `flow_bounds` rows (backward may have no rows: then only the
    forward bound and the source's capacity bound the pair). The rest is the scratch of `workspace`, reused
    across pairs and calls: flow and the first two rows of floats must be zero on entry, and are left zero.
    """
    source_flow, sink_flow, sink_caps = floats[0], floats[1], floats[2]
    path_residual, asked, left, sent = floats[3], floats[4], floats[5], floats[6]
    level, queue, unlabelled, live = ints[0], ints[1], ints[2], ints[3]
    order, position, count, current = ints[4], ints[5], ints[6], ints[7]
    path, path_kind, block_of = ints[8], ints[9], ints[_BLOCK_OF]
    bucket_lo, bucket_hi, bucket_stamp = buckets[0], buckets[1], buckets[2]
    n_layer, n = caps.shape[0], caps.shape[1]
    source = (n_layer - 1) * n
    sink = source + 1
    n_internal = source
    exhausted = 4 * (n_internal + 2)
    top = (n_layer - 2) * n
    with_backward = backward.shape[0] > 0
    # Stamps restart with every call, so stale ones from the workspace's previous call are cleared first.
    for block in range(n_layer - 1):
        for x in range(n_internal + 3):
            bucket_stamp[block, x] = -1
    stamp = 0
    for p in range(sources.shape[0]):
        q = sources[p]
        k = sinks[p]
        fwd_bound = 0.0
        bwd_bound = 0.0
        source_cap = 0.0
        for i in range(n):
            sink_caps[i] = caps[0, i, sinks[p]]
            fwd_bound += min(forward[forward_row[p], i], sink_caps[i])
            source_cap += caps[n_layer - 1, q, i]
            if with_backward:
                bwd_bound += min(caps[n_layer - 1, q, i], backward[backward_row[p], i])
        # The source's own arcs are a cut too: free, and what limits most pairs that the forward bound misses.
        bound = min(fwd_bound, source_cap)
        if with_backward:
            bound = min(bound, bwd_bound)
        stop_at = bound - 16.0 * eps
        n_touched = 0
        overflow = False
        total = 0.0
        first_phase = True
        while total < stop_at:
            stamp += 1
            phase_one = first_phase
            if first_phase:
                # With no flow yet there are no up arcs, so the BFS distance of every node that the source
                # reaches is its layer distance: label by layer and skip the search. Nodes the source cannot
                # reach get labels too, but the DFS never gets to them.
                first_phase = False
                sink_level = n_layer
                level[source] = 0
                level[sink] = n_layer
                for node in range(n_internal):
                    block = block_of[node]
                    level[node] = n_layer - 1 - block
                    order[node] = node
                    position[node] = node
                    current[node] = _FRESH
                for block in range(n_layer - 1):
                    bucket_stamp[block, n_layer - 1 - block] = stamp
                    bucket_lo[block, n_layer - 1 - block] = block * n
                    bucket_hi[block, n_layer - 1 - block] = (block + 1) * n
            else:
                sink_level, n_labelled = residual_levels(
                    q, caps, sink_caps, flow, source_flow, sink_flow, eps, level, queue, unlabelled, ranges, block_of
                )
                if sink_level < 0:
                    break
                # Level buckets: the BFS queue is sorted by level, so each block's nodes come out in order.
                for block in range(n_layer - 1):
                    count[block] = 0
                for t in range(n_labelled):
                    node = queue[t]
                    block = block_of[node]
                    pos = block * n + count[block]
                    count[block] += 1
                    order[pos] = node
                    position[node] = pos
                    if bucket_stamp[block, level[node]] != stamp:
                        bucket_stamp[block, level[node]] = stamp
                        bucket_lo[block, level[node]] = pos
                    bucket_hi[block, level[node]] = pos + 1
                    current[node] = _FRESH
            for x in range(n_internal + 1):
                live[x] = x
            current[source] = bucket_lo[n_layer - 2, 1] if bucket_stamp[n_layer - 2, 1] == stamp else exhausted
            # One DFS per phase pushes as much as it can (the source asks for what the bound still allows):
            # a node splits its budget over its admissible arcs and each arc's flow is updated once per
            # return, not once per source-to-sink path.
            depth = 0
            path[0] = source
            asked[0] = bound - total
            left[0] = asked[0]
            sent[0] = 0.0
            returned = -1.0  # ≥ 0: what the child path[depth + 1] just passed on
            while True:
                node = path[depth]
                if returned >= 0.0:
                    kind = path_kind[depth]
                    child = path[depth + 1]
                    residual = path_residual[depth]
                    if returned > 0.0:
                        if kind == _SOURCE_ARC:
                            j = child - top
                            source_flow[j] += returned
                            residual = caps[n_layer - 1, q, j] - source_flow[j]
                        elif kind == _TO_SINK:
                            sink_flow[node] += returned
                            residual = sink_caps[node] - sink_flow[node]
                        else:
                            block = block_of[node]
                            i = node - block * n
                            if kind == _DOWN:
                                m = block - 1
                                j = child - m * n
                                if flow[m, i, j] == 0.0 and not overflow:
                                    if n_touched == touched.shape[0]:
                                        overflow = True
                                    else:
                                        touched[n_touched] = (m * n + i) * n + j
                                        n_touched += 1
                                flow[m, i, j] += returned
                                residual = caps[block, i, j] - flow[m, i, j]
                            else:  # cancel flow on the arc from (block + 1, j) down into this node
                                j = child - (block + 1) * n
                                flow[block, j, i] -= returned
                                residual = flow[block, j, i]
                        left[depth] -= returned
                        sent[depth] += returned
                    path_residual[depth] = residual
                    # A child that passed on less than asked is blocked; a saturated arc is used up.
                    if returned < asked[depth + 1] or residual <= eps:
                        if kind == _TO_SINK:
                            current[node] = _UP_START
                        elif current[node] == _DIAGONAL:
                            current[node] = _FRESH_BUCKET
                        elif current[node] == _TARGET:
                            current[node] = _DIAGONAL
                        else:
                            current[node] += 1
                    returned = -1.0
                if node == sink:
                    returned = asked[depth]
                    depth -= 1
                    continue
                if left[depth] <= eps:
                    if depth == 0:
                        break
                    returned = sent[depth]
                    depth -= 1
                    continue
                if phase_one and block_of[node] == 1 and node != source:
                    # Phase one at layer 2: every child is a layer-1 node whose one arc leads to the sink, in
                    # token order (levels are layers, no arc runs up yet). Spread the budget over them in one
                    # tight loop, the sink's token and the node's own first, as the DFS would one step at a time.
                    i = node - n
                    pos = current[node]
                    if pos == _FRESH:
                        pos = 0
                        for attempt in range(2):
                            j = k if attempt == 0 else i
                            if (attempt == 1 and i == k) or live[j] != j or left[depth] <= eps:
                                continue
                            residual = caps[1, i, j] - flow[0, i, j]
                            spare = sink_caps[j] - sink_flow[j]
                            if residual > eps:
                                amount = min(left[depth], residual, spare) if spare > eps else 0.0
                                if amount > 0.0:
                                    if flow[0, i, j] == 0.0 and not overflow:
                                        if n_touched == touched.shape[0]:
                                            overflow = True
                                        else:
                                            touched[n_touched] = i * n + j
                                            n_touched += 1
                                    flow[0, i, j] += amount
                                    sink_flow[j] += amount
                                    left[depth] -= amount
                                    sent[depth] += amount
                                if spare - amount <= eps:
                                    live[j] = j + 1
                    while left[depth] > eps:
                        pos = find_live(live, pos)
                        if pos >= n:
                            break
                        residual = caps[1, i, pos] - flow[0, i, pos]
                        if residual > eps:
                            spare = sink_caps[pos] - sink_flow[pos]
                            amount = min(left[depth], residual, spare) if spare > eps else 0.0
                            if amount > 0.0:
                                if flow[0, i, pos] == 0.0 and not overflow:
                                    if n_touched == touched.shape[0]:
                                        overflow = True
                                    else:
                                        touched[n_touched] = i * n + pos
                                        n_touched += 1
                                flow[0, i, pos] += amount
                                sink_flow[pos] += amount
                                left[depth] -= amount
                                sent[depth] += amount
                            if spare - amount <= eps:
                                live[pos] = pos + 1
                            if left[depth] <= eps and residual - amount > eps:
                                break  # the budget ran out first: this arc still has room for the next visit
                        pos += 1
                    current[node] = pos
                    if left[depth] > eps:  # out of arcs: a dead end for the rest of the phase
                        live[position[node]] = position[node] + 1
                    returned = sent[depth]
                    depth -= 1
                    continue
                # Advance along the first admissible arc at or after the current-arc pointer.
                wanted = level[node] + 1
                pos = current[node]
                found = -1
                kind = -1
                residual = 0.0
                if node == source:
                    end = bucket_hi[n_layer - 2, 1]
                    pos = find_live(live, pos) if pos < exhausted else pos
                    while pos < end:
                        j = order[pos] - top
                        residual = caps[n_layer - 1, q, j] - source_flow[j]
                        if residual > eps:
                            found = order[pos]
                            kind = _SOURCE_ARC
                            break
                        pos = find_live(live, pos + 1)
                    if found < 0:
                        pos = exhausted
                else:
                    block = block_of[node]
                    i = node - block * n
                    if pos == _FRESH:
                        pos = _SINK_ARC if block == 0 else (_DIAGONAL if i == k else _TARGET)
                    if pos == _TARGET:
                        # The arc into the sink's own token chain first: whatever enters it runs straight down.
                        below = (block - 1) * n + k
                        if wanted < sink_level and level[below] == wanted and live[position[below]] == position[below]:
                            residual = caps[block, i, k] - flow[block - 1, i, k]
                            if residual > eps:
                                found = below
                                kind = _DOWN
                        if found < 0:
                            pos = _DIAGONAL
                    if found < 0 and pos == _DIAGONAL:
                        # The residual stream's own arc (weight ≥ w) first: flow then runs down whole token
                        # chains, which needs far fewer pushes than spreading it over small attention arcs.
                        below = node - n
                        if wanted < sink_level and level[below] == wanted and live[position[below]] == position[below]:
                            residual = caps[block, i, i] - flow[block - 1, i, i]
                            if residual > eps:
                                found = below
                                kind = _DOWN
                        if found < 0:
                            if wanted < sink_level and bucket_stamp[block - 1, wanted] == stamp:
                                pos = bucket_lo[block - 1, wanted]
                            else:
                                pos = _UP_START
                    if pos == _SINK_ARC:
                        if wanted == sink_level:
                            residual = sink_caps[i] - sink_flow[i]
                            if residual > eps:
                                found = sink
                                kind = _TO_SINK
                        if found < 0:
                            pos = _UP_START
                    if pos == _FRESH_BUCKET:
                        if wanted < sink_level and bucket_stamp[block - 1, wanted] == stamp:
                            pos = bucket_lo[block - 1, wanted]
                        else:
                            pos = _UP_START
                    if found >= 0 or pos < 0:
                        pass
                    elif 0 <= pos <= block * n:  # in the down bucket, or just past its segment's end
                        end = bucket_hi[block - 1, wanted]
                        base = (block - 1) * n
                        pos = find_live(live, pos)
                        while pos < end:
                            j = order[pos] - base
                            residual = caps[block, i, j] - flow[block - 1, i, j]
                            if residual > eps:
                                found = order[pos]
                                kind = _DOWN
                                break
                            pos = find_live(live, pos + 1)
                        if found < 0:
                            pos = _UP_START
                    if pos == _UP_START:
                        if block <= n_layer - 3 and wanted < sink_level and bucket_stamp[block + 1, wanted] == stamp:
                            pos = bucket_lo[block + 1, wanted]
                        else:
                            pos = exhausted
                    if found < 0 and pos < exhausted:
                        end = bucket_hi[block + 1, wanted]
                        base = (block + 1) * n
                        pos = find_live(live, pos)
                        while pos < end:
                            j = order[pos] - base
                            residual = flow[block, j, i]
                            if residual > eps:
                                found = order[pos]
                                kind = _UP
                                break
                            pos = find_live(live, pos + 1)
                        if found < 0:
                            pos = exhausted
                current[node] = pos
                if found >= 0:
                    path_residual[depth] = residual
                    path_kind[depth] = kind
                    path[depth + 1] = found
                    asked[depth + 1] = min(left[depth], residual)
                    if kind == _DOWN and found < n and level[found] == sink_level - 1:
                        # A layer-1 node one step from the sink has no other admissible arc: pass the flow
                        # straight on instead of descending into it (half the DFS steps on attention). The
                        # next iteration books the arc into it as after any return.
                        spare = sink_caps[found] - sink_flow[found]
                        returned = min(asked[depth + 1], spare) if spare > eps else 0.0
                        sink_flow[found] += returned
                        if spare - returned <= eps:
                            live[position[found]] = position[found] + 1
                    else:
                        depth += 1
                        left[depth] = asked[depth]
                        sent[depth] = 0.0
                elif depth == 0:
                    break
                else:
                    # A dead end: drop it from every bucket; the parent learns it from the shortfall.
                    live[position[node]] = position[node] + 1
                    returned = sent[depth]
                    depth -= 1
            total += sent[0]
        out[p] = total
        # Reset for the next pair: only the touched entries, unless more were touched than recorded.
        for i in range(n):
            source_flow[i] = 0.0
            sink_flow[i] = 0.0
        if overflow:
            for t in range(flow_flat.shape[0]):
                flow_flat[t] = 0.0
        else:
            for t in range(n_touched):
                flow_flat[touched[t]] = 0.0


@numba.njit(cache=True, nogil=True)
@no_type_check
def flow_bounds(caps, queries, keys, forward, backward, buffer):
    """Fill forward[r, node] [query, node] for queries[r] and backward[c, node] [key, node] for keys[c].

    forward[r, i] bounds the flow from (L, queries[r]) that can arrive at layer-1 node i, and backward[c, j]
    the flow that layer-(L − 1) node j can pass on to (0, keys[c]): layer by layer, the flow on an arc is at
    most min(its capacity, the bound of its tail), and a node gets at most the sum over its arcs. Hence
    Σ_i min(forward[q, i], caps[0, i, k]) and Σ_j min(caps[L − 1, q, j], backward[k, j]) bound the max flow.
    `buffer` is scratch of n entries. A bound costs O(L·n²) and serves a whole row (forward) or column
    (backward). The loops go element by element on purpose: whole-array assignments (`a[r, :] = b[...]`)
    take numba several times longer to compile.
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
