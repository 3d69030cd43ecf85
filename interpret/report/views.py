"""The page's data: each section's views and the arrays they draw, cut to the selection, rounded and packed.

What goes into the HTML (export() writes full precision instead):
- arrays that a view draws, with a `layer` / `head` axis cut to the report's selected layers and heads;
- values rounded to 4 significant digits, as JSON numbers (NaN and ±inf as null);
- arrays of 65 536 values or more (the attention patterns) as 16-bit fixed point over [min, max], base64:
  the error is at most (max − min) / 131 068, invisible in a colour and enough for a tooltip, and a third of
  the size of 4-digit JSON (6 layers × 12 heads × 128² probabilities: 3.1 MB instead of ~10 MB).
The page's script (static/report.js) decodes both forms; `decode` here is its Python twin, for tests.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from interpret.analysis.result import VIEW_KINDS, NamedArray, View
from interpret.errors import ReportError
from interpret.report.heat import heat_grid, is_heat_view
from interpret.report.model import ExampleTokens, ReportData, Section

SIGNIFICANT_DIGITS = 4
PACK_THRESHOLD = 65_536
_U16_NAN = 65_535
_U16_TOP = 65_534
TOKEN_AXES = ("query", "key", "pos")
IMAGE_AXES = ("image_query", "image_key")  # a dual encoder's image side


def page_data(report: ReportData) -> dict[str, Any]:
    """Return the JSON-ready data block of the page: examples, sections (views + packed arrays), bertviz."""
    sections = [section_data(report, section) for section in report.sections]
    attention = next((s for s in report.sections if s.kind == "attention"), None)
    return {
        "format": 1,
        "kind": report.run.kind,
        "examples": [_example_data(example) for example in report.examples],
        "sections": sections,
        "bertviz": _bertviz_data(attention) if attention is not None else None,
    }


def section_data(report: ReportData, section: Section) -> dict[str, Any]:
    """Return one section's views and the packed arrays they draw (only those)."""
    result = section.result
    arrays: dict[str, Any] = {}
    views = []
    for view in result.views:
        if is_heat_view(view, result.arrays[view.array]):  # drawn by the template (heat_maps), not the script
            continue
        if view.kind not in VIEW_KINDS:
            raise ReportError(
                f"{result.analyzer} asks for a {view.kind!r} view; the report draws {', '.join(VIEW_KINDS)}."
                " Ask for one of those."
            )
        if view.array not in arrays:
            array = result.arrays[view.array]
            arrays[view.array] = pack(*_cut(array, section, report), _token_sides(view, array, report))
        # A signed method's token scores are drawn on one diverging scale centred on 0 even when every score of
        # an example is positive, as the section's legend ("red for, blue against") says.
        signed = result.signed and result.arrays[view.array].axes[-1] in ("key", "word", "image_key")
        options = {**_options(view), "signed_scores": True} if signed else _options(view)
        views.append({"kind": view.kind, "array": view.array, "title": view.title, "options": options})
    return {
        "key": section.key,
        "kind": section.kind,
        "views": views,
        "arrays": arrays,
        "readout": [readout_positions(report, b) for b in range(len(report.examples))],
    }


def pack(
    values: np.ndarray, axes: Sequence[str], coords: Mapping[str, list[Any]], tokens: Mapping[str, str]
) -> dict[str, Any]:
    """Return an array as the page stores it: axes, shape, coords, token sides, range and encoded values."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    lo = float(values[finite].min()) if finite.any() else 0.0
    hi = float(values[finite].max()) if finite.any() else 0.0
    packed: dict[str, Any] = {
        "axes": list(axes),
        "shape": list(values.shape),
        "coords": {axis: list(labels) for axis, labels in coords.items()},
        "tokens": dict(tokens),
        "min": round_significant(lo),
        "max": round_significant(hi),
    }
    if values.size >= PACK_THRESHOLD:
        span = hi - lo
        scaled = np.zeros(values.shape) if span == 0 else (np.where(finite, values, lo) - lo) / span
        quantized = np.rint(scaled * _U16_TOP).astype("<u2")
        quantized[~finite] = _U16_NAN
        packed.update(encoding="u16", lo=lo, hi=hi, data=base64.b64encode(quantized.tobytes()).decode("ascii"))
    else:
        rounded = round_significant_array(values)
        data = rounded.ravel().tolist()
        if not finite.all():
            data = [v if math.isfinite(v) else None for v in data]
        packed.update(encoding="f", data=data)
    return packed


def decode(packed: Mapping[str, Any]) -> np.ndarray:
    """Return the float64 array a packed array holds (NaN where the page shows no value)."""
    shape = tuple(packed["shape"])
    if packed["encoding"] == "u16":
        quantized = np.frombuffer(base64.b64decode(packed["data"]), dtype="<u2").reshape(shape)
        values = packed["lo"] + quantized.astype(np.float64) / _U16_TOP * (packed["hi"] - packed["lo"])
        return np.where(quantized == _U16_NAN, np.nan, values)
    return np.array([np.nan if v is None else v for v in packed["data"]], dtype=np.float64).reshape(shape)


def round_significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> float | None:
    """Return `value` rounded to `digits` significant digits (None for NaN or ±inf)."""
    if not math.isfinite(value):
        return None
    return float(round_significant_array(np.array([value]), digits)[0])


def round_significant_array(values: np.ndarray, digits: int = SIGNIFICANT_DIGITS) -> np.ndarray:
    """Return `values` (any shape) rounded to `digits` significant digits; zeros and non-finite kept."""
    values = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(values)
    usable = np.isfinite(values) & (magnitude > 0)
    exponent = np.zeros(values.shape)
    exponent[usable] = np.floor(np.log10(magnitude[usable]))
    decimals = digits - 1 - exponent
    # Dividing by an exact power of ten (or multiplying by one, for large values) gives the double nearest to
    # the short decimal, so json writes e.g. 0.1234 and not 0.12340000000000001.
    up = decimals >= 0
    out = values.copy()
    scale = 10.0 ** np.abs(decimals)
    out[up & usable] = np.rint(values[up & usable] * scale[up & usable]) / scale[up & usable]
    down = ~up & usable
    out[down] = np.rint(values[down] / scale[down]) * scale[down]
    return out


def readout_positions(report: ReportData, example: int) -> list[int]:
    """Return the positions (padded indices) the decision of `example` reads, from its Target's pooling."""
    decisions = report.run.decisions
    if example >= len(decisions):
        return []
    return [position for position, _ in decisions[example].target.pooling]


