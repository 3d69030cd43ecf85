"""Classes side by side and word chips in headless Chromium: the picker switches the word blocks with the summary,
the class rows' chips keep their colour classes (no inline style: the page's policy pins its stylesheet) and
nothing is wider than the window."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from hf_tiny import TEXTS, tiny_config, word_tokenizer
from report_chromium import Chromium

from interpret.api import explain
from interpret.report.classes import shown_rows
from interpret.request import Subject

pytestmark = pytest.mark.browser
READY = "document.documentElement.getAttribute('data-report-ready') === '1'"
CHANGE_EXAMPLE = "(() => { const p = document.getElementById('example-picker'); p.value = '%d'; p.dispatchEvent(new Event('change')); })()"
HIDDEN = "document.querySelector('.example-words[data-example=\"%d\"]').hidden"


def test_the_picker_switches_word_blocks_and_class_rows_fit(browser: Chromium, tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.num_labels = 3
    model = transformers.BertForSequenceClassification(config).eval()
    report = explain(model, word_tokenizer(), TEXTS, ["integrated_gradients"], params={"integrated_gradients": {"steps": 4}},
                     target=Subject(compare=["LABEL_2"]), evidence=False)
    page = browser.open_page()
    page.navigate(report.render(tmp_path / "classes.html").resolve().as_uri())
    page.wait_until(READY)
    assert page.evaluate(HIDDEN % 0) is False and page.evaluate(HIDDEN % 1) is True
    page.evaluate(CHANGE_EXAMPLE % 1)
    assert page.evaluate(HIDDEN % 0) is True and page.evaluate(HIDDEN % 1) is False
    rows = "document.querySelectorAll('.example-summary[data-example=\"1\"] tr.class-row').length"
    # the prediction and LABEL_2, drawn once when LABEL_2 is the prediction
    expected = 1 if report.classes[0].labels[1][0] == "LABEL_2" else 2
    assert page.evaluate(rows) == len(shown_rows(report.classes[0], 1)) == expected
    styled = ("[...document.querySelectorAll('.cchip')].every(c => !c.hasAttribute('style') &&"
              " getComputedStyle(c).backgroundColor.startsWith('rgb'))")
    assert page.evaluate(styled) is True
    widest = "Math.max(...[...document.querySelectorAll('.class-rows, .word-rows')].map(e => e.getBoundingClientRect().right))"
    assert page.evaluate(widest) <= page.evaluate("window.innerWidth")
