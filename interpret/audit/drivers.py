"""What drives the model across a dataset, checked by intervention: drivers.csv and counterfactuals.csv.

A candidate is a token string (never a special token) or a word of several tokens (`interpret.reading.text`'s word
aggregation: the words the tokens' own markers spell, `marker_word_ids` and `words`; a word's score is the sum
of its tokens' scores; a word of one token is that token)
under the audit's lead method (`lead_of`: the method the evidence ranks first, else the first readout). Per
candidate, over the rows it occurs in: its rows, its occurrences, and the mean and mean |score| of its
occurrences. The `k` tokens and the `k` words of highest mean |score| among those in at least `MIN_ROWS` rows
(every row, in a smaller audit: a unit of one or two rows has no interval worth reading, and rare words would
crowd the top) are checked: every row holding one (at most `DriverSettings.rows` of them per candidate: the
first of its rows in one random order of the audit's rows, `numpy.random.default_rng(SeedSequence(seed,
spawn_key=(1,))).permutation` of the rows in order, so the cost is bounded however many rows a token occurs in
and candidates that share rows share their sample) is encoded again and re-run with
every occurrence of it removed (`interpret.evidence.removal`, the evidence's own removal; one pass for all of a
row's candidates, up to 64), and the candidate flips that row when the model's predicted class changes. Its
flip rate is flips / checked rows with a percentile bootstrap 95% interval (resampling those rows, seeded by
the audit's seed: `interpret.evidence.aggregate`). Candidates rank by flip rate, then mean
|score| (those not checked after, by mean |score|), then tokens before words, then by text.

drivers — one row per token and per word:
    unit            string   "token" or "word"
    token           string   the token as the tokenizer writes it, or the word as a person reads it
    method          string   the lead method whose scores are summarised
    rows            int64    rows it occurs in
    occurrences     int64    its occurrences over all rows
    mean_score      float64  mean score of its occurrences
    mean_abs_score  float64  mean |score| of its occurrences
    tested          bool     it was among the `k` of its unit re-run
    checked         Int64    rows re-run without it (all its rows, or the sample); null when not tested
    flips           Int64    checked rows whose prediction changed without it; null when not tested
    flip_rate       float64  flips / checked (NaN when not tested)
    flip_rate_low   float64  its bootstrap 95% interval's lower end (NaN when not tested)
    flip_rate_high  float64  and upper end
    removal         string   how it was removed ("delete", "mask", "zero"); null when not tested
    rank            int64    1 = the strongest driver

counterfactuals — one row per tested candidate × row it flips (ordered by the candidate's rank, then row):
    unit                string   "token" or "word"
    token               string   the token or word removed
    rank                int64    its rank in drivers
    row                 int64    the example's row id
    id                  string   the input's id for it; null when it has none
    prediction_before   string   the prediction with it
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

from interpret.arrays import to_numpy
from interpret.audit.kernel import audit_kernel
from interpret.evidence.aggregate import RESAMPLES, mean_interval
from interpret.evidence.removal import RemovalScorer, candidates, default_removal
from interpret.pipeline import Plan, capture
from interpret.reading.datasets import Example, model_inputs
from interpret.reading.text import marker_word_ids, token_scheme, word_spans, words

MIN_ROWS = 3  # rows a unit occurs in before it is checked (or every row of a smaller audit)
SAMPLE_STREAM = 1  # the spawn key of the rows' sample generator (the bootstrap's is the seed itself)
DRIVER_DTYPES: dict[str, str] = {
    "unit": "string", "token": "string", "method": "string", "rows": "int64", "occurrences": "int64",
    "mean_score": "float64", "mean_abs_score": "float64", "tested": "bool", "checked": "Int64", "flips": "Int64",
    "flip_rate": "float64", "flip_rate_low": "float64", "flip_rate_high": "float64", "removal": "string", "rank": "int64",
}
COUNTERFACTUAL_DTYPES: dict[str, str] = {
    "unit": "string", "token": "string", "rank": "int64", "row": "int64", "id": "string",
    "prediction_before": "string", "probability_before": "float64", "prediction_after": "string",
    "probability_after": "float64",
}
Unit = tuple[str, str]  # ("token" or "word", its text)
Flip = tuple[str, float, str, float, str]  # prediction before, its probability, after, its probability, removal


@dataclass(frozen=True)
class DriverSettings:
    """How the drivers are checked: `k` tokens and `k` words re-run (0: none) in at most `rows` rows each
    (0: every row holding one), the removal (None: `default_removal`), and the audit's batching, truncation,
    head, attention kernel and seed."""

    k: int
    rows: int
    removal: str | None
    batch_size: int
    max_length: int | None
    head: nn.Module | None
    attention: str | None
    seed: int


def occurrences(tokens: Sequence[str], special: Sequence[bool], scheme: str) -> list[tuple[Unit, list[int]]]:
    """Return every token and word occurrence of one example's real tokens (in order) as (unit, the indices of
    its tokens); special tokens are neither, and a word of one token is that token's occurrence only."""
    ids = marker_word_ids(tokens, scheme, special)
    found: list[tuple[Unit, list[int]]] = [(("token", t), [i]) for i, (t, flag) in enumerate(zip(tokens, special)) if not flag]
    spans = word_spans(ids)
    found += [(("word", name), list(range(a, b))) for name, (a, b) in zip(words(tokens, ids, scheme), spans) if b - a > 1]
    return found


