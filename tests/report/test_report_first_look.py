"""The first look at a report, as parsed HTML: its title, the overview of several texts, attention entropy as a
[layer × head] heat table, and the report in a notebook (`_repr_html_`: the page in a sandboxed iframe, or a
compact summary above a size)."""

from __future__ import annotations

import re

import pytest
from report_cases import Element, Page, explained, parse_tree, payload_report

from interpret.report import Report
from interpret.report.notebook import INLINE_MAX_BYTES, notebook_html

TEXTS = ["the cat sat on the mat", "a dog saw a big cat", "the small dog ran"]
IDS = ["r1", "<b>r2</b>\u202e", "r3"]
IDS_SHOWN = ["r1", "<b>r2</b>\\u202e", "r3"]  # as text, the right-to-left override escaped


@pytest.fixture(scope="module")
def several() -> Report:
    return explained(TEXTS, ids=IDS)


@pytest.fixture(scope="module")
def single() -> Report:
    return explained(TEXTS[:1])


def tree_of(report: Report) -> Element:
    return parse_tree(report.page().decode("utf-8"))


def test_a_report_is_titled_by_its_first_words_or_its_number_of_texts(single: Report, several: Report) -> None:
    tree = tree_of(single)
    assert tree.find_all("h1")[0].text() == "Report: the cat sat on the mat"
    assert tree.find_all("title")[0].text() == f"Report: the cat sat on the mat · {single.run.model_id}"
    assert "Interpretability audit" not in single.page().decode()
    long = explained(["the cat sat on the mat a dog saw the big small cat"], ["rollout"], evidence=False)
    assert tree_of(long).find_all("h1")[0].text() == "Report: the cat sat on the mat a dog …"
    assert tree_of(several).find_all("h1")[0].text() == "Report: 3 texts"
    hostile = tree_of(explained(["<b>big</b> \u202efish\" on red"], ["rollout"], evidence=False))
    assert hostile.find_all("h1")[0].text() == 'Report: <b>big</b> \\u202efish" on red'  # text, override shown
    assert hostile.find_all("title")[0].text().startswith('Report: <b>big</b> \\u202efish" on red · ')
    assert hostile.find_all("b") == []


def test_several_texts_open_on_an_overview_row_per_text(several: Report) -> None:
    tree = tree_of(several)
    main = tree.find_all("main")[0]
    first = next(child for child in main.children if isinstance(child, Element))
    assert first.attrs.get("id") == "overview"  # before the summary, the first thing under the header
    table = first.find_all("table", "overview")[0]
    evidence = several.evidence
    lead = evidence.ranked()[0].method  # the most faithful here; rollout and flow both declare a readout
    assert [th.text() for th in table.find_all("th")] == [
        "#", "id", "text", "prediction", "probability", f"top tokens ({lead})", "evidence: comp − suff vs random"]
    result = next(result for result in several.results if result.analyzer == lead)
    method = next(method for method in evidence.methods if method.method == lead)
    better = evidence.better_than_random(lead)
    rows = table.find_all("tbody")[0].find_all("tr")
    assert len(rows) == len(TEXTS)
    for b, row in enumerate(rows):
        decision, example = several.run.decisions[b], several.examples[b]
        cells = row.find_all("td")
        assert row.attrs["data-example"] == str(b) and row.attrs["tabindex"] == "0"
        assert [cell.text() for cell in cells[:5]] == [
            str(b), IDS_SHOWN[b], TEXTS[b], decision.predicted, f"{decision.predicted_probability:.4g}"]
        # the lead method's five highest scores among real, non-special tokens, ties by position
        scores = result.readout[b]
        kept = [i for i, token in enumerate(example.tokens) if example.real[i] and not example.special[i]]
        top = sorted(kept, key=lambda i: (-scores[i], i))[:5]
        chips = [(chip.find_all("bdi")[0].text(), chip.find_all("span", "val")[0].text())
                 for chip in cells[5].find_all("span", "chip")]
        shown = example.display or example.tokens
        assert chips == [(shown[i], f"{scores[i]:.4g}") for i in top]
        verdict = "better than random" if better[b] else "no better than random"
        assert cells[6].text() == (f"{method.gap[b]:.4g} vs {evidence.random.gap[b]:.4g} ±"
                                   f" {evidence.random.spread['gap'][b]:.4g} {verdict}")
    assert tree.find_all("b") == []  # the id's markup is text
    assert not any(section.attrs.get("id") == "overview" for section in tree_of(explained(TEXTS[:1])).find_all("section"))


