"""The audit's summary page: what it shows, computed from the audit's tables; drawn by the report's templates.

It shows the number of examples, the accuracy (when labels exist) with a label × prediction table, the
drivers with their counterfactual checks (`interpret.audit.drivers`), the misclassified rows and the slices
(`interpret.audit.failures`), per analyzer the mean special-token share and the tokens most often ranked
first, and [layer × head] heatmaps of every heads.csv column (attention entropy, attention on special tokens, ...). This module only computes
the page's data; `interpret.report.audit_page` renders it with the report's jinja2 templates
(`audit.html.j2` and the shared `components.html.j2`) and stylesheet, as one offline file without scripts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from interpret.files.atomic import write_atomically
from interpret.report.audit_page import render_audit_page
from interpret.report.heat import heat_grid

TOP_TOKENS = 15
SHOWN_DRIVERS = 15  # drivers listed on the page (drivers.csv has every token)
CHECKED_DRIVERS = 5  # drivers whose counterfactual rows the page lists ...
SHOWN_FLIPS = 20  # ... at most this many rows each (counterfactuals.csv has every one)
SHOWN_WRONG = 50  # misclassified rows listed
HEAD_TITLES = {"entropy": "Attention entropy (nats)", "special_attention": "Attention on special tokens"}
HEAD_NOTES = {
    "entropy": "Mean over examples of the mean over real query rows of −Σ p·log p over real keys.",
    "special_attention": "Mean over examples of the mean over real query rows of the attention on special keys.",
}


def render_summary(path: Path, **page: Any) -> Path:
    """Return `path` after writing the summary page (`summary_html` of the keywords `page`) there atomically."""
    write_atomically(path, summary_html(**page))
    return path


def page_findings(
    lead: str | None,
    drivers: pd.DataFrame | None,
    counterfactuals: pd.DataFrame | None,
    wrong: list[dict[str, Any]],
    slices: pd.DataFrame | None,
) -> dict[str, Any]:
    """Return what the page shows of the drivers (the strongest, and the rows each checked one flips, with a
    sentence "removing 'X' changes F of N predictions"), the misclassified rows and the slices."""
    shown = [] if drivers is None else _records(drivers.head(SHOWN_DRIVERS))
    checks = []
    for driver in shown:
        if len(checks) == CHECKED_DRIVERS or not driver["tested"]:
            break
        flipped = counterfactuals[(counterfactuals["unit"] == driver["unit"])  # type: ignore[index]
                                  & (counterfactuals["token"] == driver["token"])]  # type: ignore[index]
        what = "the word " if driver["unit"] == "word" else ""
        checked, rows = driver["checked"], driver["rows"]
        sample = f" (re-run in {checked} of the {rows} rows holding it)" if checked < rows else ""
        checks.append({
            "token": driver["token"],
            "sentence": f"removing {what}{driver['token']!r} changes {driver['flips']} of {checked} predictions"
                        f"{sample}",
            "rows": _records(flipped.head(SHOWN_FLIPS)), "more": max(0, len(flipped) - SHOWN_FLIPS),
        })
    return {
        "lead": lead, "drivers": shown, "checks": checks, "wrong": wrong[:SHOWN_WRONG],
        "more_wrong": max(0, len(wrong) - SHOWN_WRONG),
        "slices": None if slices is None else _records(slices),
    }


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Return the frame's rows as dicts with None for null (pandas' NA would print as "<NA>")."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def summary_html(
    tokens: pd.DataFrame,
    examples: pd.DataFrame,
    heads: pd.DataFrame,
    analyzers: Sequence[str],
    accuracy: float | None,
    run: Mapping[str, str],
    findings: Mapping[str, Any] | None = None,
) -> str:
    """Return the summary page as an HTML string: what it shows, as plain values (the template escapes each
    one), rendered with the report's audit template.

    tokens / examples: the audit's tables (columns as interpret.audit.tables lists); heads: heads.csv's table.
    run: what to list about the run (label → text), shown at the top of the page.
    findings: the drivers, counterfactuals, misclassified rows and slices as `page_findings` gives them.
    """
    correct = examples["correct"].dropna().astype(bool)
    return render_audit_page({
        "model_id": run.get("model", ""),
        "n_examples": len(examples),
        "accuracy": accuracy,
        "n_correct": int(correct.sum()),
        "n_labelled": len(correct),
        "facts": list(run.items()),
        "findings": findings or page_findings(None, None, None, [], None),
        "confusion": _confusion(examples),
        "analyzers": [_analyzer_summary(name, tokens, examples) for name in analyzers],
        "heatmaps": [
            {
                "title": HEAD_TITLES.get(column, column.replace("_", " ")),
                "note": HEAD_NOTES.get(column, ""),
                "grid": _heat_grid(heads, column),
            }
            for column in heads.columns
            if column not in ("layer", "head")
        ],
    })


def top_tokens(tokens: pd.DataFrame, analyzer: str, limit: int = TOP_TOKENS) -> list[tuple[str, int]]:
    """Return (token, times ranked first) for the analyzer, most frequent first, ties by token."""
    first = tokens.loc[(tokens["analyzer"] == analyzer) & (tokens["rank"] == 1), "token"].astype(str)
    counts = first.value_counts()
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [(str(token), int(count)) for token, count in ordered[:limit]]


def _analyzer_summary(name: str, tokens: pd.DataFrame, examples: pd.DataFrame) -> dict[str, Any]:
    share = examples[f"{name}_special_share"].mean()
    return {
        "name": name,
        "special_share": "n/a" if math.isnan(share) else f"{share:.4f}",
        "n_ranked": int(examples[f"{name}_top_token"].notna().sum()),
        "top": top_tokens(tokens, name),
    }


def _confusion(examples: pd.DataFrame) -> dict[str, Any] | None:
    """Return the label × prediction counts of the labelled examples, or None without any."""
    known = examples.dropna(subset=["label", "prediction"])
    if known.empty:
        return None
    table = pd.crosstab(known["label"].astype(str), known["prediction"].astype(str))
    return {
        "columns": [str(name) for name in table.columns],
        "rows": [(str(label), [int(count) for count in row]) for label, row in zip(table.index, table.to_numpy())],
    }


def _heat_grid(heads: pd.DataFrame, column: str) -> dict[str, Any]:
    """Return the [layer × head] heat grid of one heads.csv column (`interpret.report.heat.heat_grid`)."""
    grid = heads.pivot(index="layer", columns="head", values=column).sort_index()
    return heat_grid(grid.to_numpy(), [int(layer) for layer in grid.index], [int(head) for head in grid.columns],
                     lambda value: f"{value:.3f}")
