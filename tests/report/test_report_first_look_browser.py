"""The first look in headless Chromium, offline: the overview of several texts selects a text by mouse and by
keyboard, attention entropy's heat tables are coloured and follow the selected text, numbers never break across
lines in a notebook-narrow page, and the report inside a notebook (`_repr_html_`) draws in a sandboxed frame that
cannot reach the notebook."""

from __future__ import annotations

import base64
import json
import os
import time
import shutil
from pathlib import Path

import pytest
from report_cases import explained, payload_report
from report_chromium import Chromium, Page

from interpret.report import Report

pytestmark = pytest.mark.browser

TEXTS = ["the cat sat on the mat", "a dog saw a big cat", "the small dog ran"]
READY = "document.documentElement.getAttribute('data-report-ready') === '1'"
SHOWN = "[...document.querySelectorAll('{}')].map(block => !block.hidden)"
SELECTED = "[...document.querySelectorAll('table.overview tbody tr')].map(row => row.classList.contains('selected'))"
SCREENSHOTS = "INTERPRET_SCREENSHOTS"  # a folder to keep each test's screenshot in, for a person to look at


@pytest.fixture(scope="module")
def several() -> Report:
    return explained(TEXTS, ids=["r1", "<b>r2</b>\u202e", "r3"])


def opened(browser: Chromium, report: Report, path: Path, width: int = 1280) -> tuple[Page, str]:
    """Return a tab showing the rendered report, once its script has run, and the page's URL."""
    url = report.render(path).resolve().as_uri()
    page = browser.open_page(width=width)
    page.navigate(url)
    page.wait_until(READY)
    return page, url


def keep(shot: Path) -> None:
    """Check a screenshot is a real PNG of a drawn page; copy it to $INTERPRET_SCREENSHOTS when that is set."""
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    folder = os.environ.get(SCREENSHOTS)
    if folder:
        shutil.copy(shot, Path(folder) / shot.name)


def click(page: Page, selector: str) -> None:
    """Click the middle of the element `selector` with the mouse, as a person would."""
    box = page.evaluate(
        f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
        " const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()"
    )
    for kind in ("mousePressed", "mouseReleased"):
        page.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})


def press(page: Page, key: str, code: int) -> None:
    """Press and release one key on the focused element."""
    for kind in ("keyDown", "keyUp"):
        page.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code})


def test_the_overview_selects_a_text_by_mouse_and_keyboard(browser: Chromium, several: Report, tmp_path: Path) -> None:
    page, url = opened(browser, several, tmp_path / "overview.html")
    assert page.evaluate("document.querySelector('main > section').id") == "overview"
    assert page.evaluate(SELECTED) == [True, False, False]
    shot = page.screenshot(tmp_path / "first-look-overview.png")
    keep(shot)
    page.call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1,
                                                      "mobile": False})

    click(page, "table.overview tbody tr[data-example='2'] td.excerpt")
    assert page.evaluate(SELECTED) == [False, False, True]
    assert page.evaluate(SHOWN.format("#summary > .example-summary")) == [False, False, True]
    assert page.evaluate("document.querySelector('.example-summary:not([hidden]) .input-text').textContent") == TEXTS[2]
    assert page.evaluate("document.getElementById('example-picker').value") == "2"
    heat = page.evaluate("[...document.querySelectorAll('.example-heat:not([hidden])')].map(b => b.dataset.example)")
    assert heat and set(heat) == {"2"}  # each heat map shows the selected text's grid
    assert abs(page.evaluate("document.getElementById('summary').getBoundingClientRect().top")) < 2

    page.evaluate("document.querySelector(\"table.overview tbody tr[data-example='1']\").focus()")
    press(page, "Enter", 13)
    assert page.evaluate(SELECTED) == [False, True, False]
    assert page.evaluate(SHOWN.format("#summary > .example-summary")) == [False, True, False]
    assert page.evaluate("document.querySelector('.example-summary:not([hidden]) .input-text').textContent") == TEXTS[1]

    # the id's markup is text, its right-to-left override shown escaped
    assert page.evaluate("document.querySelector('table.overview tbody tr[data-example=\"1\"] td bdi').textContent") \
        == "<b>r2</b>\\u202e"
    assert page.evaluate("document.querySelectorAll('table.overview b').length") == 0
    assert page.errors() == [], json.dumps(page.errors(), indent=1)
    assert page.requests() == [url]