def test_without_evidence_the_overview_shows_the_first_readout_and_says_so() -> None:
    report = explained(TEXTS, evidence=False)
    table = tree_of(report).find_all("table", "overview")[0]
    assert "top tokens (rollout)" in [th.text() for th in table.find_all("th")]
    assert [row.find_all("td")[-1].text() for row in table.find_all("tbody")[0].find_all("tr")] == ["not measured"] * 3


def test_attention_entropy_is_a_layer_by_head_heat_table_per_example(several: Report) -> None:
    page = several.page().decode("utf-8")
    section = next(s for s in parse_tree(page).find_all("section") if s.attrs.get("id") == "sec-attention_entropy")
    result = next(result for result in several.results if result.analyzer == "attention_entropy")
    views = section.find_all("div", "heat-view")
    assert [view.find_all("h3")[0].text() for view in views] == [view.title for view in result.views]
    for view, shown in zip(result.views, views):
        values = result.arrays[view.array].values  # [batch, layer, head]
        blocks = shown.find_all("div", "example-heat")
        assert [block.attrs["data-example"] for block in blocks] == ["0", "1", "2"]
        assert ["hidden" in block.attrs for block in blocks] == [False, True, True]
        for b, block in enumerate(blocks):
            table = block.find_all("table", "heat")[0]
            assert [th.text() for th in table.find_all("thead")[0].find_all("th")] == [
                "layer \\ head", *map(str, range(values.shape[2]))]
            rows = table.find_all("tbody")[0].find_all("tr")
            assert [row.find_all("th")[0].text() for row in rows] == [str(layer) for layer in range(values.shape[1])]
            low, high = values[b].min(), values[b].max()
            for layer, row in enumerate(rows):
                cells = row.find_all("td")
                assert [cell.text() for cell in cells] == [f"{value:.4g}" for value in values[b, layer]]
                levels = [int(name[1:]) for cell in cells for name in cell.classes() if re.fullmatch(r"h\d+", name)]
                assert levels == [round((value - low) / (high - low) * 10) for value in values[b, layer]]
    # not a list of layers × heads rows: the script draws nothing for these views, and their arrays stay out
    data = next(s for s in Page(page).data_block()["sections"] if s["key"] == "attention_entropy")
    assert data["views"] == [] and data["arrays"] == {}
    assert 'data-section="attention_entropy"' not in page


def test_the_notebook_shows_the_page_itself_in_a_sandboxed_iframe(several: Report) -> None:
    html = several._repr_html_()
    assert len(several.page()) <= INLINE_MAX_BYTES
    tree = parse_tree(html)
    assert [child.tag for child in tree.children if isinstance(child, Element)] == ["iframe"]
    frame = tree.children[[isinstance(child, Element) for child in tree.children].index(True)]
    assert frame.attrs["srcdoc"] == several.page().decode("utf-8")  # decoded by the browser to exactly the page
    assert frame.attrs["sandbox"] == "allow-scripts"  # its scripts run in an opaque origin, cut off the notebook
    assert frame.attrs["title"] == "Report: 3 texts"
    hostile = payload_report()  # tokens that close attributes and elements, raw in the page's data-* attributes
    tree = parse_tree(hostile._repr_html_())
    assert [child.tag for child in tree.children if isinstance(child, Element)] == ["iframe"]
    assert tree.find_all("iframe")[0].attrs["srcdoc"] == hostile.page().decode("utf-8")


def test_above_the_limit_the_notebook_gets_a_compact_summary(several: Report) -> None:
    html = notebook_html(several, several.page(), limit=1000)
    tree = parse_tree(html)
    assert tree.find_all("iframe") == [] and tree.find_all("script") == [] and tree.find_all("b") == []
    text = tree.text()
    assert f"The page is {len(several.page()) / 1e6:.1f} MB, above the 0.0 MB a notebook shows inline" in text
    assert 'report.render("reports/report.html")' in text
    rows = tree.find_all("table", "overview")[0].find_all("tbody")[0].find_all("tr")
    page_rows = tree_of(several).find_all("table", "overview")[0].find_all("tbody")[0].find_all("tr")
    assert [row.text() for row in rows] == [row.text() for row in page_rows]  # the overview, without its script
    assert all("tabindex" not in row.attrs for row in rows)
    assert IDS_SHOWN[1] in rows[1].text()
