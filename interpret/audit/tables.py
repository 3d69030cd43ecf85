"""The audit's tables, built per batch with fixed columns and dtypes so that parts concatenate exactly. Every
table with a row per input row keeps the input's `id` beside `row` (the evidence tables too, `runner._finish`).

tokens — one row per example × analyzer × real (non-padding) token:
    row         int64     the example's row id (`Example.row`, 0-based row of the input file)
    id          string    the input's `id` for the example; null when the input has none
    analyzer    string    the analyzer's name
    position    int64     the token's position in the model input (0 = first token)
    token       string    the token string as the tokenizer writes it
    is_special  bool      a special token (CLS, SEP, BOS, EOS, ...)
    score       float64   the analyzer's declared readout [batch, key] at key = position
    rank        Int64     1 = highest score within the example and analyzer; null for special tokens

examples — one row per example:
    row         int64     the example's row id
    id          string    the input's `id` for the example; null when the input has none
    text        string    the input text
    text_pair   string    the second text of a text pair (the input's text_pair column); null for single texts
    label       string    the gold label: the name of the class it names (`interpret.decision.labels`: "0" and
                          "negative" are both written "negative"), or as given for a model without classes;
                          null when the input has none
    prediction  string    the model's predicted label (or token); null for a model without a decision
    probability float64   the predicted label's probability; NaN without a decision, or for a score without one
    score       float64   the logit of a model with one output (a reranker's, a reward model's, a regression's
                          score: `interpret.decision.one_output`); NaN for a softmax over classes or tokens
    correct     boolean   the predicted class is the label's; null without a label or a class decision
    target      string    what the explanations explain (the prediction, or the gold label); null without one
    target_source string  "prediction" or "gold"; null without a decision
    n_tokens    int64     real tokens given to the model (special tokens included)
    truncated   bool      whether the text was cut to max_length
  and for each analyzer NAME that declares a readout, in the order the analyzers were given:
    NAME_top_token     string   the highest-scoring non-special token; null when every token is special
    NAME_top_position  Int64    its position
    NAME_top_score     float64  its score (NaN when there is none)
    NAME_special_share float64  score on special tokens / score on all real tokens (0 when the total is 0)

skipped — skipped.csv (an audit given the rows it skipped for an empty text), one row per skipped input row:
    row         int64     its row number (counted as `Example.row` is)
    id          string    the input's `id` for it; null when it has none
    line        int64     the physical line (1-based) where it starts in the input file

Rows are sorted by (row, analyzer, position), (row) and (row); scores tied within `interpret.evidence.ranking`'s
tolerance rank by position (earlier first), so a rank does not depend on the batch an example ran in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from jaxtyping import Float

from interpret.analysis import AnalyzerResult
from interpret.arrays import to_numpy
from interpret.decision.decide import Decision
from interpret.errors import AnalyzerError
from interpret.evidence.ranking import order_of, tie_groups
from interpret.inputs import Encoded
from interpret.reading.datasets import Example

TOKEN_DTYPES: dict[str, str] = {
    "row": "int64",
    "id": "string",
    "analyzer": "string",
    "position": "int64",
    "token": "string",
    "is_special": "bool",
    "score": "float64",
    "rank": "Int64",
}
EXAMPLE_DTYPES: dict[str, str] = {
    "row": "int64",
    "id": "string",
    "text": "string",
    "text_pair": "string",
    "label": "string",
    "prediction": "string",
    "probability": "float64",
    "score": "float64",
    "correct": "boolean",
    "target": "string",
    "target_source": "string",
    "n_tokens": "int64",
    "truncated": "bool",
}
SKIPPED_DTYPES: dict[str, str] = {"row": "int64", "id": "string", "line": "int64"}
ANALYZER_DTYPES: dict[str, str] = {
    "top_token": "string",
    "top_position": "Int64",
    "top_score": "float64",
    "special_share": "float64",
}


def example_dtypes(analyzers: Sequence[str]) -> dict[str, str]:
    """Return the examples table's column → dtype for these analyzers, in column order."""
    columns = dict(EXAMPLE_DTYPES)
    for name in analyzers:
        columns.update({f"{name}_{suffix}": dtype for suffix, dtype in ANALYZER_DTYPES.items()})
    return columns


