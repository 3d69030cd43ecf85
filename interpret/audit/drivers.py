"""What drives the model across a dataset, checked by intervention: drivers.csv and counterfactuals.csv.

A candidate is a token string (never a special token) under the audit's lead method (`lead_of`: the method
the evidence ranks first, else the first readout). Per token, over the rows it occurs in: its rows, its
occurrences, and the mean and mean |score| of its occurrences. The `k` tokens of highest mean |score| are
checked: every row holding one is re-run with every occurrence of it removed (`interpret.evidence.removal`,
the evidence's own removal, one pass for all of a row's candidates), and the token flips that row when the
model's predicted class changes. Its flip rate is flips / rows with a percentile bootstrap 95% interval
(resampling its rows, seeded by the audit's seed: `interpret.evidence.aggregate`). Tokens rank by flip rate,
then mean |score| (the tokens not checked after, by mean |score|), ties by token.

drivers — one row per token:
    token           string   the token as the tokenizer writes it
    method          string   the lead method whose scores are summarised
    rows            int64    rows it occurs in
    occurrences     int64    its occurrences over all rows
    mean_score      float64  mean score of its occurrences
    mean_abs_score  float64  mean |score| of its occurrences
    tested          bool     it was among the `k` re-run
    flips           Int64    rows whose prediction changed without it; null when not tested
    flip_rate       float64  flips / rows (NaN when not tested)
    flip_rate_low   float64  its bootstrap 95% interval's lower end (NaN when not tested)
    flip_rate_high  float64  and upper end
    removal         string   how it was removed ("delete", "mask", "zero"); null when not tested
    rank            int64    1 = the strongest driver

counterfactuals — one row per tested token × row it flips (ordered by the token's rank, then row):
    token               string   the token removed
    rank                int64    its rank in drivers
    row                 int64    the example's row id
    id                  string   the input's id for it; null when it has none
    prediction_before   string   the prediction with the token
    probability_before  float64  its probability
    prediction_after    string   the prediction without it
    probability_after   float64  its probability
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from torch import nn

from interpret.analyze.run import run_context
from interpret.audit.kernel import audit_kernel
from interpret.collect import collect
from interpret.datasets import Example
from interpret.decision import decide
from interpret.evidence.aggregate import RESAMPLES, mean_interval
from interpret.evidence.removal import RemovalScorer, candidates, default_removal

DEFAULT_DRIVERS = 20
DRIVER_DTYPES: dict[str, str] = {
    "token": "string", "method": "string", "rows": "int64", "occurrences": "int64", "mean_score": "float64",
    "mean_abs_score": "float64", "tested": "bool", "flips": "Int64", "flip_rate": "float64",
    "flip_rate_low": "float64", "flip_rate_high": "float64", "removal": "string", "rank": "int64",
}
COUNTERFACTUAL_DTYPES: dict[str, str] = {
    "token": "string", "rank": "int64", "row": "int64", "id": "string", "prediction_before": "string",
    "probability_before": "float64", "prediction_after": "string", "probability_after": "float64",
}


@dataclass(frozen=True)
class DriverSettings:
    """How the drivers are checked: `k` tokens re-run (0: none), the removal (None: `default_removal`), and
    the audit's batching, truncation, head, attention kernel and seed."""

    k: int
    removal: str | None
    batch_size: int
    max_length: int | None
    head: nn.Module | None
    attention: str | None
    seed: int


def token_scores(tokens: pd.DataFrame, method: str) -> pd.DataFrame:
    """Return per non-special token of `method`: rows, occurrences, mean_score, mean_abs_score; strongest
    mean |score| first, ties by token."""
    own = tokens[(tokens["analyzer"] == method) & ~tokens["is_special"]].assign(abs_score=lambda f: f["score"].abs())
    grouped = own.groupby("token", sort=True)
    table = pd.DataFrame({
        "rows": grouped["row"].nunique(), "occurrences": grouped.size(),
        "mean_score": grouped["score"].mean(), "mean_abs_score": grouped["abs_score"].mean(),
    }).reset_index()
    return table.sort_values(["mean_abs_score", "token"], ascending=[False, True], kind="mergesort").reset_index(drop=True)