def token_side(axis: str, name: str, size: int, options: Mapping[str, Any], report: ReportData) -> str | None:
    """Return which tokens label an axis: "encoder", "decoder", "image" or None (not a token axis)."""
    if axis in IMAGE_AXES:
        return "image"
    if axis not in TOKEN_AXES:
        return None
    explicit = options.get(f"{axis}_tokens")
    if explicit in ("encoder", "decoder"):
        return explicit
    example = report.examples[0] if report.examples else None
    enc = len(example.tokens) if example else -1
    dec = len(example.decoder_tokens) if example and example.decoder_tokens else -1
    if size == enc and size != dec:
        return "encoder"
    if size == dec and size != enc:
        return "decoder"
    if size == enc == dec:  # same length: go by the array's name (Chefer's decoder / cross maps)
        if name == "decoder" or (name == "cross" and axis == "query"):
            return "decoder"
        return "encoder"
    return None


def _token_sides(view: View, array: NamedArray, report: ReportData) -> dict[str, str]:
    sides = {}
    for axis, size in zip(array.axes, array.values.shape):
        side = token_side(axis, view.array, size, view.options, report)
        if side is not None:
            sides[axis] = side
    return sides


def heat_maps(report: ReportData, section: Section, text: Callable[[float], str]) -> list[dict[str, Any]]:
    """Return, per heat view of `section` (`interpret.report.heat`), {"title", "grids": one [layer × head] heat
    grid per example}, its layers and heads cut to the report's selection, each value written by `text`."""
    maps = []
    for view in section.result.views:
        array = section.result.arrays[view.array]
        if is_heat_view(view, array):
            values, _, coords = _cut(array, section, report)
            grids = [heat_grid(values[b], coords["layer"], coords["head"], text) for b in range(values.shape[0])]
            maps.append({"title": view.title, "grids": grids})
    return maps


def _cut(
    array: NamedArray, section: Section, report: ReportData
) -> tuple[np.ndarray, tuple[str, ...], dict[str, list[Any]]]:
    """Return the array with its layer/head axes cut to the report's selection, its axes and their labels."""
    values = array.values
    coords: dict[str, list[Any]] = {}
    selection = {"layer": (section.layers, report.layers), "head": (section.heads, report.heads)}
    for axis_index, axis in enumerate(array.axes):
        if axis not in selection:
            continue
        labels, wanted = selection[axis]
        size = values.shape[axis_index]
        if len(labels) != size:  # the axis does not run over the captured layers/heads: keep it whole
            coords[axis] = list(range(size))
            continue
        keep = [i for i, label in enumerate(labels) if label in wanted]
        values = np.take(values, keep, axis=axis_index)
        coords[axis] = [labels[i] for i in keep]
    return values, array.axes, coords


def _options(view: View) -> dict[str, Any]:
    """Return the view's options that the page reads (JSON scalars only)."""
    return {
        key: value
        for key, value in view.options.items()
        if isinstance(value, (str, int, float, bool)) or value is None
    }


def _example_data(example: ExampleTokens) -> dict[str, Any]:
    lists = ("words", "tokens", "special", "real", "decoder_tokens", "decoder_special", "decoder_real",
             "image_tokens", "image_special", "image_real")
    return {
        "id": example.id,
        "display_tokens": list(example.display),
        "decoder_display_tokens": list(example.decoder_display),
        "image_display_tokens": list(example.image_display),
        **{name: list(getattr(example, name)) for name in lists},
    }


def _bertviz_data(section: Section) -> dict[str, Any]:
    """Return which attention arrays bertviz draws and their names in its filter menu."""
    names = {"pattern": None, "encoder": "Encoder", "decoder": "Decoder", "cross": "Cross"}
    entries = [
        {"array": view.array, "name": names.get(view.array, view.array)}
        for view in section.result.views
        if view.kind == "head_grid"
    ]
    return {"section": section.key, "entries": entries}
