"""Faithfulness over a dataset: per-example evidence rows, their means with bootstrap confidence intervals,
and the methods ranked.

`evidence_rows` flattens one batch's `Evidence` to one row per example × method (the random baseline as
method "random", its mean over seeds). `aggregate_rows` gives, per method, the mean of each metric over
the examples with a percentile bootstrap 95% interval (Efron & Tibshirani 1993, §13.3: resample the examples
with replacement `resamples` times, take the 2.5th and 97.5th percentiles of the resampled means), the mean
difference of comp − suff to random on the same examples with its paired bootstrap interval, the share of
examples on which the method beat random, and its rank by mean comp − suff (1 = most faithful).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from interpret.evidence.evidence import RANDOM, Evidence
from interpret.files.csv_io import write_csv

METRICS = ("comprehensiveness", "sufficiency", "area", "gap")
RESAMPLES = 1000


def evidence_rows(evidence: Evidence, rows: Sequence[int]) -> pd.DataFrame:
    """Return one row per example × method (row: the dataset row of each example; random included)."""
    records = []
    for method in [*evidence.methods, evidence.random]:
        better = (
            evidence.better_than_random(method.method) if method.method != RANDOM else np.zeros(len(rows), bool)
        )
        for b, row in enumerate(rows):
            records.append({
                "row": int(row),
                "method": method.method,
                "removal": evidence.removal,
                "comprehensiveness": float(method.comprehensiveness[b]),
                "sufficiency": float(method.sufficiency[b]),
                "area": float(method.area[b]),
                "gap": float(method.gap[b]),
                "better_than_random": bool(better[b]),
            })
    return pd.DataFrame.from_records(records)


def aggregate_rows(frame: pd.DataFrame, *, resamples: int = RESAMPLES, seed: int = 0) -> pd.DataFrame:
    """Return per method: mean and bootstrap 95% interval of each metric, Δ gap to random, rank (see module)."""
    frame = frame[np.isfinite(frame["gap"])]
    wide = {metric: frame.pivot(index="row", columns="method", values=metric) for metric in METRICS}
    rng = np.random.default_rng(seed)
    n = len(wide["gap"])
    if n == 0:
        raise ValueError("no example has tokens to remove, so the evidence has nothing to aggregate.")
    samples = rng.integers(0, n, size=(resamples, n))
    records = []
    for method in wide["gap"].columns:
        record: dict[str, object] = {"method": method, "examples": n}
        for metric in METRICS:
            values = wide[metric][method].to_numpy()
            record[metric], record[f"{metric}_low"], record[f"{metric}_high"] = mean_interval(values, samples)
        if method != RANDOM:
            delta = wide["gap"][method].to_numpy() - wide["gap"][RANDOM].to_numpy()
            record["gap_vs_random"], record["gap_vs_random_low"], record["gap_vs_random_high"] = mean_interval(delta, samples)
            better = frame[frame["method"] == method]["better_than_random"]
            record["better_than_random_share"] = float(better.mean())
        records.append(record)
    table = pd.DataFrame.from_records(records)
    ranked = table[table["method"] != RANDOM].sort_values("gap", ascending=False, kind="mergesort")
    table["rank"] = table["method"].map({m: i + 1 for i, m in enumerate(ranked["method"])})
    return table.sort_values(["rank"], na_position="last", kind="mergesort").reset_index(drop=True)


def mean_interval(values: np.ndarray, samples: np.ndarray) -> tuple[float, float, float]:
    """Return the mean of `values` [n] and the 2.5th and 97.5th percentiles of its means over `samples`
    [resamples, n] (indices drawn with replacement): a percentile bootstrap 95% interval."""
    means = values[samples].mean(axis=1)
    return float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def lead_of(ranked: Sequence[str], readouts: Sequence[str]) -> str | None:
    """Return the lead method: the first of `ranked` (the evidence's order, most faithful first) that declares a
    readout, else the first readout; None without any readout. The report and the audit both lead with it."""
    return next((name for name in ranked if name in readouts), readouts[0] if readouts else None)


def write_evidence_tables(frame: pd.DataFrame, directory: Path, *, seed: int = 0) -> pd.DataFrame:
    """Write evidence_examples.csv (every row) and evidence.csv (the aggregate) under `directory`; return the
    aggregate (methods ranked)."""
    write_csv(frame.sort_values(["row", "method"], kind="mergesort").reset_index(drop=True),
              directory / "evidence_examples.csv")
    aggregate = aggregate_rows(frame, seed=seed)
    write_csv(aggregate, directory / "evidence.csv")
    return aggregate

