"""`export`: every array and table of a report as JSON, CSV and Parquet, at full precision.

Layout under the export directory:
    report.json                      run info, sections (analyzer, version, params, scalars, checks) and files
    tokens.{json,csv,parquet}        one row per (side, batch, pos): token, special, real
    checks.{json,csv,parquet}        one row per check: section, name, value, tolerance, ok, description
    scalars.{json,csv,parquet}       one row per scalar: section, name, value
    {section}/{array}.json           {"axes", "shape", "dtype", "coords", "values" (nested lists)}
    {section}/{array}.{csv,parquet}  long format: one column per axis, then `value`
    {section}/figures/*.{png,svg}    static figures of readouts and head maps (`figures.py`; figures=True)
A `layer` or `head` axis holds the model's layer and head numbers (also in the JSON's coords); every other
axis holds plain indices. NaN is written as null in JSON and empty in CSV.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interpret.analysis.result import NamedArray
from interpret.errors import ReportError
from interpret.files.atomic import atomic_path
from interpret.files.csv_io import write_csv
from interpret.report.model import ReportData, Section
from interpret.report.summary import check_rows

FORMATS = ("json", "csv", "parquet")
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")  # no dots: the stem gets .json/.csv/.parquet


def export_report(report: ReportData, directory: Path, *, figures: bool = True) -> list[Path]:
    """Return the paths written under `directory` (created if needed), in writing order.

    figures: also draw each readout and head map as PNG and SVG (matplotlib) for papers and slides.
    """
    if directory.exists() and not directory.is_dir():
        raise ReportError(f"{directory} is a file; give export() a directory path.")
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    manifest_sections = []
    for section in report.sections:
        folder = directory / _safe_name(section.key)
        folder.mkdir(exist_ok=True)
        files = {}
        for name, array in section.result.arrays.items():
            coords = array_coords(array, section)
            paths = _write_array(folder / _safe_name(name), array, coords)
            written += paths
            files[name] = [str(path.relative_to(directory)) for path in paths]
        result = section.result
        manifest_sections.append(
            {
                "key": section.key,
                "title": section.title,
                "kind": section.kind,
                "analyzer": result.analyzer,
                "version": result.version,
                "params": _jsonable(dict(result.params)),
                "scalars": {name: _finite_or_none(value) for name, value in result.scalars.items()},
                "checks": {
                    name: {
                        "value": _finite_or_none(check.value),
                        "tolerance": check.tolerance,
                        "ok": check.ok,
                        "description": check.description,
                    }
                    for name, check in result.checks.items()
                },
                "arrays": {
                    name: {"axes": list(array.axes), "shape": list(array.values.shape), "files": files[name]}
                    for name, array in result.arrays.items()
                },
            }
        )
    written += _write_table(directory / "tokens", tokens_table(report))
    written += _write_table(directory / "checks", checks_table(report))
    written += _write_table(directory / "scalars", scalars_table(report))
    if report.classes:  # the class-specific readouts side by side (interpret.report.classes)
        from interpret.report.classes import classes_frame

        written += _write_table(directory / "classes", classes_frame(report.classes, report.examples))
    manifest = {
        "run": report.run.to_dict(),
        # text pairs: each example's second text, next to its text in run.inputs (absent for single texts)
        **({"text_pairs": [example.text_pair for example in report.examples]}
           if any(example.text_pair is not None for example in report.examples) else {}),
        "layers": list(report.layers),
        "heads": list(report.heads),
        "sections": manifest_sections,
        "tables": ["tokens", "checks", "scalars", *(["classes"] if report.classes else [])],
        # every faithfulness metric (interpret.evidence), None when the run computed none
        "evidence": None if report.evidence is None else report.evidence.to_dict(),
    }
    if figures:
        from interpret.report.figures import write_figures

        written += write_figures(report, directory)
    text = json.dumps(_jsonable(manifest), indent=2, allow_nan=False, default=str)
    written.append(_write_text(directory / "report.json", text))
    return written


def array_coords(array: NamedArray, section: Section) -> dict[str, list[Any]]:
    """Return the labels of the array's `layer` / `head` axes when they run over the section's layers/heads."""
    coords: dict[str, list[Any]] = {}
    for axis, size in zip(array.axes, array.values.shape):
        labels = {"layer": section.layers, "head": section.heads}.get(axis)
        if labels is not None and len(labels) == size:
            coords[axis] = list(labels)
    return coords


def long_frame(array: NamedArray, coords: dict[str, list[Any]]) -> pd.DataFrame:
    """Return the array in long format: one column per axis (labels from coords, else indices) and `value`."""
    values = array.values
    columns: dict[str, Any] = {}
    grids = np.indices(values.shape).reshape(values.ndim, -1) if values.ndim else np.zeros((0, 1), dtype=int)
    for axis_index, axis in enumerate(array.axes):
        column = _column_name(axis, columns)
        index = grids[axis_index]
        columns[column] = np.asarray(coords[axis])[index] if axis in coords else index
    columns[_column_name("value", columns)] = values.reshape(-1)
    return pd.DataFrame(columns)


def tokens_table(report: ReportData) -> pd.DataFrame:
    """Return one row per (side, batch, pos): token, special, real."""
    rows = []
    for b, example in enumerate(report.examples):
        for side in ("encoder", "decoder") if example.decoder_tokens else ("encoder",):
            tokens, _, special, real = example.side(side == "decoder")
            for pos, token in enumerate(tokens):
                rows.append(
                    {"side": side, "batch": b, "pos": pos, "token": token, "special": special[pos], "real": real[pos]}
                )
    return pd.DataFrame(rows, columns=["side", "batch", "pos", "token", "special", "real"])


def checks_table(report: ReportData) -> pd.DataFrame:
    """Return one row per check: section, analyzer, name, value, tolerance, ok, description."""
    columns = ["section", "analyzer", "name", "value", "tolerance", "ok", "description"]
    return pd.DataFrame([dataclasses.asdict(row) for row in check_rows(report)], columns=columns)


def scalars_table(report: ReportData) -> pd.DataFrame:
    """Return one row per scalar: section, analyzer, name, value."""
    rows = [
        {"section": section.key, "analyzer": section.result.analyzer, "name": name, "value": float(value)}
        for section in report.sections
        for name, value in section.result.scalars.items()
    ]
    return pd.DataFrame(rows, columns=["section", "analyzer", "name", "value"])


def _write_array(stem: Path, array: NamedArray, coords: dict[str, list[Any]]) -> list[Path]:
    values = array.values
    nested = values.tolist()
    if np.issubdtype(values.dtype, np.floating) and not np.isfinite(values).all():
        nested = np.where(np.isfinite(values), values, None).tolist()
    document = {
        "axes": list(array.axes),
        "shape": list(values.shape),
        "dtype": str(values.dtype),
        "coords": _jsonable(coords),
        "values": nested,
    }
    paths = [_write_text(stem.with_suffix(".json"), json.dumps(document, allow_nan=False))]
    return paths + _write_frame(stem, long_frame(array, coords))


def _write_table(stem: Path, frame: pd.DataFrame) -> list[Path]:
    records = json.loads(frame.to_json(orient="records"))
    return [_write_text(stem.with_suffix(".json"), json.dumps(records, indent=1, ensure_ascii=False))] + _write_frame(
        stem, frame
    )


def _write_frame(stem: Path, frame: pd.DataFrame) -> list[Path]:
    csv_path, parquet_path = stem.with_suffix(".csv"), stem.with_suffix(".parquet")
    write_csv(frame, csv_path)
    with atomic_path(parquet_path) as temporary:
        frame.to_parquet(temporary, index=False)
    return [csv_path, parquet_path]


def _write_text(path: Path, text: str) -> Path:
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return path


def _safe_name(name: str) -> str:
    safe = _SAFE.sub("_", name).strip("_")
    if not safe:
        raise ReportError(f"{name!r} cannot name a file; give sections and arrays names with letters or digits.")
    return safe


def _column_name(axis: str, taken: dict[str, Any]) -> str:
    name, n = axis, 2
    while name in taken:
        name, n = f"{axis}_{n}", n + 1
    return name


def _finite_or_none(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _jsonable(value: Any) -> Any:
    """Return `value` with numpy scalars, tuples and non-finite floats made JSON-safe."""
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
