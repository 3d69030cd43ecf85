"""Static figures of a report for papers and slides: matplotlib PNG and SVG files written by `export`.

Per section and example (the first `MAX_EXAMPLES`):
    {section}/figures/readout-{b}.png|svg   the declared readout as one bar per real token, in reading
                                            order (a diverging colour centred on 0 for signed scores)
    {section}/figures/{array}-{b}.png|svg   each [layer, head] head map (batch, layer, head) as a heatmap
Tokens are drawn as a person reads them (the report's display forms), cut to `LABEL_LIMIT` characters, and
never parsed as mathtext. matplotlib is imported only here, with the Agg backend, when figures are asked for.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from interpret.files.atomic import atomic_path
from interpret.report.model import ReportData, Section
from interpret.report.summary import excerpt

MAX_EXAMPLES = 20
LABEL_LIMIT = 24
FORMATS = ("png", "svg")


def write_figures(report: ReportData, directory: Path) -> list[Path]:
    """Return the figure files written under `directory` for every section's readout and head maps."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    written: list[Path] = []
    with matplotlib.rc_context({"text.parse_math": False, "svg.hashsalt": "transformer-audit", "font.size": 8}):
        for section in report.sections:
            folder = directory / section.key / "figures"
            for example in range(min(len(report.examples), MAX_EXAMPLES)):
                figure = _readout_figure(plt, report, section, example)
                if figure is not None:
                    written += _save(plt, figure, folder / f"readout-{example}")
                for name, array in section.result.arrays.items():
                    if array.axes == ("batch", "layer", "head"):
                        written += _save(plt, _head_figure(plt, section, name, array.values[example], example),
                                         folder / f"{name}-{example}")
    return written


def _readout_figure(plt: Any, report: ReportData, section: Section, example: int) -> Any | None:
    result = section.result
    if result.readout is None or result.readout_of is None:
        return None
    tokens_of = report.examples[example]
    _, shown, _, real = tokens_of.side(result.readout_of.side == "decoder")
    positions = [i for i, flag in enumerate(real) if flag and i < result.readout.shape[1]]
    values = np.asarray(result.readout[example], dtype=np.float64)[positions]
    labels = [excerpt(shown[i], LABEL_LIMIT) for i in positions]
    figure, axes = plt.subplots(figsize=(max(3.0, 0.32 * len(positions) + 1.2), 2.8), constrained_layout=True)
    if result.signed:
        bound = float(np.abs(values).max()) or 1.0
        colours = plt.get_cmap("RdBu_r")((values / bound + 1.0) / 2.0)
    else:
        top = float(values.max()) or 1.0
        colours = plt.get_cmap("Blues")(0.25 + 0.75 * values / top)
    axes.bar(range(len(values)), values, color=colours)
    axes.axhline(0.0, color="black", linewidth=0.6)
    axes.set_xticks(range(len(values)), labels, rotation=60, ha="right")
    axes.set_ylabel("signed score" if result.signed else "score")
    axes.set_title(f"{section.title} — example {tokens_of.id if tokens_of.id is not None else example}")
    return figure


def _head_figure(plt: Any, section: Section, name: str, values: np.ndarray, example: int) -> Any:
    figure, axes = plt.subplots(figsize=(0.35 * values.shape[1] + 2.0, 0.35 * values.shape[0] + 1.4),
                                constrained_layout=True)
    image = axes.imshow(values, cmap="viridis", aspect="auto")
    layers = section.layers if len(section.layers) == values.shape[0] else tuple(range(values.shape[0]))
    heads = section.heads if len(section.heads) == values.shape[1] else tuple(range(values.shape[1]))
    axes.set_yticks(range(values.shape[0]), [str(layer) for layer in layers])
    axes.set_xticks(range(values.shape[1]), [str(head) for head in heads])
    axes.set_xlabel("head")
    axes.set_ylabel("layer")
    axes.set_title(f"{section.title}: {name} — example {example}")
    figure.colorbar(image, ax=axes)
    return figure


def _save(plt: Any, figure: Any, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    try:
        for suffix in FORMATS:
            path = stem.with_suffix(f".{suffix}")
            with atomic_path(path) as temporary, warnings.catch_warnings():
                # A token's rare symbol (e.g. ␍ for a carriage return) missing from the font draws as a box.
                warnings.filterwarnings("ignore", message="Glyph .* missing from font")
                # SVG without a date, so the same report exports byte-identical figures.
                figure.savefig(temporary, format=suffix, dpi=160, metadata={"Date": None} if suffix == "svg" else None)
            paths.append(path)
    finally:
        plt.close(figure)
    return paths