def readout_scores(result: AnalyzerResult) -> Float[np.ndarray, "batch key"]:
    """Return the analyzer's declared readout [batch, key] as float64."""
    if result.readout is None:
        raise AnalyzerError(
            f"analyzer {result.analyzer!r} declares no readout; the audit tabulates readouts, so run it with"
            " `interpret report` instead."
        )
    return np.asarray(result.readout, dtype=np.float64)


Columns = dict[str, Any]  # one batch's column name → list or numpy array, before any pandas conversion


def token_columns(examples: Sequence[Example], encoded: Encoded, results: Sequence[AnalyzerResult]) -> Columns:
    """Return one batch's tokens-table columns as numpy arrays and lists (no pandas: `token_frame` converts
    many batches at once). `rank` is int64 with 0 standing for null (special tokens)."""
    real = to_numpy(encoded.attention_mask.bool())
    special = to_numpy(encoded.special.bool())
    batch, position = np.nonzero(real)  # row-major: by example, then position
    rows = np.asarray([example.row for example in examples], dtype=np.int64)[batch]
    ids = np.asarray([example.id for example in examples], dtype=object)[batch]
    tokens = [encoded.tokens[b][p] for b, p in zip(batch.tolist(), position.tolist())]
    is_special = special[batch, position]
    columns: dict[str, list] = {name: [] for name in TOKEN_DTYPES}
    for result in results:
        if result.readout is None:
            continue
        scores = readout_scores(result)[batch, position]
        record = {
            "row": rows, "id": ids, "analyzer": [result.analyzer] * len(rows), "position": position.astype(np.int64),
            "token": tokens, "is_special": is_special, "score": scores,
            "rank": _ranks(batch, position, scores, is_special),
        }
        for name, value in record.items():
            columns[name].append(value)
    return {name: _joined(pieces) for name, pieces in columns.items()}


def token_frame(parts: Sequence[Columns]) -> pd.DataFrame:
    """Return the tokens table (dtypes as the module docstring lists, sorted) of the batches' columns."""
    joined = {name: _joined([part[name] for part in parts]) for name in TOKEN_DTYPES}
    rank = np.asarray(joined["rank"], dtype=np.int64)
    frame = pd.DataFrame({
        **{name: joined[name] for name in TOKEN_DTYPES if name != "rank"},
        "rank": pd.arrays.IntegerArray(rank, rank == 0),
    })
    return conform(frame, TOKEN_DTYPES, ["row", "analyzer", "position"])


def example_columns(
    examples: Sequence[Example],
    encoded: Encoded,
    decided: Sequence[Decision],
    results: Sequence[AnalyzerResult],
) -> Columns:
    """Return one batch's examples-table columns as lists (None for null); `example_frame` converts them."""
    real = to_numpy(encoded.attention_mask.bool())
    special = to_numpy(encoded.special.bool())
    truncated = encoded.truncated or tuple(False for _ in examples)
    columns: dict[str, list] = {name: [] for name in EXAMPLE_DTYPES}
    for b, (example, decision) in enumerate(zip(examples, decided)):
        has_target = decision.kind != "none"
        probability = decision.predicted_probability
        record = {
            "row": example.row, "id": example.id, "text": example.text, "text_pair": example.text_pair,
            "label": decision.gold,
            "prediction": decision.predicted if has_target else None,
            "probability": np.nan if probability is None else float(probability),
            "score": np.nan if decision.score is None else float(decision.score), "correct": decision.correct,
            "target": decision.target.label if has_target else None,
            "target_source": decision.target.source if has_target else None,
            "n_tokens": int(real[b].sum()), "truncated": bool(truncated[b]),
        }
        for name, value in record.items():
            columns[name].append(value)
    readouts = [result for result in results if result.readout is not None]
    for result in readouts:
        for suffix, values in _analyzer_columns(readout_scores(result), real, special, encoded.tokens).items():
            columns[f"{result.analyzer}_{suffix}"] = values
    return columns


