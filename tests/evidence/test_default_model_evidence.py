"""A report on the default model (MiniLM with its mean-pooled sentiment head) shows the evidence section, and
its JSON holds every metric: every real non-special token is a candidate, the full-input probability is the
decision's own."""

from __future__ import annotations

import json

import pytest

import interpret
from interpret.models.default_model import load_default


@pytest.mark.slow
def test_default_model_report_has_evidence() -> None:
    model, tokenizer, head = load_default("cpu")
    texts = ["The night staff helped us find a pharmacy at two in the morning.", "The pool was green."]
    report = interpret.explain(model, tokenizer, texts, ["rollout", "last_layer_attention"], head=head)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    evidence = data["evidence"]
    assert evidence["removal"] == "delete" and {m["method"] for m in evidence["methods"]} == {"rollout", "last_layer_attention"}
    lengths = report.examples
    assert evidence["candidates"] == [sum(r and not s for r, s in zip(e.real, e.special)) for e in lengths]
    for b, decision in enumerate(data["run"]["decisions"]):
        assert evidence["full_probability"][b] == pytest.approx(decision["probability"], abs=1e-5)
    page = report.page().decode()
    assert 'id="evidence"' in page and "Deletion curves" in page and "Agreement between methods" in page
