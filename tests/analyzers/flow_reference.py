"""The attention-flow statement of Abnar & Zuidema (2020) in plain networkx: the independent reference.

Deliberately naive and separate from `interpret.plugins.flow_math`: it builds the whole layered graph with
every arc (zero capacities included) and asks networkx for one maximum flow per (query, key) pair.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import networkx as nx
import numpy as np


def residual_augmented(pattern: np.ndarray, residual_weight: float = 0.5) -> np.ndarray:
    """Return [layer, query, key]: head mean, then w·I + (1 − w)·A with each row divided by its sum."""
    mean = pattern.astype(np.float64).mean(axis=1)
    n = mean.shape[-1]
    augmented = residual_weight * np.eye(n) + (1.0 - residual_weight) * mean
    return augmented / augmented.sum(axis=-1, keepdims=True)


def layered_graph(augmented: np.ndarray) -> nx.DiGraph:
    """Return the DiGraph on nodes (layer, token), arc (l, i) → (l − 1, j) of capacity augmented[l − 1, i, j]."""
    n_layer, n, _ = augmented.shape
    graph = nx.DiGraph()
    for layer in range(1, n_layer + 1):
        for i in range(n):
            for j in range(n):
                graph.add_edge((layer, i), (layer - 1, j), capacity=float(augmented[layer - 1, i, j]))
    return graph


def reference_flow(
    augmented: np.ndarray,
    rows: Sequence[int] | None = None,
    flow_func: Callable | None = None,
) -> np.ndarray:
    """Return [row, key]: the max flow from top node (L, q) to input node (0, k) for each q in `rows`, each k."""
    n_layer, n, _ = augmented.shape
    graph = layered_graph(augmented)
    queries = list(range(n)) if rows is None else list(rows)
    flow = np.zeros((len(queries), n))
    for row, query in enumerate(queries):
        for key in range(n):
            flow[row, key] = nx.maximum_flow_value(graph, (n_layer, query), (0, key), flow_func=flow_func)
    return flow


def paper_flow(augmented: np.ndarray, rows: Sequence[int] | None = None) -> np.ndarray:
    """Return [row, key]: the paper's attention flow, each output node's max-flows divided by their sum.

    As Abnar & Zuidema's `compute_flows` states it: one max-flow per (output node, input node), then
    flow_values[u] /= flow_values[u].sum().
    """
    flow = reference_flow(augmented, rows)
    return flow / flow.sum(axis=-1, keepdims=True)


def reference_flow_from(augmented: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Return [key]: the max flow from a super-source, joined to each top node (L, i) with capacity weights[i]."""
    n_layer, n, _ = augmented.shape
    graph = layered_graph(augmented)
    for i in range(n):
        graph.add_edge("source", (n_layer, i), capacity=float(weights[i]))
    return np.array([nx.maximum_flow_value(graph, "source", (0, key)) for key in range(n)])
