"""Class-specific attributions side by side: the prediction, each asked class and the contrast, one row each.

The analysis stage (`interpret.pipeline`) re-runs every class-specific analyzer of a report (one that runs the
model and declares a readout: the gradient and perturbation methods) once per class, with each example's target
set to that class; `compared` keeps each run's readout [batch, key] and word-level readout [batch, word]. Rows,
in order:
    prediction          each example's own prediction (what an unrequested report explains);
    asked               each class given with `compare` (`--target`), in the order given;
    contrast class      the contrast class alone (with `contrast`, unless it is among the asked classes);
    contrast            "target rather than contrast": score = logit(target) − logit(contrast) (with `contrast`).
A row whose request equals the report's own reuses the report's result instead of running again. For
Integrated Gradients the contrast row equals the target row minus the contrast-class row (IG is linear in the
score), which the tests check.

The report draws each example's rows as token chips on one diverging colour scale centred on 0 (the
largest |score| over all of the example's rows and tokens is the end of both sides), so rows compare by
colour; a method whose rows would all be drawn alike (every token and word in the same colour step: its
readout does not depend on the class, or not visibly — gradient-weighted rollout's positive relevance, a
decomposition that ignores the head) is drawn as one row that says so, with how far its rows differ. The
export holds every row's scores (`classes` in the JSON, `classes.csv` in `Report.export`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from jaxtyping import Float

from interpret.report.comparison import ClassComparison

if TYPE_CHECKING:
    from interpret.pipeline import ClassRuns
    from interpret.report.model import ExampleTokens

LEVELS = 5  # colour steps on each side of 0: classes n5..n1, z, p1..p5 in report.css


def compared(runs: Sequence[ClassRuns]) -> tuple[ClassComparison, ...]:
    """Return one ClassComparison per class-specific analyzer's runs (`interpret.pipeline.ClassRuns`: its result
    per row, computed in the analysis stage): each row's readout [batch, key] and word-level readout [batch, word]
    stacked along the row axis."""
    out = []
    for run in runs:
        first = run.results[0]
        rows = [np.asarray(result.readout, dtype=np.float64) for result in run.results]
        words = [np.asarray(result.arrays["word_readout"].values, dtype=np.float64)
                 for result in run.results if "word_readout" in result.arrays]
        has_words = len(words) == len(rows)
        out.append(ClassComparison(
            analyzer=first.analyzer,
            roles=run.roles,  # type: ignore[arg-type]
            labels=run.labels,
            scores=np.stack(rows, axis=1),
            words=np.stack(words, axis=1) if has_words else None,
            words_how=str(first.params.get("words", "sum")) if has_words else None,
            word_start=first.arrays["word_start"].values if has_words else None,
            word_stop=first.arrays["word_stop"].values if has_words else None,
        ))
    return tuple(out)


def level(value: float, top: float) -> str:
    """Return the colour class of `value` on a diverging scale centred on 0 whose ends are ±`top`:
    "z" near 0, "p1".."p5" for the target, "n1".."n5" against it (5 equal steps of |value| / top)."""
    if not top > 0 or not np.isfinite(value):
        return "z"
    step = int(np.ceil(min(abs(value) / top, 1.0) * LEVELS - 1e-9))
    if step == 0:
        return "z"
    return ("p" if value > 0 else "n") + str(step)


def word_chips(
    words: Float[np.ndarray, " word"], start: np.ndarray, stop: np.ndarray, display: Sequence[str], top: float
) -> list[dict[str, Any]]:
    """Return one chip per word (its subword tokens joined as displayed, its [start, stop) positions, its score
    and its colour class on the scale ±top); start −1 ends an example's words."""
    chips = []
    for w, (first, last) in enumerate(zip(start.tolist(), stop.tolist())):
        if first < 0:
            break
        chips.append({"word": "".join(display[first:last]), "start": first, "stop": last, "value": float(words[w]),
                      "level": level(float(words[w]), top)})
    return chips


def shown_rows(comparison: ClassComparison, example: int) -> list[tuple[int, str]]:
    """Return (row index, role) of the rows the page draws for one example: an asked class that is the example's
    prediction is drawn once, as the prediction's row with the role "prediction, asked" (the export keeps both)."""
    labels = comparison.labels[example]
    predicted = {labels[r] for r, role in enumerate(comparison.roles) if role == "prediction"}
    asked = {labels[r] for r, role in enumerate(comparison.roles) if role == "asked"}
    out = []
    for r, role in enumerate(comparison.roles):
        if role == "asked" and labels[r] in predicted:
            continue
        out.append((r, "prediction, asked" if role == "prediction" and labels[r] in asked else role))
    return out


