"""The head study as one self-contained HTML page: the [layer × head] importance and entropy maps, both pruning
curves and the ranked table (jinja2 with autoescape, inline SVG and CSS, no script), written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interpret.files.atomic import write_atomically
from interpret.heads.importance import ranked
from interpret.heads.run import HeadStudy, describe_mode
from interpret.report.render import _environment  # the report's: autoescape, bidi controls escaped (`shown`)

_CELL = 22


def render_heads(study: HeadStudy, *, model: str, input_name: str, pruned: str | None = None) -> str:
    """Return the page of `study` (model and input named as the user gave them; pruned: what --prune-to did)."""
    return _environment().get_template("heads.html.j2").render(page=page_data(study, model=model, input_name=input_name, pruned=pruned))


def write_heads(path: str | Path, page: str) -> Path:
    """Return the path after writing the page atomically."""
    return write_atomically(path, page)


def page_data(study: HeadStudy, *, model: str, input_name: str, pruned: str | None) -> dict[str, Any]:
    """Return what the template draws (numbers already placed and formatted)."""
    layers, heads = study.raw.shape
    least, most = study.least, study.most
    summary = [
        (f"unpruned {study.metric}", _fmt(least.original)),
        ("heads prunable (least first)", f"{least.pruned_passing} of {least.heads} while ≥ {least.threshold:.0%} of the unpruned {study.metric}"),
        ("heads prunable (most first)", f"{most.pruned_passing} of {most.heads} (the contrast)"),
    ]
    if pruned is not None:
        summary.append(("pruned model", pruned))
    order = ranked(study.scores)
    return {
        "model": model, "input": input_name, "layers": layers, "heads": heads, "examples": study.examples,
        "tokens": study.tokens, "mode": describe_mode(study.mode), "summary": summary, "metric": study.metric,
        "threshold_text": f"{least.threshold:.0%} of the unpruned {study.metric}"
        + (" (perplexity: unpruned / pruned)" if study.mode == "language-model" else ""),
        "grids": [_grid(study.scores.tolist(), "importance (normalised)", "#1f4e9c"),
                  _grid(study.entropy.tolist(), "attention entropy (nats)", "#2e7d32")],
        "plot": _plot(study),
        "curve_tables": [
            {"title": title, "rows": [(p.pruned, _fmt(p.metric), f"{p.quality:.3f}") for p in curve.points]}
            for title, curve in (("Least important first", least), ("Most important first (contrast)", most))
        ],
        "ranked": [
            (rank + 1, layer, head, f"{float(study.raw[layer, head]):.4g}", f"{score:.3f}", f"{float(study.entropy[layer, head]):.3f}")
            for rank, (layer, head, score) in enumerate(order)
        ],
    }


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _grid(values: list[list[float]], title: str, color: str) -> dict[str, Any]:
    flat = [v for row in values for v in row]
    low, high = min(flat), max(flat)
    span = high - low or 1.0
    red, green, blue = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    cells = []
    for layer, row in enumerate(values):
        for head, value in enumerate(row):
            t = (value - low) / span
            fill = "#%02x%02x%02x" % tuple(round(255 - t * (255 - c)) for c in (red, green, blue))
            cells.append({"x": 30 + head * _CELL, "y": 18 + layer * _CELL, "fill": fill,
                          "label": f"layer {layer}, head {head}: {value:.4g}"})
    n_layers, n_heads = len(values), len(values[0])
    return {
        "title": title, "size": _CELL - 2, "cells": cells, "width": 40 + n_heads * _CELL, "height": 24 + n_layers * _CELL,
        "rows": [{"y": 32 + layer * _CELL, "text": layer} for layer in range(n_layers)],
        "columns": [{"x": 34 + head * _CELL, "text": head} for head in range(n_heads) if n_heads <= 16 or head % 4 == 0],
    }


def _plot(study: HeadStudy) -> dict[str, Any]:
    left, right, top, bottom = 50, 610, 10, 250
    total = study.least.heads
    values = [p.metric for curve in (study.least, study.most) for p in curve.points]
    threshold_value = study.least.original * study.least.threshold
    if study.mode == "language-model":
        threshold_value = study.least.original / study.least.threshold
    low, high = min(values + [threshold_value]), max(values + [threshold_value])
    span = high - low or 1.0

    def x(pruned: int) -> int:
        return round(left + (right - left) * pruned / max(total, 1))

    def y(value: float) -> int:
        return round(bottom - (bottom - top) * (value - low) / span)

    curves = []
    for curve, color in ((study.least, "#1f4e9c"), (study.most, "#c62828")):
        dots = [{"x": x(p.pruned), "y": y(p.metric), "label": f"{p.pruned} pruned: {study.metric} {p.metric:.4g}"} for p in curve.points]
        curves.append({"color": color, "dots": dots, "points": " ".join(f"{d['x']},{d['y']}" for d in dots)})
    steps = sorted({0, total, *range(0, total + 1, max(1, total // 8))})
    return {
        "width": right + 20, "height": bottom + 35, "left": left, "right": right, "top": top, "bottom": bottom,
        "threshold_y": y(threshold_value), "curves": curves,
        "xticks": [{"x": x(step), "text": step} for step in steps],
        "yticks": [{"y": y(low + span * i / 4) + 4, "text": _fmt(low + span * i / 4)} for i in range(5)],
    }
