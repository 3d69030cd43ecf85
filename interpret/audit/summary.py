"""The audit's summary page: one self-contained, offline HTML file rendered by jinja2 with autoescaping.

It shows the number of examples, the accuracy (when labels exist) with a label × prediction table, per
analyzer the mean special-token share and the tokens most often ranked first, and [layer × head] heatmaps
of attention entropy and of attention on special tokens. No script, no external resource: the page's
Content-Security-Policy forbids loading anything.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup

from interpret.atomic import write_atomically

TOP_TOKENS = 15

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Audit summary: {{ n_examples }} examples</title>
<style>{{ style }}</style>
</head>
<body>
<h1>Audit summary</h1>
<table class="facts">
<tr><td>examples</td><td>{{ n_examples }}</td></tr>
{% if accuracy is not none %}
<tr><td>accuracy</td><td>{{ "%.4f"|format(accuracy) }} ({{ n_correct }} of {{ n_labelled }} labelled examples)</td></tr>
{% else %}
<tr><td>accuracy</td><td>no labels given</td></tr>
{% endif %}
{% for key, value in run %}
<tr><td>{{ key }}</td><td>{{ value }}</td></tr>
{% endfor %}
</table>

{% if confusion %}
<h2>Labels and predictions</h2>
<table>
<tr><th>label \\ prediction</th>{% for name in confusion.columns %}<th class="num">{{ name }}</th>{% endfor %}</tr>
{% for label, counts in confusion.rows %}
<tr><th>{{ label }}</th>{% for count in counts %}<td class="num">{{ count }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% endif %}

<h2>Analyzers</h2>
<p class="note">Special-token share: the score on special tokens (CLS, SEP, …) over the score on all real tokens
of the readout row, averaged over examples. Top tokens: how often each token was ranked first (special tokens
are never ranked).</p>
<table>
<tr><th>analyzer</th><th class="num">mean special-token share</th><th class="num">examples with a top token</th></tr>
{% for item in analyzers %}
<tr><td>{{ item.name }}</td><td class="num">{{ item.special_share }}</td><td class="num">{{ item.n_ranked }}</td></tr>
{% endfor %}
</table>
<div class="analyzers">
{% for item in analyzers %}
<div>
<h3>{{ item.name }}: tokens most often ranked first</h3>
<table>
<tr><th>token</th><th class="num">times first</th></tr>
{% for token, count in item.top %}
<tr><td class="token">{{ token }}</td><td class="num">{{ count }}</td></tr>
{% else %}
<tr><td colspan="2">no token was ranked</td></tr>
{% endfor %}
</table>
</div>
{% endfor %}
</div>

{% for map in heatmaps %}
<h2>{{ map.title }} [layer × head]</h2>
<p class="note">{{ map.note }}</p>
<table>
<tr><th>layer \\ head</th>{% for head in map.heads %}<th class="num">{{ head }}</th>{% endfor %}</tr>
{% for layer, cells in map.rows %}
<tr><th class="num">{{ layer }}</th>{% for text, level in cells %}<td class="cell h{{ level }}">{{ text }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% endfor %}
</body>
</html>
"""

STYLE = """body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 72em;
       padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.cell { text-align: center; min-width: 3.2em; font-variant-numeric: tabular-nums; }
.facts td:first-child { color: #555; }
.token { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre; }
.note { color: #555; font-size: .92em; }
.analyzers { display: flex; flex-wrap: wrap; gap: 2em; }
/* heatmap cells: white (lowest) to blue (highest) in 11 steps */
.h0 { background: rgb(255, 255, 255); }
.h1 { background: rgb(240, 245, 255); }
.h2 { background: rgb(225, 235, 255); }
.h3 { background: rgb(210, 225, 255); }
.h4 { background: rgb(195, 215, 255); }
.h5 { background: rgb(180, 205, 255); }
.h6 { background: rgb(165, 195, 255); }
.h7 { background: rgb(150, 185, 255); }
.h8 { background: rgb(135, 175, 255); }
.h9 { background: rgb(120, 165, 255); }
.h10 { background: rgb(105, 155, 255); }
"""
HEAD_TITLES = {"entropy": "Attention entropy (nats)", "special_attention": "Attention on special tokens"}
HEAD_NOTES = {
    "entropy": "Mean over examples of the mean over real query rows of −Σ p·log p over real keys.",
    "special_attention": "Mean over examples of the mean over real query rows of the attention on special keys.",
}
HEAT_LEVELS = 10  # the heatmap colours are classes h0..h10, so the page needs no inline style attribute
# Only this exact style may apply and nothing may load: a script or an injected style would not run.
CSP = (
    "default-src 'none'; style-src 'sha256-"
    + base64.b64encode(hashlib.sha256(STYLE.encode("utf-8")).digest()).decode("ascii")
    + "'; img-src 'none'; script-src 'none'; base-uri 'none'; form-action 'none'"
)

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render_summary(
    path: Path,
    *,
    tokens: pd.DataFrame,
    examples: pd.DataFrame,
    heads: pd.DataFrame,
    analyzers: Sequence[str],
    accuracy: float | None,
    run: Mapping[str, str],
) -> Path:
    """Return `path` after writing the summary page there atomically.

    tokens / examples: the audit's tables (columns as interpret.audit.tables lists); heads: heads.csv's table.
    run: what to list about the run (label → text), shown under the example count and accuracy.
    """
    write_atomically(path, summary_html(tokens, examples, heads, analyzers, accuracy, run))
    return path


def summary_html(
    tokens: pd.DataFrame,
    examples: pd.DataFrame,
    heads: pd.DataFrame,
    analyzers: Sequence[str],
    accuracy: float | None,
    run: Mapping[str, str],
) -> str:
    """Return the summary page as an HTML string."""
    correct = examples["correct"].dropna().astype(bool)
    context: dict[str, Any] = {
        "csp": CSP,
        "style": Markup(STYLE),
        "n_examples": len(examples),
        "accuracy": accuracy,
        "n_correct": int(correct.sum()),
        "n_labelled": len(correct),
        "run": list(run.items()),
        "confusion": _confusion(examples),
        "analyzers": [_analyzer_summary(name, tokens, examples) for name in analyzers],
        "heatmaps": [
            _heatmap(heads, column, HEAD_TITLES.get(column, column.replace("_", " ")), HEAD_NOTES.get(column, ""))
            for column in heads.columns
            if column not in ("layer", "head")
        ],
    }
    return _ENV.from_string(_TEMPLATE).render(**context)


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


def _heatmap(heads: pd.DataFrame, column: str, title: str, note: str) -> dict[str, Any]:
    """Return a [layer × head] grid of (text, colour level 0..HEAT_LEVELS), 0 at the minimum, the top at the maximum."""
    grid = heads.pivot(index="layer", columns="head", values=column).sort_index()
    low, high = float(grid.to_numpy().min()), float(grid.to_numpy().max())
    span = high - low if high > low else 1.0
    rows = []
    for layer, values in zip(grid.index, grid.to_numpy()):
        cells = [(f"{value:.3f}", round((float(value) - low) / span * HEAT_LEVELS)) for value in values]
        rows.append((int(layer), cells))
    return {"title": title, "note": note, "heads": [int(head) for head in grid.columns], "rows": rows}
