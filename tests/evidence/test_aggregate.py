"""The audit's evidence: per-method means with percentile-bootstrap intervals equal a direct statement of the
bootstrap, methods are ranked by comp − suff, and `run_audit(evidence=True)` writes the tables (and resumes)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from interpret.audit import AuditOptions, run_audit
from interpret.evidence.aggregate import aggregate_rows
from interpret.files.csv_io import read_csv
from interpret.reading.datasets import Example
from interpret.reference.toy import marker_dataset, marker_task
from interpret.request import EvidenceOptions


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    records = []
    for row in range(30):
        for method, shift in (("good", 0.4), ("bad", 0.0), ("random", 0.0)):
            comp, suff = shift + rng.normal(0.1, 0.05), rng.normal(0.2, 0.05) - shift / 2
            records.append({"row": row, "method": method, "removal": "delete", "comprehensiveness": comp,
                            "sufficiency": suff, "area": comp - suff, "gap": comp - suff,
                            "better_than_random": method == "good"})
    return pd.DataFrame.from_records(records)


def test_bootstrap_interval_equals_the_direct_statement() -> None:
    frame = _frame()
    table = aggregate_rows(frame, resamples=500, seed=11).set_index("method")
    rng = np.random.default_rng(11)
    samples = rng.integers(0, 30, size=(500, 30))
    for method in ("good", "bad", "random"):
        values = frame[frame.method == method].sort_values("row")["comprehensiveness"].to_numpy()
        means = np.array([values[sample].mean() for sample in samples])
        assert table.loc[method, "comprehensiveness"] == pytest.approx(values.mean(), abs=1e-12)
        assert table.loc[method, "comprehensiveness_low"] == pytest.approx(np.percentile(means, 2.5), abs=1e-12)
        assert table.loc[method, "comprehensiveness_high"] == pytest.approx(np.percentile(means, 97.5), abs=1e-12)
    assert table.loc["good", "rank"] == 1 and table.loc["bad", "rank"] == 2 and np.isnan(table.loc["random", "rank"])
    assert table.loc["good", "gap_vs_random_low"] > 0 > table.loc["bad", "gap_vs_random_low"]
    assert table.loc["good", "better_than_random_share"] == 1.0


def test_run_audit_with_evidence_writes_ranked_tables_and_resumes(tmp_path: object) -> None:
    model, tokenizer = marker_task()
    data = marker_dataset(6, seed=5)
    examples = [Example(row=i + 1, text=text) for i, text in enumerate(data.texts)]
    out = tmp_path / "audit"
    run_audit(model, tokenizer, examples, out, analyzers=["rollout", "last_layer_attention"], batch_size=4,
              options=AuditOptions(evidence=EvidenceOptions(True)))
    summary = read_csv(out / "evidence.csv")
    per_example = read_csv(out / "evidence_examples.csv")
    assert set(summary["method"]) == {"rollout", "last_layer_attention", "random"}
    assert sorted(summary["rank"].dropna().tolist()) == [1, 2]
    assert (summary["comprehensiveness_low"] <= summary["comprehensiveness"]).all()
    assert (summary["comprehensiveness"] <= summary["comprehensiveness_high"]).all()
    assert len(per_example) == 6 * 3 and set(per_example["row"]) == set(range(1, 7))
    again = run_audit(model, tokenizer, examples, out, analyzers=["rollout", "last_layer_attention"], batch_size=4,
                      options=AuditOptions(evidence=EvidenceOptions(True)))
    assert again.n_resumed == 6
    pd.testing.assert_frame_equal(read_csv(out / "evidence.csv"), summary)
