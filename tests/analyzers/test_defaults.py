"""The default report leads with the method the evidence ranks first (decompx), the default audit with the first
within its cost (attnlrp, `defaults.AUDIT_LEADS`); on a model a lead refuses, the next in the evidence's ranking
leads, with a note saying why, in the report and the audit alike; where none can run (a bare encoder makes no
decision to score) none leads, while an analyzer the user named is still an error."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import transformers
from gradient_cases import tiny_bert
from hf_tiny import TEXTS, tiny_config, word_tokenizer
from torch import nn

import interpret
from interpret.analysis.defaults import AUDIT_LEADS, DEFAULT_ANALYZERS, LEADS
from interpret.audit import run_audit
from interpret.errors import AnalyzerError
from interpret.reading.datasets import Example


class MaxPoolHead(nn.Module):
    """A head decompx does not decompose and attnlrp has no rules for: max-pooled hidden states [batch, pos, d] →
    logits [batch, 2]."""

    labels = ("negative", "positive")

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, 2)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.masked_fill(~mask.bool()[..., None], -1e4).amax(1))


def _encoder_and_head() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    config = tiny_config("bert")
    return transformers.BertModel(config).eval(), MaxPoolHead(config.hidden_size).eval()


def test_the_default_report_leads_with_decompx() -> None:
    assert DEFAULT_ANALYZERS[0] == LEADS[0] == "decompx" and AUDIT_LEADS == LEADS[1:]
    case = tiny_bert()
    report = interpret.explain(case.model, case.tokenizer, case.texts)
    assert [section.result.analyzer for section in report.sections][: len(DEFAULT_ANALYZERS)] == list(DEFAULT_ANALYZERS)
    assert report.run.analyzers == DEFAULT_ANALYZERS
    assert not [label for label, _ in report.run.notes if label.endswith("skipped")]


def test_a_head_decompx_refuses_is_led_by_the_next_in_the_ranking() -> None:
    encoder, head = _encoder_and_head()
    report = interpret.explain(encoder, word_tokenizer(), TEXTS, head=head)
    assert report.run.analyzers == (LEADS[2], *DEFAULT_ANALYZERS[1:])
    notes = dict(report.run.notes)
    for name in LEADS[:2]:
        assert "MaxPoolHead is not one" in notes[f"{name} skipped"]
        assert notes[f"{name} skipped"].endswith(f"; {LEADS[2]} leads instead (next in the evidence's ranking).")
    with pytest.raises(AnalyzerError, match="MaxPoolHead is not one"):  # named by the user: an error
        interpret.explain(encoder, word_tokenizer(), TEXTS, head=head, analyzers=["decompx", "rollout"])


def test_the_default_audit_falls_back_by_the_same_rule(tmp_path, caplog) -> None:
    encoder, head = _encoder_and_head()
    examples = [Example(row=i, text=text) for i, text in enumerate(TEXTS)]
    with caplog.at_level("WARNING", logger="interpret"):
        result = run_audit(encoder, word_tokenizer(), examples, tmp_path, head=head)
    assert set(pd.read_parquet(result.tokens)["analyzer"]) == {AUDIT_LEADS[1], "rollout"}
    assert "attnlrp skipped" in caplog.text and "MaxPoolHead is not one" in caplog.text
    assert "decompx" not in caplog.text  # not an audit's lead: not tried


def test_a_model_without_a_decision_has_no_lead_and_says_why() -> None:
    torch.manual_seed(0)
    bare = transformers.BertModel(tiny_config("bert")).eval()
    report = interpret.explain(bare, word_tokenizer(), TEXTS)
    analyzers = [section.result.analyzer for section in report.sections]
    assert not set(LEADS) & set(analyzers) and "rollout" in analyzers
    notes = dict(report.run.notes)
    assert "no decision to score" in notes[f"{LEADS[2]} skipped"] and "none decision" in notes["decompx skipped"]
    assert not any("leads instead" in notes[f"{name} skipped"] for name in LEADS)
    with pytest.raises(AnalyzerError, match="no decision to score"):
        interpret.explain(bare, word_tokenizer(), TEXTS, analyzers=["rollout", LEADS[2]])


def test_the_default_audit_leads_with_attnlrp_and_the_report_with_decompx(tmp_path) -> None:
    from interpret.models.default_model import load_default

    model, tokenizer, head = load_default("cpu")
    examples = [Example(row=0, text="The soup was cold and the waiter rude.")]
    result = run_audit(model, tokenizer, examples, tmp_path, head=head)
    assert set(pd.read_parquet(result.tokens)["analyzer"]) == {"attnlrp", "rollout"}
    report = interpret.explain(model, tokenizer, examples[0].text, head=head, evidence=False)
    assert report.run.analyzers == DEFAULT_ANALYZERS and DEFAULT_ANALYZERS[0] == "decompx"