def driver_tables(
    model: nn.Module,
    tokenizer: Any,
    examples: Sequence[Example],
    tokens: pd.DataFrame,
    method: str,
    settings: DriverSettings,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return the drivers and counterfactuals tables (module docstring) of the audit's `tokens` table under
    `method`, re-running the model on the rows of the top `settings.k` tokens."""
    table = token_scores(tokens, method)
    tested = [str(token) for token in table["token"][: settings.k]]
    outcome = _flip_rows(model, tokenizer, examples, tokens, method, tested, settings) if tested else {}
    rng = np.random.default_rng(settings.seed)
    flips, rates, lows, highs, removals = [], [], [], [], []
    for token in table["token"]:
        rows = outcome.get(token)
        if rows is None:
            flips.append(None), rates.append(np.nan), lows.append(np.nan), highs.append(np.nan), removals.append(None)
            continue
        flipped = np.asarray([float(row[1] != row[3]) for row in rows.values()])
        rate, low, high = mean_interval(flipped, rng.integers(0, len(flipped), size=(RESAMPLES, len(flipped))))
        flips.append(int(flipped.sum())), rates.append(rate), lows.append(low), highs.append(high)
        removals.append(next(iter(rows.values()))[5])
    table = table.assign(method=method, tested=table["token"].isin(outcome), flips=flips, flip_rate=rates,
                         flip_rate_low=lows, flip_rate_high=highs, removal=removals)
    table = table.sort_values(["tested", "flip_rate", "mean_abs_score", "token"], ascending=[False, False, False, True],
                              na_position="last", kind="mergesort").reset_index(drop=True)
    table["rank"] = np.arange(1, len(table) + 1)
    drivers = table[list(DRIVER_DTYPES)].astype(DRIVER_DTYPES)
    return drivers, _counterfactuals(drivers, outcome, examples)


def _counterfactuals(drivers: pd.DataFrame, outcome: dict[str, dict[int, tuple]], examples: Sequence[Example]) -> pd.DataFrame:
    ids = {example.row: example.id for example in examples}
    records = [
        {"token": token, "rank": rank, "row": row, "id": ids[row], "prediction_before": before,
         "probability_before": p_before, "prediction_after": after, "probability_after": p_after}
        for token, rank in zip(drivers["token"], drivers["rank"]) if token in outcome
        for row, (_, before, p_before, after, p_after, _) in sorted(outcome[token].items()) if before != after
    ]
    frame = pd.DataFrame.from_records(records, columns=list(COUNTERFACTUAL_DTYPES))
    return frame.astype(COUNTERFACTUAL_DTYPES)


def _flip_rows(
    model: nn.Module,
    tokenizer: Any,
    examples: Sequence[Example],
    tokens: pd.DataFrame,
    method: str,
    tested: Sequence[str],
    settings: DriverSettings,
) -> dict[str, dict[int, tuple]]:
    """Return per tested token, per row holding it: (row, prediction before, its probability, prediction after,
    its probability, removal), re-running the rows holding any tested token in batches of the audit's size
    (one removal pass per row for all its tokens). Empty when the model makes no class decision."""
    own = tokens[(tokens["analyzer"] == method) & ~tokens["is_special"] & tokens["token"].isin(tested)]
    wanted = set(own["row"].tolist())
    rows = [example for example in examples if example.row in wanted]
    outcome: dict[str, dict[int, tuple]] = {token: {} for token in tested}
    with audit_kernel(model, settings.attention):  # the kernel the audit's own passes ran with
        for start in range(0, len(rows), settings.batch_size):
            batch = rows[start:start + settings.batch_size]
            trace = collect(model, tokenizer, [example.text for example in batch], names=[], max_length=settings.max_length)
            decided = decide(model, trace, tokenizer, head=settings.head)
            if decided[0].kind != "class":
                return {}
            ctx = run_context(trace, model, tokenizer, head=settings.head, targets=[d.target for d in decided])
            removal = settings.removal or default_removal(trace.encoded)
            scorer = RemovalScorer(ctx, trace.encoded, removal)
            labels = ctx.runner.reader.labels if ctx.runner is not None else ()
            for b, (example, decision) in enumerate(zip(batch, decided)):
                allowed = np.zeros(trace.encoded.pos, dtype=bool)
                allowed[candidates(trace.encoded, b, decision.target)] = True
                present = [token for token in tested if token in trace.encoded.tokens[b]]
                masks = np.asarray([[allowed[p] and t == token for p, t in enumerate(trace.encoded.tokens[b])]
                                    for token in present], dtype=bool).reshape(len(present), trace.encoded.pos)
                present, masks = [t for t, m in zip(present, masks) if m.any()], masks[masks.any(axis=1)]
                if not present:
                    continue
                after = scorer.distributions(b, masks)
                for token, probabilities in zip(present, after):
                    best = int(probabilities.argmax())
                    outcome[token][example.row] = (
                        example.row, decision.predicted, decision.predicted_probability,
                        labels[best], float(probabilities[best]), removal,
                    )
    return {token: found for token, found in outcome.items() if found}