def unit_occurrences(tokens: pd.DataFrame, method: str, scheme: str) -> pd.DataFrame:
    """Return one record (unit, token, row, score) per token and word occurrence of `method`'s rows in the
    tokens table (sorted by row, then position: the table's order); a word's score is the sum of its tokens'."""
    records = []
    for row, frame in tokens[tokens["analyzer"] == method].groupby("row", sort=True):
        scores = frame["score"].to_numpy()
        for (unit, text), index in occurrences(frame["token"].tolist(), frame["is_special"].tolist(), scheme):
            records.append((unit, text, row, float(scores[index].sum())))
    return pd.DataFrame.from_records(records, columns=["unit", "token", "row", "score"])


def unit_scores(found: pd.DataFrame) -> pd.DataFrame:
    """Return per unit of the occurrences: rows, occurrences, mean_score, mean_abs_score; strongest mean |score|
    first, then tokens before words, by text."""
    grouped = found.assign(abs_score=found["score"].abs()).groupby(["unit", "token"], sort=True)
    table = pd.DataFrame({
        "rows": grouped["row"].nunique(), "occurrences": grouped.size(),
        "mean_score": grouped["score"].mean(), "mean_abs_score": grouped["abs_score"].mean(),
    }).reset_index()
    return table.sort_values(["mean_abs_score", "unit", "token"], ascending=[False, True, True],
                             kind="mergesort").reset_index(drop=True)


def to_check(table: pd.DataFrame, k: int, n_rows: int) -> pd.DataFrame:
    """Return the rows of `table` (`unit_scores`, by mean |score| descending) to re-run: per unit, the first `k`
    that occur in at least `MIN_ROWS` rows (`n_rows`, the audit's rows, when it has fewer)."""
    return table[table["rows"] >= min(MIN_ROWS, n_rows)].groupby("unit", sort=False).head(k)


def rows_to_check(found: pd.DataFrame, top: pd.DataFrame, settings: DriverSettings) -> dict[int, set[Unit]]:
    """Return per row to re-run the units of `top` (`to_check`) it is re-run without: every row holding one, or
    for a unit in more than `settings.rows` rows the first `settings.rows` of them in one seeded random order
    of the rows (module docstring). Each unit's sample is uniform without replacement, and the samples share
    rows as far as the units do, so few rows are encoded again."""
    everyone = np.unique(found["row"].to_numpy())
    order = np.random.default_rng(np.random.SeedSequence(settings.seed, spawn_key=(SAMPLE_STREAM,))).permutation(everyone)
    place = dict(zip(order.tolist(), range(len(order))))
    holding = found.groupby(["unit", "token"], sort=False)["row"].unique()
    wanted: dict[int, set[Unit]] = {}
    for unit in zip(top["unit"], top["token"]):
        rows = sorted(holding[unit].tolist())
        if 0 < settings.rows < len(rows):
            rows = sorted(sorted(rows, key=place.__getitem__)[:settings.rows])
        for row in rows:
            wanted.setdefault(row, set()).add((str(unit[0]), str(unit[1])))
    return wanted


