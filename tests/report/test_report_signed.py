"""Signed and class-agnostic scores in the report (issue 26, item 3): a signed method's top tokens are only those
for the decision, those against it are listed apart and never both; its token views are flagged to diverge
around 0; a method that draws every class alike gets one row that says so."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from report_cases import WORDS, trace_of

import interpret
from interpret.analysis.result import AnalyzerResult, NamedArray, Readout, View
from interpret.report import RunInfo, build_report
from interpret.report.model import ReportData
from interpret.report.summary import top_tokens
from interpret.report.views import section_data
from interpret.request import Subject

SCORES = (-0.2, 0.5, -0.3, -0.1, 0.3, -0.4, 0.0)  # two tokens for the decision, four against, one neither


def _signed_report(signed: bool = True) -> ReportData:
    trace = trace_of([" ".join(WORDS[: len(SCORES)])])
    readout = np.zeros((1, trace.encoded.pos))
    readout[0, 1 : 1 + len(SCORES)] = SCORES
    result = AnalyzerResult(
        analyzer="signed_demo", version="0", params={}, arrays={"attr": NamedArray(readout, ("batch", "key"))},
        views=(View("token_strip", "attr", "Signed attribution"),), readout_of=Readout("attr", signed=signed),
    )
    return build_report(trace, [result], RunInfo.from_trace(trace, seed=0), top_k=5)


def test_tokens_for_and_against_the_decision_never_overlap() -> None:
    (method,) = top_tokens(_signed_report(), 0)
    assert [item.value for item in method.top] == [0.5, 0.3]  # only tokens for the decision, though top_k is 5
    assert [item.value for item in method.against] == [-0.4, -0.3, -0.2]
    assert not {item.position for item in method.top} & {item.position for item in method.against}
    (unsigned,) = top_tokens(_signed_report(signed=False), 0)  # an unsigned score ranks every token
    assert len(unsigned.top) == 5


def test_a_signed_readouts_views_are_drawn_diverging() -> None:
    report = _signed_report()
    assert section_data(report, report.sections[0])["views"][0]["options"]["signed_scores"] is True
    unsigned = _signed_report(signed=False)
    assert "signed_scores" not in section_data(unsigned, unsigned.sections[0])["views"][0]["options"]


def test_a_method_that_draws_every_class_alike_draws_one_row(tmp_path: Path) -> None:
    model, tokenizer = interpret.load()
    report = interpret.explain(model, tokenizer, "The soup was cold.", evidence=False,
                               target=Subject("negative", contrast="positive", compare=["negative"]),
                               analyzers=["gradient_weighted_rollout", "integrated_gradients"])
    html = report.render(tmp_path / "classes.html").read_text(encoding="utf-8")
    tables = dict(re.findall(r'<table class="class-rows" data-analyzer="(\w+)">(.*?)</table>', html, re.S))
    roles = {name: re.findall(r'<tr class="class-row" data-role="([^"]+)"', body) for name, body in tables.items()}
    assert roles["gradient_weighted_rollout"] == ["every class"]
    assert "gradient_weighted_rollout draws every class alike here: its scores differ across the classes by at most" in html
    assert roles["integrated_gradients"] == ["prediction, asked", "contrast class", "contrast"]  # signed: they differ
    comparison = next(c for c in report.classes if c.analyzer == "gradient_weighted_rollout")
    assert comparison.scores.shape[1] == 4  # the export keeps every row
