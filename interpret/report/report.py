"""`Report`: the report data with its two outputs, the HTML page (`render`) and the data (`export`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from interpret.report.export import export_report
from interpret.report.model import DEFAULT_MAX_BYTES, ReportData
from interpret.report.notebook import notebook_html
from interpret.report.render import log_size, render_page, write_report


@dataclass(frozen=True)
class Report(ReportData):
    """The report of one run (see `ReportData`), ready to render as one offline HTML file or to export."""

    # The rendered page, kept so that projected_size() followed by render() builds it once.
    _cache: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    def page(self) -> bytes:
        """Return the UTF-8 bytes of the self-contained HTML page (built once, then reused)."""
        if "page" not in self._cache:
            self._cache["page"] = render_page(self).encode("utf-8")
        return self._cache["page"]

    def projected_size(self) -> int:
        """Return the size in bytes of the HTML file `render` would write (also logged at INFO)."""
        size = len(self.page())
        log_size(size, None)
        return size

    def render(self, path: str | Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> Path:
        """Return the path of the one self-contained HTML file written there atomically.

        Raises ReportError, writing nothing, when the page would exceed `max_bytes` (None: no limit).
        """
        return write_report(self.page(), self, Path(path), max_bytes=max_bytes)

    def export(self, directory: str | Path, *, figures: bool = True) -> list[Path]:
        """Return the files written under `directory`: every array and table as JSON, CSV and Parquet, and
        (figures=True) each readout and head map as a PNG and SVG figure."""
        return export_report(self, Path(directory), figures=figures)

    def _repr_html_(self) -> str:
        """Return the report as a Jupyter notebook shows it: the page in a sandboxed iframe, or above
        `interpret.report.notebook.INLINE_MAX_BYTES` a compact summary (see that module)."""
        return notebook_html(self, self.page())
