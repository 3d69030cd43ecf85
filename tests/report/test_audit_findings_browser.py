"""The audit page's findings in headless Chromium, offline (issue 27): the drivers table with the planted marker
first, its counterfactual check and rows, the misclassified rows worst first and the slices all draw, with no
error and no request beyond the file itself."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from report_chromium import Chromium
from test_report_first_look_browser import keep

from interpret.audit import AuditOptions, run_audit
from interpret.reading.datasets import read_dataset
from interpret.reference.toy import MARKER, marker_dataset, marker_task

pytestmark = pytest.mark.browser

ROWS = "[...document.querySelectorAll('{} tbody tr')].map(row => [...row.cells].map(cell => cell.innerText.trim()))"


def test_the_audit_pages_findings_draw(browser: Chromium, tmp_path: Path) -> None:
    model, tokenizer = marker_task()
    data = marker_dataset(24, seed=11)
    path = tmp_path / "input.jsonl"
    path.write_text("".join(
        json.dumps({"id": f"<i>s{i}</i>", "text": text, "label": str(int("cat" in text.split())), "source": "ab"[i % 2]})
        + "\n" for i, text in enumerate(data.texts)), encoding="utf-8")
    result = run_audit(model, tokenizer, read_dataset(path).examples, tmp_path / "out", analyzers=["rollout"],
                       options=AuditOptions(input_file=path, slice_by="source", drivers=4))
    page = browser.open_page(width=1280)
    page.call("Network.enable")
    page.navigate(result.summary.resolve().as_uri())
    drivers = page.evaluate(ROWS.format("#drivers table.ranked"))
    assert drivers[0][:2] == ["1", MARKER] and len(drivers) == 15
    assert [row[3] for row in drivers[4:]] == ["not checked"] * 11  # only the top 4 were re-run
    sentences = page.evaluate("[...document.querySelectorAll('#drivers .sentence')].map(p => p.innerText)")
    holding = sum(MARKER in text.split() for text in data.texts)
    assert sentences[0].startswith(f"removing '{MARKER}' changes ") and sentences[0].endswith(f" of {holding} predictions")
    flips = page.evaluate("[...document.querySelector('#drivers .check table').tBodies[0].rows].map(r => r.cells[0].innerText)")
    counterfactuals = pd.read_csv(tmp_path / "out" / "counterfactuals.csv")
    assert flips == [str(r) for r in counterfactuals[counterfactuals["token"] == MARKER]["row"]]
    wrong = page.evaluate(ROWS.format("#misclassified"))
    probabilities = [float(row[5]) for row in wrong]
    assert wrong and probabilities == sorted(probabilities, reverse=True)
    assert wrong[0][1].startswith("<i>s")  # an id is text, never markup
    slices = page.evaluate(ROWS.format("#slices"))
    assert [row[0] for row in slices] == ["a", "b"] and all(row[3] == "not measured" for row in slices)
    visible = page.evaluate("['#drivers', '#misclassified', '#slices'].map(s => document.querySelector(s)"
                            ".getBoundingClientRect().height > 100)")
    assert visible == [True, True, True]
    assert page.errors() == [] and page.requests() == [result.summary.resolve().as_uri()]
    keep(page.screenshot(tmp_path / "audit-findings.png"))
