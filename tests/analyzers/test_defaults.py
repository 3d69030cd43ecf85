"""The default analyzers lead with the method the evidence ranks first (decompx); on a model it refuses the next
in the evidence's ranking (`defaults.LEADS`) leads, with a note saying why, in the report and the audit alike;
where none can run (a bare encoder makes no decision to score) none leads, while an analyzer the user named is
still an error."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import transformers
from gradient_cases import tiny_bert
from hf_tiny import TEXTS, tiny_config, word_tokenizer
from torch import nn

import interpret
from interpret.analyze.defaults import DEFAULT_ANALYZERS, LEADS
from interpret.audit import run_audit
from interpret.datasets import Example
from interpret.errors import AnalyzerError


class MaxPoolHead(nn.Module):
    """A head decompx does not decompose: max-pooled hidden states [batch, pos, d] → logits [batch, 2]."""

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
    assert DEFAULT_ANALYZERS[0] == LEADS[0] == "decompx"
    case = tiny_bert()
    report = interpret.explain(case.model, case.tokenizer, case.texts)
    assert [section.result.analyzer for section in report.sections][: len(DEFAULT_ANALYZERS)] == list(DEFAULT_ANALYZERS)
    assert report.run.analyzers == DEFAULT_ANALYZERS
    assert not [label for label, _ in report.run.notes if label.endswith("skipped")]


def test_a_head_decompx_refuses_is_led_by_the_next_in_the_ranking() -> None:
    encoder, head = _encoder_and_head()
    report = interpret.explain(encoder, word_tokenizer(), TEXTS, head=head)
    assert report.run.analyzers == (LEADS[1], *DEFAULT_ANALYZERS[1:])
    note = dict(report.run.notes)["decompx skipped"]
    assert "MaxPoolHead is not one" in note and f"; {LEADS[1]} leads instead (next in the evidence's ranking)." in note
    with pytest.raises(AnalyzerError, match="MaxPoolHead is not one"):  # named by the user: an error
        interpret.explain(encoder, word_tokenizer(), TEXTS, head=head, analyzers=["decompx", "rollout"])


def test_the_default_audit_falls_back_by_the_same_rule(tmp_path, caplog) -> None:
    encoder, head = _encoder_and_head()
    examples = [Example(row=i, text=text) for i, text in enumerate(TEXTS)]
    with caplog.at_level("WARNING", logger="interpret"):
        result = run_audit(encoder, word_tokenizer(), examples, tmp_path, head=head)
    assert set(pd.read_parquet(result.tokens)["analyzer"]) == {LEADS[1], "rollout"}
    assert "decompx skipped" in caplog.text and "MaxPoolHead is not one" in caplog.text


def test_a_model_without_a_decision_has_no_lead_and_says_why() -> None:
    torch.manual_seed(0)
    bare = transformers.BertModel(tiny_config("bert")).eval()
    report = interpret.explain(bare, word_tokenizer(), TEXTS)
    analyzers = [section.result.analyzer for section in report.sections]
    assert not set(LEADS) & set(analyzers) and "rollout" in analyzers
    notes = dict(report.run.notes)
    assert "no decision to score" in notes[f"{LEADS[1]} skipped"] and "none decision" in notes["decompx skipped"]
    assert not any("leads instead" in notes[f"{name} skipped"] for name in LEADS)
    with pytest.raises(AnalyzerError, match="no decision to score"):
        interpret.explain(bare, word_tokenizer(), TEXTS, analyzers=["rollout", LEADS[1]])