def driver_tables(
    model: nn.Module,
    tokenizer: Any,
    examples: Sequence[Example],
    tokens: pd.DataFrame,
    method: str,
    settings: DriverSettings,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return the drivers and counterfactuals tables (module docstring) of the audit's `tokens` table under
    `method`, re-running the model on the rows (or a sample of them) of the top `settings.k` tokens and words."""
    scheme = token_scheme(tokenizer)
    found = unit_occurrences(tokens, method, scheme)
    table = unit_scores(found)
    wanted = rows_to_check(found, to_check(table, settings.k, len(examples)), settings)
    rows = [example for example in examples if example.row in wanted]
    outcome = _flip_rows(model, tokenizer, rows, wanted, scheme, settings) if wanted else {}
    rng = np.random.default_rng(settings.seed)
    names = ("tested", "checked", "flips", "flip_rate", "flip_rate_low", "flip_rate_high", "removal")
    columns: dict[str, list] = {name: [] for name in names}
    for unit in zip(table["unit"], table["token"]):
        checked = outcome.get(unit)
        values: tuple = (False, None, None, np.nan, np.nan, np.nan, None)
        if checked:
            flipped = np.asarray([float(flip[0] != flip[2]) for flip in checked.values()])
            interval = mean_interval(flipped, rng.integers(0, len(flipped), (RESAMPLES, len(flipped))))
            values = (True, len(flipped), int(flipped.sum()), *interval, next(iter(checked.values()))[4])
        for name, value in zip(columns, values):
            columns[name].append(value)
    table = table.assign(method=method, **columns)
    table = table.sort_values(["tested", "flip_rate", "mean_abs_score", "unit", "token"],
                              ascending=[False, False, False, True, True], na_position="last", kind="mergesort")
    table["rank"] = np.arange(1, len(table) + 1)
    drivers = table.reset_index(drop=True)[list(DRIVER_DTYPES)].astype(DRIVER_DTYPES)
    return drivers, _counterfactuals(drivers, outcome, rows)


def _counterfactuals(drivers: pd.DataFrame, outcome: dict[Unit, dict[int, Flip]], examples: Sequence[Example]) -> pd.DataFrame:
    """Return the counterfactuals table: every row a tested unit flips, by the unit's rank, then row."""
    ids = {example.row: example.id for example in examples}
    records = [
        {"unit": unit, "token": text, "rank": rank, "row": row, "id": ids[row], "prediction_before": before,
         "probability_before": p_before, "prediction_after": after, "probability_after": p_after}
        for unit, text, rank in zip(drivers["unit"], drivers["token"], drivers["rank"])
        for row, (before, p_before, after, p_after, _) in sorted(outcome.get((unit, text), {}).items())
        if before != after
    ]
    return pd.DataFrame.from_records(records, columns=list(COUNTERFACTUAL_DTYPES)).astype(COUNTERFACTUAL_DTYPES)


def _flip_rows(
    model: nn.Module,
    tokenizer: Any,
    examples: Sequence[Example],
    wanted: dict[int, set[Unit]],
    scheme: str,
    settings: DriverSettings,
) -> dict[Unit, dict[int, Flip]]:
    """Return per unit, per row of `examples` it is `wanted` in, its Flip: the rows are encoded again in batches
    of the audit's size (a unit's positions are found in that encoding, so padding cannot move them), decided,
    and re-run with each wanted unit's every occurrence removed (one removal pass per row for all its units).
    Empty when the model makes no class decision."""
    plan = Plan({}, {}, (), head=settings.head, max_length=settings.max_length)  # nothing captured: the decisions
    outcome: dict[Unit, dict[int, Flip]] = {unit: {} for units in wanted.values() for unit in units}
    with audit_kernel(model, settings.attention):  # the kernel the audit's own passes ran with
        for start in range(0, len(examples), settings.batch_size):
            batch = examples[start:start + settings.batch_size]
            captured = capture(plan, model, tokenizer, model_inputs(batch))  # collect and decide
            encoded, decided, ctx = captured.trace.encoded, captured.decided, captured.context
            if decided[0].kind != "class" or ctx.runner is None or ctx.runner.reader.one_logit:
                return {}  # a flip changes the predicted class: a model with one output (a score) has no other
            removal = settings.removal or default_removal(encoded)
            scorer = RemovalScorer(ctx, encoded, removal)
            labels = ctx.runner.reader.labels if ctx.runner is not None else ()
            for b, (example, decision) in enumerate(zip(batch, decided)):
                real = np.flatnonzero(to_numpy(encoded.attention_mask[b]))
                allowed = set(candidates(encoded, b, decision.target).tolist())
                special = to_numpy(encoded.special[b].bool())
                masks: dict[Unit, np.ndarray] = {}
                for unit, index in occurrences([encoded.tokens[b][p] for p in real], special[real].tolist(), scheme):
                    if unit in wanted[example.row]:
                        mask = masks.setdefault(unit, np.zeros(encoded.pos, dtype=bool))
                        mask[[p for p in real[index] if p in allowed]] = True
                present = [unit for unit, mask in masks.items() if mask.any()]
                if not present:
                    continue
                after = scorer.distributions(b, np.stack([masks[unit] for unit in present]))
                for unit, probabilities in zip(present, after):
                    best = int(probabilities.argmax())
                    outcome[unit][example.row] = (decision.predicted, float(decision.predicted_probability or 0.0),
                                                  labels[best], float(probabilities[best]), removal)
    return {unit: found for unit, found in outcome.items() if found}
