"""Where the model fails: its misclassified rows, worst first, and accuracy and evidence per slice of the input.

misclassified — the labelled rows predicted wrong, by the wrong class's probability (highest first; ties by
row), each with the lead method's top tokens for the decision (highest scores) and against it (the most
negative scores, for signed methods).

slices — slices.csv (an audit given `slice_by`), one row per value of that input column (null: rows without one):
    slice              string   the column's value
    rows               int64    rows with it
    labelled           int64    of them, rows with a label and a class decision
    correct            int64    of those, predicted right
    accuracy           float64  correct / labelled (NaN without labelled rows)
    method             string   the lead method whose evidence follows; null when evidence was not measured
    comprehensiveness  float64  its mean comprehensiveness over the slice's rows (NaN when not measured)
    sufficiency        float64  its mean sufficiency likewise
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from interpret.report.summary import pair_excerpt

SHOWN_TOKENS = 3  # tokens for and against the decision listed per misclassified row
SLICE_DTYPES: dict[str, str] = {
    "slice": "string", "rows": "int64", "labelled": "int64", "correct": "int64", "accuracy": "float64",
    "method": "string", "comprehensiveness": "float64", "sufficiency": "float64",
}


def misclassified(examples: pd.DataFrame, tokens: pd.DataFrame, method: str | None) -> list[dict[str, Any]]:
    """Return the misclassified rows (module docstring) as dicts: row, id, excerpt (a text pair's with its pair),
    label, prediction,
    probability, and the lead method's tokens `for` and `against` the decision (token strings)."""
    wrong = examples[examples["correct"].eq(False).fillna(False)]
    wrong = wrong.sort_values(["probability", "row"], ascending=[False, True], kind="mergesort")
    own = tokens[(tokens["analyzer"] == method) & ~tokens["is_special"]] if method else tokens.iloc[:0]
    by_row = {row: frame for row, frame in own.groupby("row")}
    listed = []
    for record in wrong.itertuples(index=False):
        scores = by_row.get(record.row, own.iloc[:0])
        ranked = scores.sort_values("rank", kind="mergesort")
        negative = scores[scores["score"] < 0].sort_values(["score", "position"], kind="mergesort")
        listed.append({
            "row": int(record.row), "id": None if pd.isna(record.id) else str(record.id),
            "excerpt": pair_excerpt(str(record.text), None if pd.isna(record.text_pair) else str(record.text_pair)),
            "label": str(record.label), "prediction": str(record.prediction), "probability": float(record.probability),
            "for": [str(t) for t in ranked["token"][:SHOWN_TOKENS]],
            "against": [str(t) for t in negative["token"][:SHOWN_TOKENS]],
        })
    return listed


def slice_table(
    examples: pd.DataFrame, values: Sequence[str | None], evidence: pd.DataFrame | None, method: str | None
) -> pd.DataFrame:
    """Return slices.csv's table (module docstring): `values` holds each examples-table row's slice, in its
    order; `evidence` the evidence rows (row, method, comprehensiveness, sufficiency) or None."""
    frame = examples[["row", "correct"]].assign(slice=pd.array(list(values), dtype="string"))
    measured = evidence is not None and method is not None and (evidence["method"] == method).any()
    if measured:
        own = evidence[evidence["method"] == method].set_index("row")
        frame = frame.assign(comprehensiveness=frame["row"].map(own["comprehensiveness"]),
                             sufficiency=frame["row"].map(own["sufficiency"]))
    records = []
    for value, group in frame.groupby("slice", dropna=False, sort=True):
        known = group["correct"].dropna().astype(bool)
        records.append({
            "slice": None if pd.isna(value) else value, "rows": len(group), "labelled": len(known),
            "correct": int(known.sum()), "accuracy": float(known.mean()) if len(known) else np.nan,
            "method": method if measured else None,
            "comprehensiveness": float(group["comprehensiveness"].mean()) if measured else np.nan,
            "sufficiency": float(group["sufficiency"].mean()) if measured else np.nan,
        })
    return pd.DataFrame.from_records(records, columns=list(SLICE_DTYPES)).astype(SLICE_DTYPES)