def example_frame(parts: Sequence[Columns]) -> pd.DataFrame:
    """Return the examples table (dtypes as the module docstring lists, sorted by row) of the batches' columns."""
    names = list(parts[0]) if parts else list(EXAMPLE_DTYPES)
    analyzers = [name.removesuffix("_top_token") for name in names if name.endswith("_top_token")]
    frame = pd.DataFrame({name: _joined([part[name] for part in parts]) for name in names})
    return conform(frame, example_dtypes(analyzers), ["row"])


def _joined(pieces: Sequence[Any]) -> Any:
    """Return the pieces (lists or numpy arrays of one column) joined into one list or array."""
    if pieces and all(isinstance(piece, np.ndarray) for piece in pieces):
        return np.concatenate(pieces)
    return [value for piece in pieces for value in (piece.tolist() if isinstance(piece, np.ndarray) else piece)]


def conform(frame: pd.DataFrame, dtypes: Mapping[str, str], order: Sequence[str]) -> pd.DataFrame:
    """Return `frame` with exactly these columns and dtypes, sorted by `order` (stable), on a 0..n-1 index."""
    missing = [name for name in dtypes if name not in frame.columns]
    if missing:
        raise ValueError(f"audit table lacks columns {missing}; the parts were written by another version.")
    typed = frame[list(dtypes)].astype(dict(dtypes))
    return typed.sort_values(list(order), kind="mergesort").reset_index(drop=True)


def _ranks(batch: np.ndarray, position: np.ndarray, scores: np.ndarray, special: np.ndarray) -> np.ndarray:
    """Return 1-based ranks (int64) by descending score among each example's non-special tokens (0 for special ones).

    batch, position, scores, special: one entry per real token, grouped by example. Ties go to the earlier
    position (scores tied within `tie_groups`' tolerance of each other). lexsort sorts by the last key first:
    example, then non-special first, tie group (highest scores first), position.
    """
    groups = np.zeros(len(scores), dtype=np.int64)
    for example in np.unique(batch):
        ranked = (batch == example) & ~special.astype(bool)
        groups[ranked] = tie_groups(scores[ranked])
    order = np.lexsort((position, groups, special, batch))
    in_order = batch[order]
    starts = np.searchsorted(in_order, in_order, side="left")  # first index of each token's example group
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(len(order)) - starts + 1
    ranks[special.astype(bool)] = 0
    return ranks


def _analyzer_columns(
    scores: Float[np.ndarray, "batch key"], real: np.ndarray, special: np.ndarray, tokens: Sequence[Sequence[str]]
) -> dict[str, list]:
    """Return each example's top non-special token, its position and score, and the special-token share."""
    out: dict[str, list] = {suffix: [] for suffix in ANALYZER_DTYPES}
    for b in range(scores.shape[0]):
        ordinary = np.flatnonzero(real[b] & ~special[b])
        if ordinary.size:
            top = int(order_of(scores[b], ordinary)[0])  # rank 1 of the tokens table
            out["top_token"].append(tokens[b][top])
            out["top_position"].append(top)
            out["top_score"].append(float(scores[b, top]))
        else:
            out["top_token"].append(None)
            out["top_position"].append(None)
            out["top_score"].append(np.nan)
        total = float(scores[b, real[b]].sum())
        on_special = float(scores[b, real[b] & special[b]].sum())
        out["special_share"].append(on_special / total if total != 0.0 else 0.0)
    return out
