"""Rendering: the report as one self-contained HTML page (jinja2, autoescape), written atomically.

Every value a template prints is user-controlled text at heart (texts, ids, labels, tokens, model and file
names), so the environment's `finalize` escapes the bidirectional controls in it (`shown`): a right-to-left
override in a label would otherwise reverse the rest of its line, or of an `<option>`, where no `<bdi>` can
isolate it. They are shown as `\\u202e`, as the terminal shows them (`interpret.reading.text.printable`) and as the
page's scripts do (`visible` in report_draw.js), so the reader sees that the text holds one; markup a filter
built (`join`) is escaped alike, and the JSON block stays the same data (`\\u202e` is a JSON escape). Only
`Kept` markup passes unchanged: the inline assets (their CSP hashes are of these texts) and the `data-*`
attributes the scripts compare with the raw tokens (the `data` filter; never displayed).

The page holds every asset inline and its data as one JSON block. A Content-Security-Policy meta tag forbids
any network access: scripts and the style run only when their sha256 hash (computed here, at render time)
matches, so an injected `<script>` or `onerror=` attribute would not run even if it slipped past escaping.
"""

from __future__ import annotations

import json
import logging
import os
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from interpret.decision.decide import Decision
from interpret.errors import ReportError
from interpret.files.atomic import atomic_path
import interpret.report.assets as assets
from interpret.report.evidence_view import evidence_view
from interpret.report.model import ReportData
from interpret.report.summary import (
    check_rows, failed_checks, lead_method, overview_rows, report_title, summary_tops, top_tokens,
)
from interpret.reading.text import BIDI_CONTROLS
from interpret.report.classes import comparison_view, section_word_blocks
from interpret.report.views import heat_maps, page_data
from interpret.runtime.versions import package_version

log = logging.getLogger("interpret")

TEMPLATES = Path(__file__).parent / "templates"
TEMPLATE = "report.html.j2"
DATA_ID = "report-data"
_CHUNK = 1 << 20

# Inside <script type="application/json"> the HTML parser ends the element at "</script" and treats "<!--"
# specially; JavaScript treats U+2028/U+2029 as line ends. Escaping these as \uXXXX keeps the JSON identical
# (JSON.parse reads them back) while none of those sequences can appear in the page. Lone surrogates cannot be
# written as UTF-8, so they are escaped too.
_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}
_JSON_ESCAPES.update({code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)})
_BIDI_ESCAPES = {ord(char): f"\\u{ord(char):04x}" for char in BIDI_CONTROLS}


class Kept(Markup):
    """Markup a template prints exactly as it is, bidi controls included (see the module docstring)."""


def shown(value: Any) -> Any:
    """Return a value as a template prints it (the environment's `finalize`): text and markup with their bidi
    controls escaped (`\\u202e`); numbers, None and `Kept` markup unchanged."""
    if value is None or isinstance(value, (int, float, Kept)):
        return value
    if hasattr(value, "__html__"):
        return Markup(str(value.__html__()).translate(_BIDI_ESCAPES))
    return str(value).translate(_BIDI_ESCAPES)


def data_attribute(value: Any) -> Kept:
    """Return a value escaped for an HTML attribute with its bidi controls kept (the `data` filter)."""
    return Kept(escape(str(value)))


def script_json(data: Any) -> Markup:
    """Return `data` as JSON that is safe as the text of a <script type="application/json"> element."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Markup(text.translate(_JSON_ESCAPES))


def content_security_policy(script_texts: list[str], style_texts: list[str]) -> str:
    """Return a CSP that allows only the given inline scripts and styles (by hash) and no network at all."""
    scripts = " ".join(assets.csp_hash(text) for text in script_texts)
    styles = " ".join(assets.csp_hash(text) for text in style_texts)
    return (
        f"default-src 'none'; script-src {scripts}; style-src {styles}; img-src data:; font-src 'none';"
        " connect-src 'none'; media-src 'none'; object-src 'none'; frame-src 'none'; worker-src 'none';"
        " manifest-src 'none'; base-uri 'none'; form-action 'none'"
    )


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shown,
    )
    env.filters["data"] = data_attribute
    env.filters["num"] = format_number
    env.filters["mb"] = megabytes
    return env


def example_decisions(report: ReportData) -> list[Decision | None]:
    """Return each example's Decision (`run.decisions`), None for an example without one."""
    given = report.run.decisions
    if len(given) != len(report.examples):
        return [None] * len(report.examples)
    return [decision if decision.target.kind != "none" else None for decision in given]


