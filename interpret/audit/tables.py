"""The audit's two tables, built per batch with fixed columns and dtypes so that parts concatenate exactly.

tokens — one row per example × analyzer × real (non-padding) token:
    row         int64     the example's row id (`Example.row`, 0-based row of the input file)
    analyzer    string    the analyzer's name
    position    int64     the token's position in the model input (0 = first token)
    token       string    the token string as the tokenizer writes it
    is_special  bool      a special token (CLS, SEP, BOS, EOS, ...)
    score       float64   the analyzer's declared readout [batch, key] at key = position
    rank        Int64     1 = highest score within the example and analyzer; null for special tokens

examples — one row per example:
    row         int64     the example's row id
    text        string    the input text
    label       string    the gold label; null when the input has none
    prediction  string    the model's predicted label (or token); null for a model without a decision
    probability float64   the predicted label's probability; NaN without a decision
    correct     boolean   prediction == label; null without a label or a decision
    target      string    what the explanations explain (the prediction, or the gold label); null without one
    target_source string  "prediction" or "gold"; null without a decision
    n_tokens    int64     real tokens given to the model (special tokens included)
    truncated   bool      whether the text was cut to max_length
  and for each analyzer NAME that declares a readout, in the order the analyzers were given:
    NAME_top_token     string   the highest-scoring non-special token; null when every token is special
    NAME_top_position  Int64    its position
    NAME_top_score     float64  its score (NaN when there is none)
    NAME_special_share float64  score on special tokens / score on all real tokens (0 when the total is 0)

Rows are sorted by (row, analyzer, position) and (row); ties in rank go to the earlier position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from jaxtyping import Float

from interpret.analyze import AnalyzerResult
from interpret.datasets import Example
from interpret.decision import Decision
from interpret.errors import AnalyzerError
from interpret.inputs import Encoded

TOKEN_DTYPES: dict[str, str] = {
    "row": "int64",
    "analyzer": "string",
    "position": "int64",
    "token": "string",
    "is_special": "bool",
    "score": "float64",
    "rank": "Int64",
}
EXAMPLE_DTYPES: dict[str, str] = {
    "row": "int64",
    "text": "string",
    "label": "string",
    "prediction": "string",
    "probability": "float64",
    "correct": "boolean",
    "target": "string",
    "target_source": "string",
    "n_tokens": "int64",
    "truncated": "bool",
}
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


def token_table(examples: Sequence[Example], encoded: Encoded, results: Sequence[AnalyzerResult]) -> pd.DataFrame:
    """Return the tokens table (columns as the module docstring lists) of one batch.

    Built column by column with numpy over every real token of the batch at once, each column in its final
    dtype, so no per-token Python objects are made except the token strings.
    """
    real = encoded.attention_mask.bool().cpu().numpy()
    special = encoded.special.bool().cpu().numpy()
    batch, position = np.nonzero(real)  # row-major: by example, then position
    rows = np.asarray([example.row for example in examples], dtype=np.int64)[batch]
    tokens = [encoded.tokens[b][p] for b, p in zip(batch.tolist(), position.tolist())]
    is_special = special[batch, position]
    frames = []
    for result in results:
        if result.readout is None:
            continue
        scores = readout_scores(result)[batch, position]
        frames.append(pd.DataFrame({
            "row": rows,
            "analyzer": pd.array([result.analyzer] * len(rows), dtype="string"),
            "position": position.astype(np.int64),
            "token": pd.array(tokens, dtype="string"),
            "is_special": is_special,
            "score": scores,
            "rank": _ranks(batch, position, scores, is_special),
        }))
    if not frames:
        return conform(pd.DataFrame({name: [] for name in TOKEN_DTYPES}), TOKEN_DTYPES, ["row", "analyzer", "position"])
    return conform(pd.concat(frames, ignore_index=True), TOKEN_DTYPES, ["row", "analyzer", "position"])


def example_table(
    examples: Sequence[Example],
    encoded: Encoded,
    decided: Sequence[Decision],
    results: Sequence[AnalyzerResult],
) -> pd.DataFrame:
    """Return the examples table (columns as the module docstring lists) of one batch."""
    real = encoded.attention_mask.bool().cpu().numpy()
    special = encoded.special.bool().cpu().numpy()
    truncated = encoded.truncated or tuple(False for _ in examples)
    columns: dict[str, list] = {name: [] for name in EXAMPLE_DTYPES}
    for b, (example, decision) in enumerate(zip(examples, decided)):
        prediction = decision.predicted if decision.kind != "none" else None
        columns["row"].append(example.row)
        columns["text"].append(example.text)
        columns["label"].append(example.label)
        columns["prediction"].append(prediction)
        probability = decision.predicted_probability
        columns["probability"].append(np.nan if probability is None else float(probability))
        known = example.label is not None and prediction is not None
        columns["correct"].append(prediction == example.label if known else None)
        has_target = decision.kind != "none"
        columns["target"].append(decision.target.label if has_target else None)
        columns["target_source"].append(decision.target.source if has_target else None)
        columns["n_tokens"].append(int(real[b].sum()))
        columns["truncated"].append(bool(truncated[b]))
    readouts = [result for result in results if result.readout is not None]
    for result in readouts:
        for suffix, values in _analyzer_columns(readout_scores(result), real, special, encoded.tokens).items():
            columns[f"{result.analyzer}_{suffix}"] = values
    analyzers = [result.analyzer for result in readouts]
    return conform(pd.DataFrame(columns), example_dtypes(analyzers), ["row"])


def conform(frame: pd.DataFrame, dtypes: Mapping[str, str], order: Sequence[str]) -> pd.DataFrame:
    """Return `frame` with exactly these columns and dtypes, sorted by `order` (stable), on a 0..n-1 index."""
    missing = [name for name in dtypes if name not in frame.columns]
    if missing:
        raise ValueError(f"audit table lacks columns {missing}; the parts were written by another version.")
    typed = frame[list(dtypes)].astype(dict(dtypes))
    return typed.sort_values(list(order), kind="mergesort").reset_index(drop=True)


def _ranks(batch: np.ndarray, position: np.ndarray, scores: np.ndarray, special: np.ndarray) -> pd.arrays.IntegerArray:
    """Return 1-based ranks by descending score among each example's non-special tokens (null for special ones).

    batch, position, scores, special: one entry per real token, grouped by example. Ties go to the earlier
    position. lexsort sorts by the last key first: example, then non-special first, descending score, position.
    """
    order = np.lexsort((position, -scores, special, batch))
    in_order = batch[order]
    starts = np.searchsorted(in_order, in_order, side="left")  # first index of each token's example group
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(len(order)) - starts + 1
    return pd.arrays.IntegerArray(ranks, special.astype(bool).copy())


def _analyzer_columns(
    scores: Float[np.ndarray, "batch key"], real: np.ndarray, special: np.ndarray, tokens: Sequence[Sequence[str]]
) -> dict[str, list]:
    """Return each example's top non-special token, its position and score, and the special-token share."""
    out: dict[str, list] = {suffix: [] for suffix in ANALYZER_DTYPES}
    for b in range(scores.shape[0]):
        ordinary = np.flatnonzero(real[b] & ~special[b])
        if ordinary.size:
            # argmax returns the first maximum, i.e. the earlier position, as the tokens table ranks ties.
            top = int(ordinary[np.argmax(scores[b, ordinary])])
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
