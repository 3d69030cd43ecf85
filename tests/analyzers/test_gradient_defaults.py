"""Integrated Gradients is among the default analyzers: the default report of a classifier holds it; where it
cannot run (a bare encoder makes no decision to score) the default report skips it with a note saying why,
while an analyzer the user named is still an error."""

from __future__ import annotations

import pytest
import torch
import transformers
from gradient_cases import tiny_bert
from hf_tiny import TEXTS, tiny_config, word_tokenizer

import interpret
from interpret.analyze.defaults import DEFAULT_ANALYZERS
from interpret.errors import AnalyzerError


def test_the_default_report_holds_integrated_gradients() -> None:
    assert "integrated_gradients" in DEFAULT_ANALYZERS
    case = tiny_bert()
    report = interpret.explain(case.model, case.tokenizer, case.texts)
    assert [section.result.analyzer for section in report.sections][: len(DEFAULT_ANALYZERS)] == list(DEFAULT_ANALYZERS)
    assert report.run.analyzers == DEFAULT_ANALYZERS


def test_a_model_without_a_decision_skips_it_with_a_note() -> None:
    torch.manual_seed(0)
    bare = transformers.BertModel(tiny_config("bert")).eval()
    report = interpret.explain(bare, word_tokenizer(), TEXTS)
    analyzers = [section.result.analyzer for section in report.sections]
    assert "integrated_gradients" not in analyzers and "rollout" in analyzers
    notes = dict(report.run.notes)
    assert "no decision to score" in notes["integrated_gradients skipped"]
    with pytest.raises(AnalyzerError, match="no decision to score"):
        interpret.explain(bare, word_tokenizer(), TEXTS, analyzers=["rollout", "integrated_gradients"])
