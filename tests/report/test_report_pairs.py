"""Text pairs in the report (NLI premise/hypothesis, a cross-encoder's query/passage): each example carries its
pair's text, the page shows it (escaped) under the text, in the example picker, the overview and the title, and
the data (`to_dict`, the export's report.json) holds it; a single-text report shows no pair element."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import shipped_tokenizers
import torch
import transformers
from hf_tiny import tiny_config
from report_chromium import Chromium

import interpret
from interpret.report import Report
from interpret.report.model import PAIR_SEPARATOR
from interpret.report.notebook import notebook_html
from interpret.report.summary import report_title

TEXTS = ["the cat sat on the mat", "a dog"]
PAIRS = ["a <b>quiet</b> & calm dog", "the cat ran by the river !"]
ESCAPED = "a &lt;b&gt;quiet&lt;/b&gt; &amp; calm dog"


@pytest.fixture(scope="module")
def classifier() -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase]:
    """A tiny BERT classifier (3 labels) and a WordPiece tokenizer that gives segment ids."""
    tokenizer = shipped_tokenizers.wordpiece()
    torch.manual_seed(0)
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.num_labels = 3
    return transformers.BertForSequenceClassification(config).eval(), tokenizer


@pytest.fixture(scope="module")
def paired(classifier) -> Report:
    model, tokenizer = classifier
    return interpret.explain(model, tokenizer, {"text": TEXTS, "text_pair": PAIRS}, ["rollout"], evidence=False)


@pytest.fixture(scope="module")
def single(classifier) -> Report:
    model, tokenizer = classifier
    return interpret.explain(model, tokenizer, TEXTS, ["rollout"], evidence=False)


def test_each_example_carries_its_pair_in_the_data(paired: Report, single: Report) -> None:
    assert [example.text for example in paired.examples] == TEXTS
    assert [example.text_pair for example in paired.examples] == PAIRS
    assert [example["text_pair"] for example in paired.to_dict()["examples"]] == PAIRS
    assert [example.text_pair for example in single.examples] == [None, None]
    assert [example["text_pair"] for example in single.to_dict()["examples"]] == [None, None]
    json.dumps(paired.to_dict(), allow_nan=False)  # JSON-ready
    # the tokens hold both texts, the pair's after the separator
    tokens = paired.examples[1].tokens
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and "river" in tokens[tokens.index("[SEP]"):]


def test_the_page_shows_each_pair_escaped_under_its_text(paired: Report) -> None:
    page = paired.page().decode("utf-8")
    assert PAIRS[0] not in page and "<b>quiet" not in page
    assert (f'<p class="input-text">{TEXTS[0]}</p>'
            f'<p class="input-text input-pair"><span class="pair-label">Pair:</span> {ESCAPED}</p>') in page
    assert f'<span class="pair-label">Pair:</span> {PAIRS[1]}</p>' in page
    assert page.count('class="input-text input-pair"') == 2
    # the example picker and the overview name both texts
    assert f'<option value="0">0: {TEXTS[0]} ‖ {ESCAPED}</option>' in page
    assert f"<bdi>{TEXTS[1]} ‖ {PAIRS[1]}</bdi>" in page


def test_a_single_text_report_has_no_pair_element(single: Report) -> None:
    page = single.page().decode("utf-8")
    assert 'class="input-text input-pair"' not in page and "pair-label\">" not in page and "‖" not in page
    assert f'<p class="input-text">{TEXTS[0]}</p>' in page
    assert f'<option value="1">1: {TEXTS[1]}</option>' in page


def test_long_pairs_share_the_overview_excerpt_and_the_title_names_both(paired: Report) -> None:
    from dataclasses import replace

    from interpret.report.render import example_decisions
    from interpret.report.summary import EXCERPT_CHARACTERS, overview_rows, top_tokens

    long = replace(paired, examples=(replace(paired.examples[0], text="premise " * 30, text_pair="hypothesis " * 30),
                                     replace(paired.examples[1], text="short", text_pair="word " * 40)))
    tops = [top_tokens(long, b) for b in range(2)]
    rows = overview_rows(long, tops, example_decisions(long))
    first, second = (row.excerpt.split(PAIR_SEPARATOR) for row in rows)
    assert len(rows[0].excerpt) <= EXCERPT_CHARACTERS and len(rows[1].excerpt) <= EXCERPT_CHARACTERS
    assert first[0].startswith("premise") and first[1].startswith("hypothesis")  # each its half
    assert second[0] == "short" and len(rows[1].excerpt) == EXCERPT_CHARACTERS  # the pair takes the room left
    one = replace(paired, examples=(replace(paired.examples[1], text="a dog", text_pair="the cat ran"),))
    assert report_title(one) == "Report: a dog ‖ the cat ran"


def test_the_export_and_the_notebook_summary_hold_the_pairs(paired: Report, single: Report, tmp_path: Path) -> None:
    paired.export(tmp_path / "paired", figures=False)
    single.export(tmp_path / "single", figures=False)
    manifest = json.loads((tmp_path / "paired" / "report.json").read_text(encoding="utf-8"))
    assert manifest["run"]["inputs"] == TEXTS and manifest["text_pairs"] == PAIRS
    assert "text_pairs" not in json.loads((tmp_path / "single" / "report.json").read_text(encoding="utf-8"))
    summary = notebook_html(paired, paired.page(), limit=0)  # the compact summary, its overview table
    assert f"<bdi>{TEXTS[0]} ‖ {ESCAPED}</bdi>" in summary and "<b>quiet" not in summary


@pytest.mark.browser
def test_the_selected_examples_pair_is_visible(browser: Chromium, paired: Report, tmp_path: Path) -> None:
    page = browser.open_page()
    page.navigate(paired.render(tmp_path / "pairs.html").resolve().as_uri())
    page.wait_until("document.documentElement.getAttribute('data-report-ready') === '1'")
    visible = ("(() => {{ const e = document.querySelector('.example-summary:not([hidden]) .input-pair');"
               " return e && e.offsetParent !== null && e.getBoundingClientRect().height > 0 ? e.textContent : null;"
               " }})()")
    assert page.evaluate(visible.format()) == f"Pair: {PAIRS[0]}"
    page.evaluate("(() => { const p = document.getElementById('example-picker'); p.value = '1';"
                  " p.dispatchEvent(new Event('change')); })()")
    assert page.evaluate(visible.format()) == f"Pair: {PAIRS[1]}"