def format_number(value: Any) -> str:
    """Return a number with 4 significant digits ('NaN' / '—' for NaN / None)."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if value != value:
        return "NaN"
    return f"{value:.4g}"


def megabytes(size: int) -> str:
    """Return a byte count in MB (10^6) with one decimal."""
    return f"{size / 1e6:.1f}"


def render_page(report: ReportData) -> str:
    """Return the HTML page of the report (one string; every script, style and datum inline)."""
    has_attention = any(section.kind == "attention" for section in report.sections)
    with_bertviz = has_attention and assets.has_bertviz()
    data = page_data(report)
    if not with_bertviz:
        data["bertviz"] = None
    scripts = assets.scripts(with_bertviz)
    style = assets.style()
    by_name = {script.name: Kept(script.text) for script in scripts}
    tops = [top_tokens(report, b) for b in range(len(report.examples))]
    decisions = example_decisions(report)
    context = {
        "title": report_title(report),
        "csp": content_security_policy([script.text for script in scripts], [style]),
        "style": Kept(style),
        "scripts": by_name,
        "bertviz": with_bertviz,
        "bertviz_missing": has_attention and not with_bertviz,
        "bertviz_version": assets.bertviz_version(),
        "d3": assets.D3,
        "jquery": assets.JQUERY,
        "data_id": DATA_ID,
        "data_json": script_json(data),
        "run": report.run,
        "report": report,
        "sections": report.sections,
        "examples": report.examples,
        "tops": [summary_tops(report, b, top) for b, top in enumerate(tops)],
        "decisions": decisions,
        # several texts open on an overview, one row each (interpret.report.summary.overview_rows)
        "overview": overview_rows(report, tops, decisions) if len(report.examples) > 1 else [],
        "lead": lead_method(report, tops),
        "heat_maps": {section.key: heat_maps(report, section, format_number) for section in report.sections},
        "notes": report.run.notes,
        "checks": check_rows(report),
        "failed": failed_checks(report),
        "version": package_version(),
        "evidence": None if report.evidence is None else evidence_view(report.evidence),
        # classes side by side and word chips (interpret.report.classes; templates classes / words.html.j2)
        "class_views": [[comparison_view(c, b, example) for c in report.classes] for b, example in enumerate(report.examples)],
        "section_words": section_word_blocks(report.sections, report.examples),
    }
    return _environment().get_template(TEMPLATE).render(**context)


def log_size(size: int, path: Path | None, limit: int | None = None) -> None:
    """Log the page's projected size at INFO on the "interpret" logger."""
    where = f" → {path}" if path is not None else ""
    bound = f" (limit {megabytes(limit)} MB)" if limit is not None else ""
    log.info("report: projected size %s MB%s%s", megabytes(size), bound, where)


def write_report(page: bytes, report: ReportData, path: Path, *, max_bytes: int | None) -> Path:
    """Return `path` after writing the report's `page` there atomically; refuse above `max_bytes`."""
    if path.is_dir():
        raise ReportError(f"{path} is a directory; give a file path such as {path / 'report.html'}.")
    log_size(len(page), path, max_bytes)
    if max_bytes is not None and len(page) > max_bytes:
        raise ReportError(refusal(report, len(page), max_bytes))
    # A failure at any point leaves no partial file and keeps an older report at `path`.
    with atomic_path(path) as temporary:
        with open(temporary, "wb") as handle:
            _write_chunks(handle, page)
            handle.flush()
            os.fsync(handle.fileno())
    return path


def refusal(report: ReportData, size: int, limit: int) -> str:
    """Return the one-line refusal for a page above the limit, naming what to cut."""
    attention = next((s for s in report.sections if s.kind == "attention"), None)
    detail = ""
    if attention is not None:
        first = next(iter(attention.result.arrays.values())).values
        detail = (
            f" (attention patterns: {len(attention.layers)} layers × {len(attention.heads)} heads ×"
            f" {first.shape[-2]}×{first.shape[-1]} tokens × {first.shape[0]} examples)"
        )
    return (
        f"the report would be {megabytes(size)} MB, above the {megabytes(limit)} MB limit{detail};"
        " embed fewer layers or heads (layers=[...], heads=[...]; CLI --layers), run fewer analyzers, or shorten"
        " the text; or raise max_bytes."
    )


def _write_chunks(handle: Any, data: bytes) -> None:
    for start in range(0, len(data), _CHUNK):
        handle.write(data[start : start + _CHUNK])
