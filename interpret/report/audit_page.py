"""The audit summary page rendered with the report's templates: `audit.html.j2` built from the shared macros
in `components.html.j2`, styled by the report's stylesheet plus `static/audit.css`, in the report's jinja2
environment (autoescape, strict undefined, the same filters).

The page runs no script: its Content-Security-Policy allows the one inline stylesheet by sha256 and nothing
else, so neither an injected script nor an injected style could run, and nothing is loaded from anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

import interpret.report.assets as assets
from interpret.report.render import _environment  # the report's environment: one loader, one set of filters
from interpret.runtime.versions import package_version

TEMPLATE = "audit.html.j2"


def render_audit_page(context: Mapping[str, Any]) -> str:
    """Return the audit summary page for `context` (the names `audit.html.j2` reads; see interpret.audit.summary).
    Its stylesheet is the report's, then the audit's own rules; its Content-Security-Policy allows that one
    stylesheet by hash: no script, no network."""
    style = assets.style() + "\n" + assets.checked("audit.css", assets._read(assets.STATIC / "audit.css"))
    csp = (
        f"default-src 'none'; script-src 'none'; style-src {assets.csp_hash(style)}; img-src 'none'; font-src 'none';"
        " connect-src 'none'; object-src 'none'; frame-src 'none'; base-uri 'none'; form-action 'none'"
    )
    page = {**context, "csp": csp, "style": Markup(style), "version": package_version()}
    return _environment().get_template(TEMPLATE).render(**page)
