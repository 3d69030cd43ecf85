"""Exact attention flow (Abnar & Zuidema 2020) as pure functions over NumPy arrays.

The layered graph has (L + 1)·n nodes (layer 0 = the input tokens … layer L); an arc runs from (l, i) down
to (l − 1, j) with capacity Â_l[i, j], Â being the head-averaged, residual-augmented attention with rows
summing to one (`rollout_math.add_residual`). The raw value of a pair is the maximum flow from (L, q) to
(0, k). The paper's attention flow divides each output node's values by their sum, flow[q, :] / Σ_k
flow[q, k] (`compute_flows` / `compute_node_flow` of samiraabnar/attention_flow), so that a row sums to one
like an attention row: `normalize="row"` (the default of `attention_flow`) gives that, `"none"` the raw
max-flows, which sum to far more than one (5 to 9 per row on a 10-token MiniLM input). A row that is all zero
(an absent, padded query) stays zero. `max_flow_from` puts the source on a weighted set of top nodes: the
flow from a decision that pools the top layer with weights w is one more layer whose only row is w.

`_raw_flows` is the one entry point to a solver. Pairs that no path joins (a causal model's k > q) are zero
without one, and one or two layers have closed forms (Â_1 itself; Σ_i min(Â_2[q, i], Â_1[i, k])). Otherwise:
  * method "dinic" (default): Dinic's algorithm in float64, within ~1e-14 of the exact flow, compiled with
    numba. The solver is picked by size alone, so the same input always gets the same bits: below
    SMALL_FLOW_WORK (pairs × layers × n²) a compact textbook Dinic (`_small_flow.py`, about 4 s to compile on
    a busy 2-core machine), above it the kernel specialised to the layered graph (`_dinic.py`, about 20 s to
    compile there, several times faster per pair: benchmarks/flow.py, benchmarks/first_call.py), over the
    pairs on `interpret.runtime.threads`. Both compile once and load from numba's cache afterwards, so a first report
    on a short text never pays the long compile.
  * method "scipy": `scipy.sparse.csgraph.maximum_flow` on integer capacities, one graph for all pairs: each
    capacity is scaled by S = 2**30 / (the largest row sum, 1 for attention) and rounded down, so the flow is
    a feasible flow of the true graph: never above the exact flow, short by at most m·2**-30 ≈ m·9.3e-10 (m
    the arc count of the minimum cut, dozens on attention). The independent check, asked for explicitly.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
from jaxtyping import Float

from interpret.errors import ConfigError
from interpret.runtime import threads

from .rollout_math import add_residual, fuse_heads, readout_positions

METHODS = ("dinic", "scipy")
NORMALIZATIONS = ("row", "none")
SCIPY_SCALE = 2**30  # per unit of the largest row sum: every flow then stays inside scipy's int32 arithmetic
_SATURATION = 1e-15  # a residual ≤ this fraction of the largest capacity counts as saturated
_BACKWARD_ROWS = 8  # backward bounds are computed when rows × this ≥ n (see `_dinic_flows`)
# Pairs × layers × n² below which the compact Dinic runs: one readout row up to 43 tokens on 6 layers.
# It fixes which solver (and so which last bits) an input gets; change it only with the timings above.
SMALL_FLOW_WORK = 500_000


def attention_flow(
    pattern: Float[np.ndarray, "*batch layer head query key"],
    *,
    residual_weight: float = 0.5,
    readout: int | Sequence[int] | None = None,
    method: str = "dinic",
    workers: int | None = None,
    normalize: str = "row",
) -> Float[np.ndarray, "*batch row key"]:
    """Return the attention flow [*batch, row, key]: row = query for readout None, else one per readout position.

    Heads are averaged and the residual added (weight `residual_weight`, rows renormalised), then flow[q, k]
    is the maximum flow from (L, q) to (0, k), each row divided by its sum (normalize "row", the paper's) or
    not ("none"); `workers` threads share the pairs (default: all cores).
    """
    augmented = add_residual(fuse_heads(pattern, "mean"), residual_weight)
    batch_shape = augmented.shape[:-3]
    rows = readout_positions(readout, augmented.shape[-1])
    stacked = augmented.reshape((-1,) + augmented.shape[-3:])
    flows = [
        max_flow_matrix(example, rows, method=method, workers=workers, normalize=normalize) for example in stacked
    ]
    return np.stack(flows).reshape(batch_shape + (len(rows), augmented.shape[-1]))


def max_flow_matrix(
    augmented: Float[np.ndarray, "layer query key"],
    rows: Sequence[int] | None = None,
    *,
    method: str = "dinic",
    workers: int | None = None,
    normalize: str = "none",
) -> Float[np.ndarray, "row key"]:
    """Return [row, key]: max flow from top node (L, q) to input node (0, k), for q in `rows` (None: all) and all k.

    `augmented` holds the arc capacities, layer l's arcs from (l + 1, i) to (l, j) in augmented[l, i, j];
    any non-negative capacities work, though the residual-augmented attention is the one the paper defines.
    normalize: "none" (default here) the raw max-flows, "row" each row divided by its sum (the paper's).
    """
    if normalize not in NORMALIZATIONS:
        raise ConfigError(f"flow normalisation {normalize!r} is unknown; use one of {', '.join(NORMALIZATIONS)}.")
    if method not in METHODS:
        raise ConfigError(f"flow method {method!r} is unknown; use one of {', '.join(METHODS)}.")
    if workers is not None and workers < 1:
        raise ConfigError(f"workers={workers} cannot run anything; use a positive number or None for all cores.")
    if np.any(augmented < 0) or not np.all(np.isfinite(augmented)):
        raise ConfigError("flow capacities must be finite and non-negative; pass a residual-augmented attention.")
    caps = np.ascontiguousarray(augmented, dtype=np.float64)
    n_layer, n, n_key = caps.shape
    if n != n_key:
        raise ConfigError(f"flow capacities are {n}x{n_key} per layer; the layered graph needs square [layer, n, n].")
    queries = np.asarray(readout_positions(rows, n), dtype=np.int64)
    return _normalized(_raw_flows(caps, queries, method, workers), normalize)


def max_flow_from(
    augmented: Float[np.ndarray, "layer query key"],
    weights: Float[np.ndarray, " pos"],
    *,
    method: str = "dinic",
    workers: int | None = None,
    normalize: str = "none",
) -> Float[np.ndarray, " key"]:
    """Return [key]: the max flow from a virtual source joined to each top node (L, i) with capacity weights[i].

    This is the flow from a decision that pools the top layer with weights w (a mean-pooled classifier: w_i
    = 1 / the number of real tokens, Σ w = 1): the graph gets one more layer, whose only row is w, and every
    key is one exact max-flow from that row, as `max_flow_matrix` computes it. normalize as there.
    """
    top = np.asarray(weights, dtype=np.float64)
    n = augmented.shape[-1]
    if top.shape != (n,):
        raise ConfigError(f"source weights have shape {top.shape}; give one weight per position, shape ({n},).")
    if np.any(top < 0) or not np.all(np.isfinite(top)) or not top.any():
        raise ConfigError("source weights must be finite, non-negative and not all zero (e.g. 1/n on each real token).")
    source_layer = np.zeros((1, n, n))
    source_layer[0, 0] = top  # the virtual source is row 0 of the extra layer; its other rows are never reached
    extended = np.concatenate([np.asarray(augmented, dtype=np.float64), source_layer])
    return max_flow_matrix(extended, [0], method=method, workers=workers, normalize=normalize)[0]


def _raw_flows(caps: Float[np.ndarray, "layer query key"], queries: np.ndarray, method: str, workers: int | None) -> np.ndarray:
    """Return [row, key] raw max-flows from (L, queries[row]) to every input node, by the cheapest exact route."""
    n_layer, n, _ = caps.shape
    if n_layer == 1:
        return caps[0, queries, :].copy()
    if n_layer == 2 and method == "dinic":
        # Each middle node i carries at most min(in, out) and the middle nodes share nothing.
        return np.stack([np.minimum(caps[1, query, :, None], caps[0]).sum(axis=0) for query in queries])
    flow = np.zeros((queries.size, n))
    row_index, key_index = np.nonzero(_reachable(caps, queries))
    if row_index.size == 0:
        return flow
    if method == "scipy":
        flow[row_index, key_index] = _scipy_flows(caps, queries[row_index], key_index)
    elif row_index.size * n_layer * n * n < SMALL_FLOW_WORK:
        flow[row_index, key_index] = _small_flows(caps, queries[row_index], key_index)
    else:
        flow[row_index, key_index] = _dinic_flows(caps, queries[row_index], key_index, workers)
    return flow


def _normalized(flow: Float[np.ndarray, "row key"], normalize: str) -> Float[np.ndarray, "row key"]:
    """Return `flow` [row, key] with each row divided by its sum (normalize "row"; all-zero rows stay zero)."""
    if normalize == "none":
        return flow
    total = flow.sum(axis=-1, keepdims=True)
    return np.divide(flow, total, out=np.zeros_like(flow), where=total > 0)


def _reachable(caps: Float[np.ndarray, "layer query key"], queries: np.ndarray) -> np.ndarray:
    """Return [row, key] booleans: whether any path of positive arcs joins (L, queries[row]) to (0, key)."""
    reach = (caps[-1, queries, :] > 0).astype(np.float64)
    with threads.blas_threads(queries.size * caps.size):
        for layer in range(caps.shape[0] - 2, -1, -1):
            # Clipping to 1 keeps path counts from overflowing in deep models; only > 0 matters.
            reach = np.minimum(reach @ (caps[layer] > 0), 1.0)
    return reach > 0


def _scan_ranges(caps: Float[np.ndarray, "layer query key"]) -> tuple[np.ndarray, ...]:
    """Return half-open index ranges of the positive entries: per row (down arcs) and per column (up arcs)."""
    positive = caps > 0
    n_layer, n, _ = caps.shape
    if positive.all():  # dense attention (no mask, no causal triangle): every range is the whole row
        full = np.broadcast_to(np.arange(2) * n, (n_layer, n, 2))
        return full[..., 0].copy(), full[..., 1].copy(), full[..., 0].copy(), full[..., 1].copy()

    def bounds(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        any_positive = mask.any(axis=-1)
        low = np.where(any_positive, mask.argmax(axis=-1), 0)
        high = np.where(any_positive, n - mask[..., ::-1].argmax(axis=-1), 0)
        return low.astype(np.int64), high.astype(np.int64)

    down_lo, down_hi = bounds(positive)
    up_lo, up_hi = bounds(np.swapaxes(positive, -1, -2))
    return down_lo, down_hi, up_lo, up_hi


def _small_flows(caps: Float[np.ndarray, "layer query key"], sources: np.ndarray, sinks: np.ndarray) -> np.ndarray:
    """Return [pair] maximum flows from the compact Dinic (`_small_flow.py`), on the calling thread."""
    from ._small_flow import small_max_flows  # compiled in under a second on first use, then cached

    n_layer, n, _ = caps.shape
    n_nodes = (n_layer + 1) * n
    out = np.zeros(sources.size)
    scratch = [np.empty(n_nodes, dtype=np.int64) for _ in range(4)]  # level, queue, current, path
    small_max_flows(
        caps, np.ascontiguousarray(sources, dtype=np.int64), np.ascontiguousarray(sinks, dtype=np.int64),
        _SATURATION * float(caps.max()), out, np.zeros((n_layer, n, n)), *scratch,
    )
    return out


def _dinic_flows(
    caps: Float[np.ndarray, "layer query key"], sources: np.ndarray, sinks: np.ndarray, workers: int | None
) -> np.ndarray:
    """Return [pair] maximum flows from the numba Dinic kernel, the pairs split across threads."""
    # Compiled on first use, or loaded from numba's cache (plugins/__pycache__) in a fraction of a second.
    from ._dinic import flow_bounds, max_flow_pairs, workspace

    n_layer, n, _ = caps.shape
    # One signature only (C-contiguous int64), so numba compiles and caches the kernel once.
    sources = np.ascontiguousarray(sources, dtype=np.int64)
    sinks = np.ascontiguousarray(sinks, dtype=np.int64)
    ranges = np.stack(_scan_ranges(caps))
    eps = _SATURATION * float(caps.max())
    queries, forward_row = (part.astype(np.int64) for part in np.unique(sources, return_inverse=True))
    keys, backward_row = (part.astype(np.int64) for part in np.unique(sinks, return_inverse=True))
    # A key's backward bound costs as much as a query's forward bound (L·n²) and serves one column, so it
    # pays only when many rows share the keys; for a few rows the source's own capacity bounds them instead.
    with_backward = queries.size * _BACKWARD_ROWS >= n
    if not with_backward:
        keys = keys[:0]
    forward = np.empty((queries.size, n))
    backward = np.empty((keys.size, n))
    out = np.zeros(sources.size)
    bound_threads = threads.threads_for((queries.size + keys.size) * n_layer * n * n, workers)
    # Roughly a pair's cost: its DFS touches a few arcs per node of every layer.
    pair_threads = threads.threads_for(sources.size * n_layer * n * 8, workers)
    none = np.empty(0, dtype=np.int64)

    def bounds_job(start: int, stop: int, backward_side: bool) -> Callable[[], None]:
        buffer = np.empty(n)
        if backward_side:
            return lambda: flow_bounds(caps, none, keys[start:stop], forward[:0], backward[start:stop], buffer)
        return lambda: flow_bounds(caps, queries[start:stop], none, forward[start:stop], backward[:0], buffer)

    threads.run(
        [bounds_job(*span, False) for span in threads.spans(queries.size, bound_threads)]
        + [bounds_job(*span, True) for span in threads.spans(keys.size, bound_threads)],
        bound_threads,
    )
    # One workspace per thread, handed from job to job (each is as large as the flow on every arc).
    free: queue.SimpleQueue = queue.SimpleQueue()

    def pair_job(start: int, stop: int) -> Callable[[], None]:
        def job() -> None:
            try:
                scratch = free.get_nowait()
            except queue.Empty:
                scratch = workspace(n_layer, n)
            max_flow_pairs(
                caps, sources[start:stop], sinks[start:stop], eps, ranges, forward, forward_row[start:stop],
                backward, backward_row[start:stop] if with_backward else none, out[start:stop], *scratch,
            )
            free.put(scratch)

        return job

    threads.run([pair_job(*span) for span in threads.spans(sources.size, pair_threads)], pair_threads)
    return out


def _scipy_flows(caps: Float[np.ndarray, "layer query key"], sources: np.ndarray, sinks: np.ndarray) -> np.ndarray:
    """Return [pair] maximum flows from scipy's solver on capacities rounded down to multiples of 1 / scale."""
    n_layer, n, _ = caps.shape
    scale = SCIPY_SCALE / float(caps.sum(axis=-1).max())
    scaled = np.floor(caps * scale).astype(np.int32)  # down: a feasible flow, never above the exact one
    layer, upper, lower = np.nonzero(scaled)
    # Node ids: layer l token i is l·n + i; the arcs of caps[l] run from layer l + 1 down to layer l.
    graph = scipy.sparse.csr_array(
        (scaled[layer, upper, lower], ((layer + 1) * n + upper, layer * n + lower)),
        shape=((n_layer + 1) * n, (n_layer + 1) * n),
    )
    top = n_layer * n
    values = [
        scipy.sparse.csgraph.maximum_flow(graph, top + int(source), int(sink)).flow_value
        for source, sink in zip(sources, sinks)
    ]
    return np.asarray(values, dtype=np.float64) / scale
