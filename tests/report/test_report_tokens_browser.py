"""Odd tokens in headless Chromium: a 6,000-character token is cut and fits the viewport, a right-to-left override
stays inside its own token, display forms replace raw tokens (raw on hover), colours start at 0, ordinals read."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from report_cases import WORDS, trace_of
from report_chromium import Chromium, Page

from interpret.analysis.result import AnalyzerResult, NamedArray, View
from interpret.analysis.result import Readout
from interpret.reading.text import display_tokens, printable
from interpret.report import Report, RunInfo, build_report

pytestmark = pytest.mark.browser

LABEL_LIMIT = 40
LONG = "supercalifragilistic" * 300  # one token of 6,000 characters
RLO = "\u202eevil"  # a right-to-left override: everything after it on its line would read backwards
TOKENS = ("Ġthe", LONG, RLO, "Ġcat", ".", "Ġsat", ".")  # byte-level BPE spellings; "." twice
# The flat readout: every value between 0.699 and 0.709, the long, RLO and both "." tokens on top.
FLAT = (0.699, 0.709, 0.708, 0.701, 0.707, 0.700, 0.706)
SIGNED = (-0.2, 0.5, 0.1, -0.1, 0.3, 0.0, 0.2)
READY = "document.documentElement.getAttribute('data-report-ready') === '1'"


def shown(token: str) -> str:
    text = printable(token)
    return text if len(text) <= LABEL_LIMIT else text[: LABEL_LIMIT - 1] + "…"


def odd_report(scheme: str | None = None, signed_readout: bool = False) -> Report:
    """Return a report of one made-up result whose readout (declared signed if `signed_readout`, though every score is
    positive) and signed arrays are drawn as token strips."""
    trace = trace_of([" ".join(WORDS[: len(TOKENS)]), "a dog ran"], TOKENS)
    batch, pos = trace.encoded.batch, trace.encoded.pos
    flat = np.full((batch, pos), 0.7)
    signed = np.zeros((batch, pos))
    flat[0, 1 : 1 + len(TOKENS)] = FLAT
    signed[0, 1 : 1 + len(TOKENS)] = SIGNED
    result = AnalyzerResult(
        analyzer="flat_demo", version="0", params={},
        arrays={"readout": NamedArray(flat, ("batch", "key")), "signed": NamedArray(signed, ("batch", "pos"))},
        views=(
            View("token_strip", "readout", "Flat readout"),
            View("token_strip", "signed", "Signed scores"),
            View("table", "signed", "Signed scores, sortable"),
        ),
        readout_of=Readout("readout", signed=signed_readout),
    )
    if scheme is not None:  # the tokens as a byte-level BPE tokenizer writes them: the report shows their words
        trace = dataclasses.replace(trace, encoded=dataclasses.replace(trace.encoded, scheme=scheme))
    return build_report(trace, [result], RunInfo.from_trace(trace, seed=0), top_k=5)



def open_report(browser: Chromium, path: Path, *, scripts: bool = True) -> Page:
    page = browser.open_page()
    if not scripts:
        page.call("Emulation.setScriptExecutionDisabled", {"value": True})
    page.navigate(path.resolve().as_uri())
    if scripts:
        page.wait_until(READY)
    return page


def view_strip(page: Page, title: str, what: str) -> Any:
    """Return `what` (a JS expression over `chips`, the strip's token elements) in the view with this title."""
    return page.evaluate(
        "(() => { const view = [...document.querySelectorAll('.view')].find(v => v.querySelector('h3').textContent"
        f" === {json.dumps(title)}); const chips = [...view.querySelectorAll('.strip .t')]; return {what}; }})()"
    )


SUMMARY_CHIPS = (
    "[...document.querySelectorAll('.example-summary[data-example=\"0\"] .chip')].map(chip => {"
    " const box = e => e.getBoundingClientRect();"
    " const tok = chip.querySelector('.tok'), pos = chip.querySelector('.pos'), val = chip.querySelector('.val');"
    " const digits = []; const range = document.createRange();"
    " for (let i = 0; i < val.firstChild.length; i++) { range.setStart(val.firstChild, i); range.setEnd(val.firstChild, i + 1);"
    "   digits.push(range.getBoundingClientRect().left); }"
    " return {text: tok.textContent, title: tok.title, pos: pos.textContent, tag: tok.tagName,"
    " left: box(chip).left, top: box(chip).top, tokLeft: box(tok).left, tokRight: box(tok).right, tokWidth: box(tok).width,"
    " posLeft: box(pos).left, valLeft: box(val).left, digits: digits}; })"
)


def check_in_reading_order(chips: list[dict[str, Any]]) -> None:
    """Chips sit left to right (row by row) in DOM order; inside each, token, position, value, digits in order."""
    places = [(round(chip["top"]), chip["left"]) for chip in chips]
    assert places == sorted(places), places
    for chip in chips:
        assert chip["tokRight"] <= chip["posLeft"] + 0.5 <= chip["valLeft"] + 0.5, chip["text"]
        assert chip["digits"] == sorted(chip["digits"]), chip["text"]


def check_fits(page: Page) -> None:
    sizes = page.evaluate(
        "({inner: window.innerWidth, doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,"
        " widest: Math.max(...[...document.querySelectorAll('.chip, .strip .t, .strip, .summary, .view')]"
        ".map(e => e.getBoundingClientRect().right))})"
    )
    assert sizes["doc"] <= sizes["inner"] and sizes["body"] <= sizes["inner"], sizes
    assert sizes["widest"] <= sizes["inner"], sizes


def test_odd_tokens_are_cut_isolated_and_fit(browser: Chromium, tmp_path: Path) -> None:
    page = open_report(browser, odd_report().render(tmp_path / "odd.html"))
    check_fits(page)

    # The strip: the long token cut to 40 characters, the RLO escaped; whole raw tokens on hover.
    texts = view_strip(page, "Flat readout", "chips.map(c => c.textContent)")
    titles = view_strip(page, "Flat readout", "chips.map(c => c.title)")
    assert texts == ["[CLS]", *(shown(token) for token in TOKENS), "[SEP]"]
    assert len(texts[2]) == LABEL_LIMIT and texts[2].endswith("…") and texts[3] == "\\u202eevil"
    assert titles[2].startswith(LONG + " [2]: ") and titles[3].startswith("\\u202eevil [3]: ")
    boxes = view_strip(page, "Flat readout", "chips.map(c => [Math.round(c.getBoundingClientRect().top), c.getBoundingClientRect().left])")
    assert boxes == sorted(boxes)

    # The table: each token cell an isolated <bdi>, cut, with the raw token on hover and its position after it.
    cells = page.evaluate(
        "[...document.querySelectorAll('table.sortable tbody tr')].map(tr => { const bdi = tr.querySelector('td bdi');"
        " return [bdi.textContent, bdi.title, tr.cells[0].textContent]; })"
    )
    by_position = {int(cell[2].rsplit("[", 1)[1].rstrip("]")): cell for cell in cells}
    assert by_position[2] == [shown(LONG), LONG, shown(LONG) + " [2]"]
    assert by_position[3] == ["\\u202eevil", "\\u202eevil", "\\u202eevil [3]"]

    # The summary: top tokens with their positions (the two "." apart), cut, isolated, in reading order.
    chips = page.evaluate(SUMMARY_CHIPS)
    assert [(chip["text"], chip["pos"]) for chip in chips] == [
        (shown(LONG), " [2]"), ("\\u202eevil", " [3]"), (".", " [5]"), (".", " [7]"), ("Ġcat", " [4]"),
    ]
    assert chips[0]["title"] == LONG and chips[1]["title"] == "\\u202eevil" and chips[0]["tag"] == "BDI"
    check_in_reading_order(chips)
    assert page.errors() == [], json.dumps(page.errors(), indent=1)


def test_without_scripts_the_css_alone_cuts_and_isolates_summary_tokens(browser: Chromium, tmp_path: Path) -> None:
    page = open_report(browser, odd_report().render(tmp_path / "odd.html"), scripts=False)
    assert page.evaluate("document.documentElement.getAttribute('data-report-ready')") is None  # no script ran
    check_fits(page)
    chips = page.evaluate(SUMMARY_CHIPS)
    # The summary is written with each token's display form (here a plain scheme: control characters escaped)
    assert [chip["text"] for chip in chips] == [LONG, "\\u202eevil", ".", ".", "Ġcat"]
    assert chips[0]["tokWidth"] < 600  # cut by CSS at 40ch, with an ellipsis
    check_in_reading_order(chips)  # the override in chip 2 reorders neither its own value nor the chips after it


def test_display_forms_label_tokens_and_raw_tokens_show_on_hover(browser: Chromium, tmp_path: Path) -> None:
    report = odd_report("byte_bpe")
    assert report.examples[0].display == tuple(display_tokens(report.examples[0].tokens, "byte_bpe"))
    page = open_report(browser, report.render(tmp_path / "display.html"))
    texts = view_strip(page, "Flat readout", "chips.map(c => c.textContent)")
    titles = view_strip(page, "Flat readout", "chips.map(c => c.title)")
    assert texts == ["[CLS]", "the", shown(LONG), "\\u202eevil", "cat", ".", "sat", ".", "[SEP]"]
    assert titles[1].startswith("Ġthe [1]: ") and titles[4].startswith("Ġcat [4]: ")
    chips = page.evaluate(SUMMARY_CHIPS)
    assert [(chip["text"], chip["title"]) for chip in chips][-1] == ("cat", "Ġcat")
    check_in_reading_order(chips)
    assert page.errors() == [], json.dumps(page.errors(), indent=1)


def rgb(css: str) -> tuple[int, ...]:
    return tuple(int(part) for part in css[css.index("(") + 1 : -1].split(","))


def test_colours_start_at_zero_and_min_max_is_a_toggle(browser: Chromium, tmp_path: Path) -> None:
    page = open_report(browser, odd_report().render(tmp_path / "colours.html"))
    plain = slice(1, 1 + len(TOKENS))

    def strip_state(title: str) -> tuple[list[tuple[int, ...]], list[str]]:
        colours = view_strip(page, title, "chips.map(c => getComputedStyle(c).backgroundColor)")
        legend = view_strip(page, title, "[...chips[0].closest('.body').querySelector('.legend').children].map(e => e.textContent)")
        return [rgb(colour) for colour in colours[plain]], legend

    # Default: 0 → max. Values 0.699–0.709 sit together at the top of the scale: no false contrast.
    colours, legend = strip_state("Flat readout")
    spread = max(max(c[i] for c in colours) - min(c[i] for c in colours) for i in range(3))
    assert spread <= 6, colours
    assert legend[0] == "0" and legend[2] == "0.709" and "values 0.699 to 0.709" in legend  # [1] is the ramp
    assert legend[-1].startswith("colours 0 → maximum")

    # The toggle: min → max stretches the same row over the whole ramp, and the legend says so.
    choose(page, "Flat readout", "range")
    colours, legend = strip_state("Flat readout")
    spread = max(max(c[i] for c in colours) - min(c[i] for c in colours) for i in range(3))
    assert spread >= 150, colours
    assert legend[0] == "0.699" and legend[2] == "0.709" and legend[-1].startswith("colours minimum → maximum")

    # Signed values: symmetric around 0 by default, so only the largest |value| (0.5) takes an end colour;
    # min → max stretches each side to its own extreme, so -0.2 takes the negative end too.
    colours, legend = strip_state("Signed scores")
    by_value = dict(zip(SIGNED, colours))
    assert legend[0] == "-0.5" and legend[2] == "0.5" and "values -0.2 to 0.5" in legend
    assert by_value[0.0] == (247, 247, 247) and by_value[0.5] == POSITIVE_END and by_value[-0.2] != NEGATIVE_END
    assert sum(by_value[-0.2]) < sum(by_value[-0.1]) < sum(by_value[0.0])  # deeper with |value|
    choose(page, "Signed scores", "range")
    colours, legend = strip_state("Signed scores")
    by_value = dict(zip(SIGNED, colours))
    assert legend[0] == "-0.2" and legend[2] == "0.5"
    assert by_value[-0.2] == NEGATIVE_END and by_value[0.5] == POSITIVE_END
    assert page.errors() == []


POSITIVE_END, NEGATIVE_END = (178, 24, 43), (33, 102, 172)  # report_draw.js: the diverging map's two ends


def test_a_signed_methods_scores_diverge_from_zero_even_when_all_positive(browser: Chromium, tmp_path: Path) -> None:
    # Integrated Gradients' token view once switched to a blue 0 → max scale when every score was positive,
    # against the section's "red for, blue against" legend: a signed method's scores always diverge around 0.
    page = open_report(browser, odd_report(signed_readout=True).render(tmp_path / "signed.html"))
    colours = view_strip(page, "Flat readout", "chips.map(c => getComputedStyle(c).backgroundColor)")
    legend = view_strip(page, "Flat readout", "[...chips[0].closest('.body').querySelector('.legend').children].map(e => e.textContent)")
    by_value = dict(zip(FLAT, [rgb(colour) for colour in colours[1 : 1 + len(TOKENS)]]))
    assert legend[0] == "-0.709" and legend[2] == "0.709" and legend[-1].startswith("colours diverging around 0")
    assert by_value[0.709] == POSITIVE_END and all(c[0] > c[2] for c in by_value.values())  # red: for the decision
    assert page.errors() == []


def choose(page: Page, title: str, mode: str) -> None:
    """Pick a colour mode in the view with this title, as a person would."""
    page.evaluate(
        "(() => { const view = [...document.querySelectorAll('.view')].find(v => v.querySelector('h3').textContent"
        f" === {json.dumps(title)}); const select = view.querySelector('select.scale'); select.value = {json.dumps(mode)};"
        " select.dispatchEvent(new Event('change')); })()"
    )


def test_ordinals_and_escapes_match_python(browser: Chromium, tmp_path: Path) -> None:
    page = open_report(browser, odd_report().render(tmp_path / "ordinals.html"))
    numbers = list(range(1, 130)) + [1001, 1011, 1012, 1013, 1021]
    expected = [f"{n}{'th' if n % 100 in (11, 12, 13) else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}" for n in numbers]
    assert page.evaluate(f"{json.dumps(numbers)}.map(AuditDraw.ordinal)") == expected
    assert expected[:4] == ["1st", "2nd", "3rd", "4th"] and "every 2nd" == f"every {expected[1]}"
    # The page's escaping (visible) is interpret.reading.text.printable, character for character.
    samples = ["".join(chr(c) for c in range(start, start + 256)) for start in range(0, 0x3000, 256)]
    samples += ["a\ud800b", "\udfffz", "😀\u200d👍", "\u202e\u2066x\u2069\u202c", "tab\tnl\ncr\r"]
    assert page.evaluate(f"{json.dumps(samples)}.map(AuditDraw.visible)") == [printable(s) for s in samples]
