"""`interpret.load()` with no name: the built-in default model, whose shipped head explain, analyze and the audit
use without `head=` (the record `interpret.decision.decide.decision_head` reads); a copy carries no head."""

from __future__ import annotations

import copy
import gc
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import interpret
from interpret.audit.runner import run_audit
from interpret.decision import decide as decision
from interpret.errors import ModelLoadError
from interpret.models import default_model as dm
from interpret.reading.datasets import Example

TEXTS = ["The soup was cold and the waiter was rude.", "A lovely, quiet hotel with friendly staff."]


@pytest.fixture(scope="module")
def default() -> tuple[torch.nn.Module, object, torch.nn.Module]:
    """The default model as `interpret.load()` gives it, and the shipped head loaded on its own."""
    model, tokenizer = interpret.load(device="cpu")
    return model, tokenizer, dm.shipped_head(dm.model_path())


def test_load_without_a_name_is_the_default_model_with_its_head_recorded(default) -> None:
    model, tokenizer, shipped = default
    assert type(model).__name__ == "BertModel" and not model.training
    head = decision.decision_head(model)
    assert head is not None and head.note == dm.DEMO_NOTE
    assert torch.equal(head.linear.weight, shipped.linear.weight) and torch.equal(head.linear.bias, shipped.linear.bias)
    given = torch.nn.Linear(1, 1)
    assert decision.decision_head(model, given) is given  # an explicit head wins
    assert decision.decision_head(copy.deepcopy(model)) is None  # a copy is another object: no head, never a guess
    assert decision.decision_head(None) is None


def test_explain_uses_the_recorded_head_without_head_argument(default) -> None:
    model, tokenizer, shipped = default
    report = interpret.explain(model, tokenizer, TEXTS, ["rollout"], evidence=False)
    given = interpret.explain(model, tokenizer, TEXTS, ["rollout"], evidence=False, head=shipped)
    assert [d.predicted for d in report.run.decisions] == ["negative", "positive"]
    for ours, theirs in zip(report.run.decisions, given.run.decisions):
        assert ours.predicted == theirs.predicted and ours.probability == pytest.approx(theirs.probability, abs=1e-6)
    assert ("Decision head", dm.DEMO_NOTE) in report.run.notes
    np.testing.assert_allclose(report.results[0].readout, given.results[0].readout, rtol=0, atol=1e-7)


def test_analyze_uses_the_recorded_head(default) -> None:
    model, tokenizer, shipped = default
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern"])
    ours = interpret.analyze(trace, "input_x_gradient", model=model, tokenizer=tokenizer)
    theirs = interpret.analyze(trace, "input_x_gradient", model=model, tokenizer=tokenizer, head=shipped)
    np.testing.assert_allclose(ours.readout, theirs.readout, rtol=0, atol=1e-6)


def test_audit_uses_the_recorded_head(default, tmp_path: Path) -> None:
    model, tokenizer, shipped = default
    examples = [Example(text=text, row=i) for i, text in enumerate(TEXTS)]
    ours = run_audit(model, tokenizer, examples, tmp_path / "a", analyzers=["rollout"])
    theirs = run_audit(model, tokenizer, examples, tmp_path / "b", analyzers=["rollout"], head=shipped)
    ours_table, theirs_table = pd.read_csv(ours.examples_csv), pd.read_csv(theirs.examples_csv)
    assert list(ours_table["prediction"]) == list(theirs_table["prediction"]) == ["negative", "positive"]


def test_the_record_keeps_no_model_alive_and_revision_is_refused() -> None:
    before = len(decision._HEADS)  # other tests' models in this process may be recorded still
    model, _ = interpret.load(device="cpu")
    assert model in decision._HEADS
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None and len(decision._HEADS) <= before  # the record neither kept it alive nor kept its entry
    with pytest.raises(ModelLoadError, match="no model was named"):
        interpret.load(revision="main")
