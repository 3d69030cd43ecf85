"""The page's inline assets: our script and style, vendored d3 and jQuery, bertviz's views; their CSP hashes.

bertviz's head_view.js and model_view.js are read from the installed bertviz package. Two changes are made to
them, as bertviz's own Python does with the first: the `PYTHON_PARAMS` marker becomes a call that builds the
parameters from the report's JSON block, and the `require.config` call that names the CDN is dropped (the
require shim answers `requirejs` with the d3 and jQuery already on the page).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from interpret.errors import ReportError

STATIC = Path(__file__).parent / "static"
VENDOR = STATIC / "vendor"

D3 = "d3-5.16.0.min.js"
JQUERY = "jquery-3.7.1.min.js"
BERTVIZ_VIEWS = ("head", "model")
PAGE_SCRIPTS = ("report_draw.js", "report_views.js", "report.js")  # in this order: each uses the ones before

_CLOSING = re.compile(r"</script|</style|<!--", re.IGNORECASE)
_PARAMS = re.compile(r"=\s*PYTHON_PARAMS\s*;")
_REQUIRE_CONFIG = re.compile(r"require\.config\(\{.*?\}\);\s*", re.DOTALL)


@dataclass(frozen=True)
class Script:
    """One inline classic script: its source and, for bertviz's views, which view it is."""

    name: str
    text: str
    bertviz: str | None = None


def normalize(text: str) -> str:
    """Return `text` with CR LF / CR line ends as LF: the browser hashes the text after this normalisation."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def csp_hash(text: str) -> str:
    """Return the CSP source expression 'sha256-…' of an inline script or style."""
    digest = hashlib.sha256(normalize(text).encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def checked(name: str, text: str) -> str:
    """Return the text of an inline script after refusing any that could end its element early."""
    if _CLOSING.search(text):
        raise ReportError(
            f"inline asset {name} contains '</script', '</style' or '<!--' and cannot be inlined safely;"
            " replace the file with an unmodified release build."
        )
    return normalize(text)


@cache
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def style() -> str:
    """Return the page's CSS (screen and print)."""
    return checked("report.css", _read(STATIC / "report.css"))


def scripts(with_bertviz: bool) -> list[Script]:
    """Return the inline scripts in page order: d3, jQuery, the require shim, bertviz's views, then our three."""
    out = []
    if with_bertviz:
        files = ((D3, VENDOR / D3), (JQUERY, VENDOR / JQUERY), ("bertviz_shim.js", STATIC / "bertviz_shim.js"))
        out += [Script(name, checked(name, _read(path))) for name, path in files]
        out += [Script(f"{view}_view.js", bertviz_view(view), view) for view in BERTVIZ_VIEWS]
    out += [Script(name, checked(name, _read(STATIC / name))) for name in PAGE_SCRIPTS]
    return out


def bertviz_version() -> str:
    """Return the installed bertviz version, or '' when bertviz is not installed."""
    try:
        return metadata.version("bertviz")
    except metadata.PackageNotFoundError:
        return ""


def has_bertviz() -> bool:
    """Return whether bertviz's view scripts can be read (the package need not be importable)."""
    return _bertviz_dir() is not None


@cache
def bertviz_view(view: str) -> str:
    """Return bertviz's `{view}_view.js`, fed from the report's data and free of its CDN configuration."""
    directory = _bertviz_dir()
    if directory is None:
        raise ReportError("bertviz is not installed; pip install 'bertviz>=1.4' to embed its head and model views.")
    source = (directory / f"{view}_view.js").read_text(encoding="utf-8")
    source, count = _PARAMS.subn(f'= window.AUDIT_BERTVIZ.params("{view}");', source, count=1)
    if count != 1:
        raise ReportError(
            f"bertviz {bertviz_version()}'s {view}_view.js has no `= PYTHON_PARAMS;` marker; install bertviz 1.4"
            " (pip install 'bertviz>=1.4,<1.5')."
        )
    source = _REQUIRE_CONFIG.sub("", source, count=1)
    return checked(f"bertviz/{view}_view.js", source)


def _bertviz_dir() -> Path | None:
    # find_spec locates the package without importing it: bertviz's __init__ imports IPython.
    try:
        spec = importlib.util.find_spec("bertviz")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    directory = Path(next(iter(spec.submodule_search_locations)))
    return directory if (directory / "head_view.js").is_file() else None