def comparison_view(comparison: ClassComparison, example: int, tokens: ExampleTokens) -> dict[str, Any]:
    """Return what the page draws for one example: rows of (role, label, token chips, word chips); the token
    chips of every row share one scale, ±(largest |score| over the example's rows and attributed tokens), and
    the word chips one of their own, ±(largest |word score| over the rows)."""
    scores = comparison.scores[example]
    display = tokens.display or tokens.tokens
    shown = [p for p in range(min(scores.shape[1], len(tokens.real))) if tokens.real[p] and not tokens.special[p]]
    top = float(np.abs(scores[:, shown]).max()) if shown else 0.0
    words = comparison.words
    word_top = float(np.abs(words[example]).max()) if words is not None else 0.0
    rows = []
    for r, role in shown_rows(comparison, example):
        chips = [{"token": display[p], "raw": tokens.tokens[p], "position": p, "value": float(scores[r, p]),
                  "level": level(float(scores[r, p]), top)} for p in shown]
        row_words = []
        if words is not None and comparison.word_start is not None and comparison.word_stop is not None:
            row_words = word_chips(words[example, r], comparison.word_start[example], comparison.word_stop[example],
                                   display, word_top)
        rows.append({"role": role, "label": comparison.labels[example][r], "index": r, "chips": chips,
                     "words": row_words})
    alike = len(rows) > 1 and all(_levels(row) == _levels(rows[0]) for row in rows)
    differ = float(np.ptp(scores[:, shown], axis=0).max()) if alike and shown else None
    if alike:  # one row says what every row would show
        rows = [{**rows[0], "role": "every class", "label": "every class"}]
    return {"analyzer": comparison.analyzer, "top": top, "word_top": word_top, "rows": rows,
            "words_how": comparison.words_how, "alike": differ}


def _levels(row: dict[str, Any]) -> list[str]:
    return [chip["level"] for chip in (*row["chips"], *row["words"])]


CLASS_COLUMNS = ["analyzer", "batch", "row", "role", "label", "unit", "index", "start", "stop", "text", "score"]


def classes_frame(comparisons: Sequence[ClassComparison], examples: Sequence[ExampleTokens]) -> Any:
    """Return the export table of every comparison (pandas DataFrame, CLASS_COLUMNS): one line per (analyzer,
    example, row, token) with unit "token" (index = position, [start, stop) = [position, position + 1)) and
    one per word with unit "word" (index = word number, [start, stop) its token positions). Scores in full
    precision; every token of the padded length that is real, special tokens included (their score is 0
    when they are not attributed)."""
    import pandas as pd

    lines = []
    for comparison in comparisons:
        for b, example in enumerate(examples):
            for r, role in enumerate(comparison.roles):
                common = {"analyzer": comparison.analyzer, "batch": b, "row": r, "role": role,
                          "label": comparison.labels[b][r]}
                for p, token in enumerate(example.tokens):
                    if p < comparison.scores.shape[2] and example.real[p]:
                        lines.append({**common, "unit": "token", "index": p, "start": p, "stop": p + 1, "text": token,
                                      "score": float(comparison.scores[b, r, p])})
                if comparison.words is None or comparison.word_start is None or comparison.word_stop is None:
                    continue
                for w, (start, stop) in enumerate(zip(comparison.word_start[b].tolist(), comparison.word_stop[b].tolist())):
                    if start < 0:
                        break
                    lines.append({**common, "unit": "word", "index": w, "start": start, "stop": stop,
                                  "text": "".join(example.tokens[start:stop]), "score": float(comparison.words[b, r, w])})
    return pd.DataFrame(lines, columns=CLASS_COLUMNS)


def section_word_blocks(sections: Sequence[Any], examples: Sequence[ExampleTokens]) -> dict[str, list[dict[str, Any]]]:
    """Return, by section key, one block per example of the word chips of the section's `word_readout`
    [batch, word] (with `word_start` / `word_stop`), each block on its own scale ±(largest |word score| of the
    example) and stating the aggregation (the result's `words` parameter: sum or max); sections without word
    arrays are left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for section in sections:
        arrays = section.result.arrays
        if section.kind != "analyzer" or not {"word_readout", "word_start", "word_stop"} <= set(arrays):
            continue
        words, start, stop = (arrays[name].values for name in ("word_readout", "word_start", "word_stop"))
        how = str(section.result.params.get("words", "sum"))
        blocks = []
        for b, example in enumerate(examples):
            if b >= words.shape[0]:
                break
            top = float(np.abs(words[b]).max()) if words.shape[1] else 0.0
            chips = word_chips(words[b], start[b], stop[b], example.display or example.tokens, top)
            blocks.append({"example": b, "how": how, "top": top, "chips": chips})
        out[section.key] = blocks
    return out
