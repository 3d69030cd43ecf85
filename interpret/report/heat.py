"""[layer × head] heat tables: the compact grid of numbers coloured by level that the audit page and the report
draw with the `heat_table` macro (templates/components.html.j2; colours h0..h10 in report.css, so no inline
style). The report draws a `table` view of a [batch, layer, head] array (attention entropy, attention on
special tokens, head importance) this way, one grid per example (`interpret.report.views.heat_maps`), instead
of a list of layers × heads rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from interpret.analysis.result import NamedArray, View

HEAT_LEVELS = 10  # colour classes h0 (the grid's minimum) .. h10 (its maximum)
HEAT_AXES = ("batch", "layer", "head")


def heat_grid(
    values: np.ndarray, rows: Sequence[Any], columns: Sequence[Any], text: Callable[[float], str],
    corner: str = "layer \\ head",
) -> dict[str, Any]:
    """Return the `heat_table` grid of `values` [rows, columns]: {"corner", "columns", "rows": [(label, [(text,
    level)])]}, level 0 at the finite minimum, HEAT_LEVELS at the maximum, None for a non-finite value."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    span = high - low if high > low else 1.0
    grid = []
    for label, row in zip(rows, values):
        cells = [
            (text(float(value)), round((float(value) - low) / span * HEAT_LEVELS) if math.isfinite(value) else None)
            for value in row
        ]
        grid.append((label, cells))
    return {"corner": corner, "columns": list(columns), "rows": grid}


def is_heat_view(view: View, array: NamedArray) -> bool:
    """Return whether the report draws `view` as a heat table: a table of a [batch, layer, head] array."""
    return view.kind == "table" and tuple(array.axes) == HEAT_AXES

