"""Dataset aggregates of the analyzers' head maps, kept as running sums so that each batch's part stores its own.

Every analyzer that declares a head map (`AnalyzerResult.head_map`: arrays [batch, layer, head], e.g. the
attention entropy) contributes each of its [batch, layer, head] arrays as a column of heads.csv: per
(layer, head), Σ_b value[b] · w_b / Σ_b w_b over the dataset, w_b the head map's weight (1 when it names none).
A batch stores its sums; merging adds the batches in index order, so an interrupted and resumed audit adds
exactly the same numbers in the same order as an uninterrupted one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from interpret.analysis import AnalyzerResult

HEAD_AXES = ("batch", "layer", "head")


@dataclass(frozen=True)
class HeadSums:
    """Weighted sums over examples of each head-map column, [layer, head] float64, and their total weights.

    sums: column name (the array's name, prefixed with the analyzer's when two analyzers share it) → Σ_b w_b·x_b.
    weights: column name → Σ_b w_b.
    """

    sums: Mapping[str, np.ndarray] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (floats survive JSON exactly) that `from_dict` reads back."""
        return {
            "sums": {name: values.tolist() for name, values in self.sums.items()},
            "weights": dict(self.weights),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeadSums:
        """Return the HeadSums that `to_dict` wrote."""
        return cls(
            sums={name: np.asarray(values, dtype=np.float64) for name, values in data["sums"].items()},
            weights={name: float(value) for name, value in data["weights"].items()},
        )


def head_columns(results: Sequence[AnalyzerResult]) -> list[tuple[str, AnalyzerResult, str]]:
    """Return (column name, result, array name) for every [batch, layer, head] array of a head-map result."""
    found = [
        (result, name)
        for result in results
        if result.head_map is not None
        for name, array in result.arrays.items()
        if array.axes == HEAD_AXES
    ]
    counts = Counter(name for _, name in found)
    return [(name if counts[name] == 1 else f"{result.analyzer}.{name}", result, name) for result, name in found]


def head_sums(results: Sequence[AnalyzerResult]) -> HeadSums:
    """Return one batch's weighted sums of every head-map column."""
    sums: dict[str, np.ndarray] = {}
    weights: dict[str, float] = {}
    for column, result, array in head_columns(results):
        assert result.head_map is not None
        values = np.asarray(result[array], dtype=np.float64)
        weight = (
            np.ones(values.shape[0]) if result.head_map.weight is None
            else np.asarray(result[result.head_map.weight], dtype=np.float64)
        )
        sums[column] = np.tensordot(weight, values, axes=1)
        weights[column] = float(weight.sum())
    return HeadSums(sums, weights)


def merge(parts: Sequence[HeadSums]) -> HeadSums:
    """Return the sum of the batches' sums, added in the order given."""
    sums: dict[str, np.ndarray] = {}
    weights: dict[str, float] = {}
    for part in parts:
        for name, values in part.sums.items():
            sums[name] = sums[name] + values if name in sums else values.copy()
            weights[name] = weights.get(name, 0.0) + part.weights[name]
    return HeadSums(sums, weights)


def head_table(stats: HeadSums) -> pd.DataFrame:
    """Return one row per (layer, head): layer int64, head int64, then one float64 column per head-map array."""
    if not stats.sums:
        return pd.DataFrame({"layer": pd.Series(dtype="int64"), "head": pd.Series(dtype="int64")})
    n_layers, n_heads = next(iter(stats.sums.values())).shape
    columns: dict[str, np.ndarray] = {
        "layer": np.repeat(np.arange(n_layers, dtype=np.int64), n_heads),
        "head": np.tile(np.arange(n_heads, dtype=np.int64), n_layers),
    }
    for name, values in stats.sums.items():
        columns[name] = (values / max(stats.weights[name], 1e-300)).reshape(-1)
    return pd.DataFrame(columns)
