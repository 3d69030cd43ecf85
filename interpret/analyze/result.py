"""`AnalyzerResult`: what an analyzer returns — named arrays with named axes, scalars, checks and views."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

ViewKind = Literal["heatmap", "token_strip", "head_grid", "line", "table"]


@dataclass(frozen=True)
class NamedArray:
    """A numpy array whose axes are named in the shared vocabulary (batch first)."""

    values: np.ndarray
    axes: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.values.ndim != len(self.axes):
            raise ValueError(f"array has {self.values.ndim} axes but {len(self.axes)} names {self.axes}.")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict: axes, dtype, shape and the values as nested lists."""
        return {
            "axes": list(self.axes),
            "dtype": str(self.values.dtype),
            "shape": list(self.values.shape),
            "values": self.values.tolist(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NamedArray:
        """Return the NamedArray that `to_dict` wrote."""
        values = np.asarray(data["values"], dtype=data["dtype"]).reshape(data["shape"])
        return cls(values=values, axes=tuple(data["axes"]))


@dataclass(frozen=True)
class Check:
    """An invariant residual: `value` (e.g. the largest row-sum error) must not exceed `tolerance`."""

    value: float
    tolerance: float
    description: str = ""

    @property
    def ok(self) -> bool:
        """Whether the residual is within tolerance (a NaN is never ok)."""
        return not math.isnan(self.value) and abs(self.value) <= self.tolerance


@dataclass(frozen=True)
class View:
    """A request to the report: draw `array` as `kind`, with a title and kind-specific options."""

    kind: ViewKind
    array: str
    title: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AnalyzerResult:
    """The output of one analyzer on one trace.

    arrays: named arrays, e.g. `rollout` [batch, query, key]; each analyzer documents its own.
    scalars: named numbers (e.g. the predicted probability of the target).
    checks: invariant residuals shown in the report with a warning when out of tolerance.
    tokens: the token strings per example, so the result can be drawn without its trace.
    """

    analyzer: str
    version: str
    params: Mapping[str, Any]
    arrays: Mapping[str, NamedArray]
    scalars: Mapping[str, float] = field(default_factory=dict)
    checks: Mapping[str, Check] = field(default_factory=dict)
    views: Sequence[View] = ()
    tokens: Sequence[Sequence[str]] = ()

    def __post_init__(self) -> None:
        for view in self.views:
            if view.array not in self.arrays:
                raise ValueError(f"view {view.title!r} draws {view.array!r}, which is not among {sorted(self.arrays)}.")

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name].values

    @property
    def ok(self) -> bool:
        """Whether every check is within tolerance."""
        return all(check.ok for check in self.checks.values())

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict that `from_dict` turns back into an equal result."""
        return {
            "analyzer": self.analyzer,
            "version": self.version,
            "params": dict(self.params),
            "arrays": {name: array.to_dict() for name, array in self.arrays.items()},
            "scalars": dict(self.scalars),
            "checks": {
                name: {"value": c.value, "tolerance": c.tolerance, "description": c.description}
                for name, c in self.checks.items()
            },
            "views": [
                {"kind": v.kind, "array": v.array, "title": v.title, "options": dict(v.options)} for v in self.views
            ],
            "tokens": [list(row) for row in self.tokens],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnalyzerResult:
        """Return the result that `to_dict` wrote."""
        return cls(
            analyzer=data["analyzer"],
            version=data["version"],
            params=dict(data["params"]),
            arrays={name: NamedArray.from_dict(array) for name, array in data["arrays"].items()},
            scalars={name: float(value) for name, value in data["scalars"].items()},
            checks={name: Check(**check) for name, check in data["checks"].items()},
            views=tuple(View(**view) for view in data["views"]),
            tokens=tuple(tuple(row) for row in data["tokens"]),
        )
