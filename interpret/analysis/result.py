"""`AnalyzerResult`: what an analyzer returns — named arrays with named axes, scalars, checks and views."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

ViewKind = Literal["heatmap", "token_strip", "head_grid", "line", "table"]
VIEW_KINDS: tuple[str, ...] = typing.get_args(ViewKind)
CheckSeverity = Literal["invariant", "warning"]


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
    """A residual that must not exceed `tolerance` (e.g. the largest row-sum error).

    severity: "invariant" — the maths guarantees it, so a violation means the result is wrong and `analyze`
    refuses it with an error; "warning" — an approximation's error (Integrated Gradients' completeness
    delta) that the report and the audit show with what to do, beside the result.
    remedy: what an invariant's refusal tells the user to do where a violation has a known cause outside the
    analyzer (a streamed computation that restates attention without a model's sliding window); "" when a
    violation is a defect to report.
    """

    value: float
    tolerance: float
    description: str = ""
    severity: CheckSeverity = "invariant"
    remedy: str = ""

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
class Readout:
    """Which array of a result is the per-token importance for the decision.

    array: the name of an array with axes ("batch", "key"): one score per input position (0 at padding).
    signed: whether scores may be negative (evidence against the decision) — drawn on a scale centred on 0.
    side: the tokens the key axis runs over: "main" (the input; an encoder-decoder's encoder) or "decoder".
    """

    array: str
    signed: bool = False
    side: Literal["main", "decoder"] = "main"


@dataclass(frozen=True)
class HeadMap:
    """Which array of a result scores each [layer, head] per example, and how examples aggregate.

    array: an array with axes ("batch", "layer", "head").
    weight: an array with axes ("batch",) that weighs examples when aggregating over a dataset
        (Σ_b array[b] / Σ_b weight[b]; e.g. token counts); None: the mean over examples.
    """

    array: str
    weight: str | None = None


@dataclass(frozen=True)
class AnalyzerResult:
    """The output of one analyzer on one trace.

    arrays: named arrays, e.g. `rollout` [batch, query, key]; each analyzer documents its own.
    scalars: named numbers (e.g. the predicted probability of the target).
    checks: residuals (`Check`): invariants (refused by `analyze` when violated) and warnings (shown).
    tokens: the token strings per example, so the result can be drawn without its trace.
    readout_of: the declaration of the per-token importance for the decision (`Readout`), or None when the
        result has none; read it through `result.readout` ([batch, key]) and `result.signed`.
    head_map: the declaration of a per-example [layer, head] score (`HeadMap`), or None.
    strategy: the computation that gave it, "full" or "streamed" (set by `analyze`; shown as "rollout, streamed").
    """

    analyzer: str
    version: str
    params: Mapping[str, Any]
    arrays: Mapping[str, NamedArray]
    scalars: Mapping[str, float] = field(default_factory=dict)
    checks: Mapping[str, Check] = field(default_factory=dict)
    views: Sequence[View] = ()
    tokens: Sequence[Sequence[str]] = ()
    readout_of: Readout | None = None
    head_map: HeadMap | None = None
    strategy: str = "full"

    def __post_init__(self) -> None:
        for view in self.views:
            if view.array not in self.arrays:
                raise ValueError(f"view {view.title!r} draws {view.array!r}, which is not among {sorted(self.arrays)}.")
        declared = {"readout": (self.readout_of, ("batch", "key"))}
        if self.head_map is not None:
            declared["head map"] = (self.head_map, ("batch", "layer", "head"))
        for what, (declaration, axes) in declared.items():
            if declaration is None:
                continue
            array = self.arrays.get(declaration.array)
            if array is None or array.axes != axes:
                found = "missing" if array is None else f"axes {array.axes}"
                raise ValueError(f"the {what} names array {declaration.array!r} ({found}); it must have axes {axes}.")
        if self.head_map is not None and self.head_map.weight is not None:
            weight = self.arrays.get(self.head_map.weight)
            if weight is None or weight.axes != ("batch",):
                raise ValueError(f"the head map's weight {self.head_map.weight!r} must be an array with axes ('batch',).")

    @property
    def readout(self) -> np.ndarray | None:
        """Return the per-token importance for the decision [batch, key], or None when there is none."""
        return None if self.readout_of is None else self.arrays[self.readout_of.array].values

    @property
    def signed(self) -> bool:
        """Whether the readout's scores are signed (False when there is no readout)."""
        return self.readout_of is not None and self.readout_of.signed

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name].values

    @property
    def ok(self) -> bool:
        """Whether every check is within tolerance."""
        return all(check.ok for check in self.checks.values())

    @property
    def provides(self) -> tuple[str, ...]:
        """Return what the result declares: "readout" and/or "head_map"."""
        return tuple(name for name, present in (("readout", self.readout_of), ("head_map", self.head_map)) if present)

    @property
    def title(self) -> str:
        """Return the method's name as a heading: "Rollout", or "Rollout, streamed"."""
        return self.analyzer.replace("_", " ").capitalize() + (f", {self.strategy}" if self.strategy != "full" else "")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict that `from_dict` turns back into an equal result (the strategy when streamed)."""
        return {
            "analyzer": self.analyzer,
            "version": self.version,
            "params": dict(self.params),
            "arrays": {name: array.to_dict() for name, array in self.arrays.items()},
            "scalars": dict(self.scalars),
            "checks": {
                name: {"value": c.value, "tolerance": c.tolerance, "description": c.description, "severity": c.severity}
                for name, c in self.checks.items()
            },
            "views": [
                {"kind": v.kind, "array": v.array, "title": v.title, "options": dict(v.options)} for v in self.views
            ],
            "tokens": [list(row) for row in self.tokens],
            "readout": None if self.readout_of is None else dataclasses.asdict(self.readout_of),
            "head_map": None if self.head_map is None else dataclasses.asdict(self.head_map),
            **({"strategy": self.strategy} if self.strategy != "full" else {}),
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
            readout_of=Readout(**data["readout"]) if data.get("readout") else None,
            head_map=HeadMap(**data["head_map"]) if data.get("head_map") else None,
            strategy=data.get("strategy", "full"),
        )