def test_heat_tables_are_coloured_by_the_report_stylesheet(browser: Chromium, several: Report, tmp_path: Path) -> None:
    page, _ = opened(browser, several, tmp_path / "heat.html")
    colours = page.evaluate(
        "(() => { const cells = [...document.querySelectorAll('#sec-attention_entropy .example-heat:not([hidden]) td')];"
        " const of = level => cells.filter(c => c.classList.contains('h' + level))"
        ".map(c => getComputedStyle(c).backgroundColor); return [of(0), of(10), cells.length]; })()"
    )
    low, high, count = colours
    assert count > 0 and low and high  # every grid has its minimum and its maximum
    assert set(low) == {"rgb(255, 255, 255)"} and set(high) == {"rgb(105, 155, 255)"}
    keep(page.screenshot(tmp_path / "first-look-entropy-heat.png"))
    assert page.errors() == []


def test_numbers_stay_on_one_line_in_a_narrow_page(browser: Chromium, several: Report, tmp_path: Path) -> None:
    page, _ = opened(browser, several, tmp_path / "narrow.html", width=420)
    lines = page.evaluate(
        "[...document.querySelectorAll('td.num, .verdict .num')].filter(e => e.offsetParent !== null && e.textContent"
        ".trim()).map(e => { const r = document.createRange(); r.selectNodeContents(e);"
        " return [e.textContent.trim(), new Set([...r.getClientRects()].map(b => Math.round(b.top))).size]; })"
    )
    assert len(lines) > 20 and any(" ± " in text for text, _ in lines)  # the evidence's mean ± sd among them
    assert [text for text, count in lines if count != 1] == []


def test_the_notebook_draws_the_page_in_a_frame_cut_off_the_notebook(browser: Chromium, tmp_path: Path) -> None:
    report = payload_report(signed=True)  # tokens that close attributes and elements, and try to run scripts
    host = tmp_path / "notebook.html"  # the cell output as a notebook holds it, in a page of its own
    host.write_text("<!DOCTYPE html><html><head><title>notebook</title></head><body><div class='output'>"
                    + report._repr_html_() + "</div></body></html>", encoding="utf-8")
    page = browser.open_page()
    page.attach_frames()
    page.call("Page.navigate", {"url": host.resolve().as_uri()})
    frame = page.frame()  # the sandboxed frame runs in a process of its own
    browser.wait_for("Page.loadEventFired", page.session)
    frame.wait_until(READY)
    assert frame.evaluate("location.href") == "about:srcdoc"
    assert frame.evaluate("document.querySelectorAll('.view').length") >= 5  # the script drew the views
    assert frame.evaluate("document.querySelector('h1').textContent") == "Report: 2 texts"
    denied = "(() => {{ try {{ {}; return 'allowed'; }} catch (error) {{ return error.name; }} }})()"
    assert frame.evaluate(denied.format("window.parent.document.title")) == "SecurityError"
    assert frame.evaluate(denied.format("document.cookie")) == "SecurityError"
    assert frame.evaluate(denied.format("localStorage.length")) == "SecurityError"
    assert frame.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert frame.errors() == [] and page.errors() == [], json.dumps(frame.errors() + page.errors(), indent=1)
    assert frame.requests() == []
    # The frame paints in its own process: capture the notebook's viewport as it is, once the frame has drawn.
    frame.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    shot, deadline = tmp_path / "first-look-notebook.png", time.monotonic() + 10
    while True:
        shot.write_bytes(base64.b64decode(page.call("Page.captureScreenshot", {"format": "png"})["data"]))
        if shot.stat().st_size > 20_000 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    keep(shot)
