"""The report in headless Chromium, offline: it renders, logs no error, requests nothing, runs no payload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_cases import PAYLOADS, payload_report
from report_chromium import Chromium, Page

from interpret.reading.text import printable

pytestmark = pytest.mark.browser

LABEL_LIMIT = 40  # report_draw.js: the longest token label drawn whole


def shown(token: str) -> str:
    """Return a token as the page labels it when the data has no display form: escaped, cut with an ellipsis."""
    text = printable(token)
    return text if len(text) <= LABEL_LIMIT else text[: LABEL_LIMIT - 1] + "…"
CHANGE_EXAMPLE = (
    "(() => {{ const p = document.getElementById('example-picker'); p.value = '{}';"
    " p.dispatchEvent(new Event('change')); }})()"
)



def test_report_renders_offline_with_no_error_request_or_payload(browser: Chromium, tmp_path: Path) -> None:
    path = payload_report(signed=True).render(tmp_path / "audit.html")
    url = path.resolve().as_uri()
    page = browser.open_page()
    page.navigate(url)
    page.wait_until("document.documentElement.getAttribute('data-report-ready') === '1'")

    check_every_view_drew(page)
    check_interactions(page)

    # The payloads display literally, as text, in our token strip and in bertviz's SVG (control characters
    # escaped, cut to 40 characters), and whole on hover.
    strip = page.evaluate("[...document.querySelector('.strip').children].map(t => t.textContent)")
    titles = page.evaluate("[...document.querySelector('.strip').children].map(t => t.title)")
    bertviz = page.evaluate("[...document.querySelectorAll('#bertviz-head svg text')].map(t => t.textContent)")
    for payload in PAYLOADS:
        assert shown(payload) in strip and shown(payload) in bertviz
        assert any(title.startswith(printable(payload) + " [") for title in titles)

    shot = page.screenshot(tmp_path / "report.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

    # Nothing ran, nothing was injected, nothing went out, nothing complained.
    assert page.evaluate("typeof window.__pwned") == "undefined"
    injected = page.evaluate(
        "[...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on')))"
        ".map(e => e.outerHTML.slice(0, 80))"
    )
    assert injected == []
    assert page.evaluate("document.querySelectorAll('img, iframe, object, embed, script[src]').length") == 0
    assert page.errors() == [], json.dumps(page.errors(), indent=1)
    assert page.requests() == [url]


def check_every_view_drew(page: Page) -> None:
    """Heatmaps and head maps on canvases, the head grid's thumbnails, strips, lines and the table."""
    counts = page.evaluate(
        "({views: document.querySelectorAll('.view').length,"
        " canvases: document.querySelectorAll('canvas.matrix').length,"
        " thumbs: document.querySelectorAll('button.thumb').length,"
        " strips: document.querySelectorAll('.strip').length,"
        " lines: document.querySelectorAll('svg.line polyline').length,"
        " rows: document.querySelectorAll('table.sortable tbody tr').length,"
        " diverging: [...document.querySelectorAll('.legend')].some(l => l.textContent.includes('diverging')),"
        " failed: [...document.querySelectorAll('.view .body > p.muted')].map(p => p.textContent)})"
    )
    assert counts["failed"] == [] and counts["views"] == 6 + 4
    assert counts["thumbs"] == 2 * 4 and counts["strips"] == 3 and counts["lines"] >= 2
    assert counts["canvases"] >= 3 and counts["rows"] == 2 and counts["diverging"]
    assert page.evaluate("document.querySelector('[role=alert]').textContent").count("signed_demo") == 1


def check_interactions(page: Page) -> None:
    """Enlarge a head, sort the table, open bertviz's views, switch examples."""
    page.evaluate("document.querySelectorAll('button.thumb')[5].click()")
    assert page.evaluate("document.querySelector('.detail h4').textContent") == "Layer 1 · head 1"

    values = "[...document.querySelectorAll('table.sortable tbody tr td.num')].map(td => Number(td.textContent))"
    assert page.evaluate(values) == sorted(page.evaluate(values), reverse=True)
    page.evaluate("[...document.querySelectorAll('table.sortable th button')].pop().click()")
    assert page.evaluate(values) == sorted(page.evaluate(values))

    page.evaluate("document.querySelectorAll('details.bertviz-view').forEach(d => { d.open = true; })")
    page.wait_until("document.querySelectorAll('#bertviz-head svg text').length > 0 &&"
                    " document.querySelectorAll('#bertviz-model svg line').length > 0")

    page.evaluate(CHANGE_EXAMPLE.format(1))
    assert page.evaluate("document.querySelector('.example-summary[data-example=\"0\"]').hidden") is True
    assert "dog" in page.evaluate("document.querySelector('.strip').textContent")
    page.evaluate(CHANGE_EXAMPLE.format(0))
    assert page.evaluate("document.querySelector('.example-summary[data-example=\"1\"]').hidden") is True
