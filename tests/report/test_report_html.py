"""The HTML page: offline (no remote URL), one JSON block that carries hostile tokens intact, hashed CSP."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest
from report_cases import PAYLOADS, Page, payload_report, report_of, trace_of

from interpret.report import assets
from interpret.report.render import TEMPLATE, TEMPLATES, script_json

REMOTE = re.compile(r"^\s*(https?:|//)", re.IGNORECASE)
CSS_URL = re.compile(r"url\(\s*['\"]?\s*([^'\")\s]*)", re.IGNORECASE)


@pytest.fixture(scope="module")
def payload_html(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = payload_report().render(tmp_path_factory.mktemp("report") / "payload.html")
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def page(payload_html: str) -> Page:
    return Page(payload_html)


def test_nothing_points_at_the_network(page: Page, payload_html: str) -> None:
    for tag, attrs in page.tags:
        for name in ("src", "href", "action", "formaction", "poster", "data", "srcset"):
            value = attrs.get(name)
            assert value is None or not REMOTE.match(value), f"<{tag} {name}={value!r}> points at the network"
        assert "style" not in attrs, f"<{tag}> has an inline style attribute, which the CSP would block"
    for css in page.styles + [attrs.get("style") or "" for _, attrs in page.tags]:
        for target in CSS_URL.findall(css):
            assert not REMOTE.match(target), f"CSS url({target}) points at the network"
    assert "cdnjs" not in payload_html and "require.min.js" not in payload_html


def test_script_elements_are_exactly_the_templates(page: Page) -> None:
    template = (TEMPLATES / TEMPLATE).read_text(encoding="utf-8")
    assert len(page.scripts) == len(re.findall(r"<script\b", template, re.IGNORECASE))
    assert all("src" not in attrs for attrs, _ in page.scripts)
    assert [attrs.get("data-bertviz") for attrs, _ in page.scripts if attrs.get("data-bertviz")] == ["head", "model"]


def test_payload_tokens_round_trip_through_the_json_block(page: Page) -> None:
    data = page.data_block()
    tokens = data["examples"][0]["tokens"]
    for payload in PAYLOADS:
        assert payload in tokens, f"{payload!r} did not survive the JSON block"
    raw = page.raw_data_block()
    for forbidden in ("<", ">", "&", "\u2028", "\u2029"):
        assert forbidden not in raw


def test_payload_tokens_create_no_element(page: Page) -> None:
    plain = Page(report_of(trace_of(["the cat sat on mat a dog", "a dog ran"])).page().decode("utf-8"))
    assert sorted({tag for tag, _ in page.tags}) == sorted({tag for tag, _ in plain.tags})
    assert len(page.tags) == len(plain.tags)
    for tag, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs), f"<{tag}> carries an event handler {attrs}"
    # The summary shows the tokens as text: html.parser hands back exactly the payload characters.
    text = "".join(page.text)
    for payload in ('<img src=x onerror="window.__pwned=1">', "&amp;", "<!--"):
        assert payload in text


def test_csp_allows_exactly_the_inline_scripts_and_style(page: Page) -> None:
    csp = page.csp()
    directives = dict(part.strip().split(" ", 1) for part in csp.split(";") if " " in part.strip())
    assert directives["default-src"] == "'none'" and directives["connect-src"] == "'none'"
    assert directives["img-src"] == "data:" and "unsafe-inline" not in csp and "http" not in csp
    executable = [body for attrs, body in page.scripts if attrs.get("type") != "application/json"]
    hashes = {
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'" for body in executable
    }
    assert set(directives["script-src"].split()) == hashes
    assert directives["style-src"] == assets.csp_hash(page.styles[0])


def test_script_json_escapes_every_dangerous_sequence() -> None:
    data = {"t": ["</script>", "<!--", "a&b", "\u2028\u2029", "é", "\ud800"]}
    text = str(script_json(data))
    assert re.search(r"</script|<!--|[<>&\u2028\u2029]", text, re.IGNORECASE) is None
    assert json.loads(text)["t"][:5] == data["t"][:5]
    text.encode("utf-8")  # lone surrogates are escaped, so the page can be written as UTF-8


def test_page_script_never_writes_html() -> None:
    source = "".join((assets.STATIC / name).read_text() for name in (*assets.PAGE_SCRIPTS, "bertviz_shim.js"))
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in source


def test_bertviz_feeds_on_the_json_block_and_renders_tokens_as_text() -> None:
    for view in assets.BERTVIZ_VIEWS:
        source = assets.bertviz_view(view)
        assert "PYTHON_PARAMS;" not in source and f'window.AUDIT_BERTVIZ.params("{view}")' in source
        assert "require.config(" not in source and "cdnjs" not in source
        # bertviz draws tokens with d3's .text() (textContent); a switch to .html() would need escaped tokens.
        assert ".html(" not in source and "innerHTML" not in source


def test_summary_lists_decision_top_tokens_and_checks(page: Page) -> None:
    text = " ".join("".join(page.text).split())
    decision = payload_report().run.decisions[0]
    assert f"Prediction{decision.predicted} (probability {decision.predicted_probability:.4g})" in text
    assert f"Explaining{decision.target.label} (probability {decision.probability:.4g}) · the prediction" in text
    assert "[CLS]" not in text.split("Invariant checks")[0].split("special tokens excluded)")[1]
    for name in ("readout_sum_error", "row_sum_error", "capacity_row_sum_error", "flow_bound_excess", "pattern_row_sum_error"):
        assert name in text
    assert "OUT OF TOLERANCE" not in text and not any(attrs.get("role") == "alert" for _, attrs in page.tags)


def test_failed_check_shows_a_warning(tmp_path: Path) -> None:
    import dataclasses

    from interpret.analysis.result import Check

    report = payload_report()
    rollout = report.sections[0]
    broken = dataclasses.replace(rollout.result, checks={"row_sum_error": Check(0.25, 1e-6, "largest |row sum − 1|")})
    sections = (dataclasses.replace(rollout, result=broken),) + report.sections[1:]
    page = Page(dataclasses.replace(report, sections=sections).page().decode())
    alerts = [attrs for _, attrs in page.tags if attrs.get("role") == "alert"]
    assert len(alerts) == 1
    assert "1 invariant check out of tolerance" in " ".join("".join(page.text).split())
    assert "OUT OF TOLERANCE" in "".join(page.text)


def test_examples_get_a_picker_and_one_summary_each(page: Page) -> None:
    assert any(tag == "select" and attrs.get("id") == "example-picker" for tag, attrs in page.tags)
    blocks = [attrs for _, attrs in page.tags if attrs.get("class") == "example-summary"]
    assert [b["data-example"] for b in blocks] == ["0", "1"]
    assert "hidden" not in blocks[0] and "hidden" in blocks[1]


def test_each_example_shows_its_own_decision_target_and_gold_as_plain_text() -> None:
    import dataclasses

    from interpret.decision.decide import Decision
    from interpret.target import Target

    report = payload_report()
    decisions = (
        Decision(Target("class", (0,), (), ("<b>yes</b>",), pooling=((0, 1.0),)), "<b>yes</b>", 0, 0.9, 0.9, "<b>yes</b>", 0),
        Decision(Target("class", (0,), (), ("yes",), source="given", pooling=((0, 1.0),)), "no", 1, 0.6, 0.4, "yes", 0),
    )
    notes = (("Decision head", "<i>a demonstration</i>"),)
    run = dataclasses.replace(report.run, decisions=decisions, notes=notes)
    page = Page(dataclasses.replace(report, run=run).page().decode())
    text = " ".join("".join(page.text).split())
    assert "Prediction<b>yes</b> (probability 0.9) Explaining<b>yes</b> (probability 0.9) · the prediction" in text
    assert "Gold label<b>yes</b> · prediction correct" in text
    assert "Predictionno (probability 0.6) Explainingyes (probability 0.4) · asked for" in text
    assert "Gold labelyes · prediction wrong" in text
    assert "Decision head<i>a demonstration</i>" in text
    assert not any(tag in ("b", "i") for tag, _ in page.tags)


def test_an_asset_that_could_close_its_element_is_refused() -> None:
    from interpret.errors import ReportError

    for text in ("var a = '</script>';", "x = 1; <!-- y", "p { } </STYLE>"):
        with pytest.raises(ReportError, match="cannot be inlined safely"):
            assets.checked("bad.js", text)


def test_without_bertviz_the_page_leaves_its_scripts_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "has_bertviz", lambda: False)
    page = Page(payload_report().page().decode())
    assert len(page.scripts) == 1 + len(assets.PAGE_SCRIPTS)
    assert page.data_block()["bertviz"] is None
    assert "bertviz is not installed" in "".join(page.text)
