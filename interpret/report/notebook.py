"""A report shown in a Jupyter notebook (`Report._repr_html_`): the page itself in a sandboxed iframe, or, above
INLINE_MAX_BYTES, a compact summary that says how to write the page.

The iframe's `srcdoc` is the very page `render` writes, escaped for a double-quoted attribute (`&`, `<`, `>`,
quotes; the `data` filter, which leaves the page's bidi controls as they are), which the browser decodes back to
the page character for character. `sandbox="allow-scripts"` lets the
page's own scripts run in an opaque origin: they cannot reach the notebook's page, its cookies or storage, open
windows, navigate the notebook or send a form. The page keeps its Content-Security-Policy (a meta tag, so it
travels inside srcdoc): only its inline scripts and style, by hash, and no network. A srcdoc document also
inherits the notebook page's policy; Jupyter's (`frame-ancestors 'self'` and a report-uri) lets the scripts
run, and under a host whose policy forbids inline scripts the page still shows everything rendered without them
(title, overview, summary, checks, evidence, heat maps), only its drawn views are missing.

Above INLINE_MAX_BYTES the notebook gets the summary instead (`templates/notebook.html.j2`: each text's
prediction, the lead method's top tokens and the evidence verdict, rendered by the report's environment, so
every value is escaped and runs no script): a notebook stores every output in its .ipynb file and holds it in
the browser's memory, and a page of many texts (their attention patterns) would add megabytes to the notebook
on every save; such a page is for `render(path)`.
"""

from __future__ import annotations

from interpret.report.model import ReportData
from interpret.report.render import _environment, example_decisions, megabytes
from interpret.report.summary import lead_method, overview_rows, report_title, top_tokens

INLINE_MAX_BYTES = 5_000_000  # a page above this is summarised in the notebook, not embedded
IFRAME_HEIGHT = 720  # pixels; the page scrolls inside the frame


def notebook_html(report: ReportData, page: bytes, limit: int = INLINE_MAX_BYTES) -> str:
    """Return the HTML a notebook shows for `report`: the page (`page`, its UTF-8 bytes) in a sandboxed iframe,
    or the compact summary when the page is over `limit` bytes."""
    tops = [top_tokens(report, b) for b in range(len(report.examples))]
    inline = len(page) <= limit
    return _environment().get_template("notebook.html.j2").render(
        title=report_title(report), run=report.run, height=IFRAME_HEIGHT,
        page=page.decode("utf-8") if inline else None,  # printed by the `data` filter: escaped, bidi kept
        rows=[] if inline else overview_rows(report, tops, example_decisions(report)),
        lead=lead_method(report, tops), size=megabytes(len(page)), limit=megabytes(limit),
    )
