"""Reports: one self-contained, offline HTML file per audit, plus the data behind it.

    report = build_report(trace, results, RunInfo.from_trace(trace, seed=0))
    report.projected_size()            # bytes of the HTML page, also logged at INFO
    report.render("reports/audit.html")   # one file, written atomically; refused above max_bytes
    report.export("reports/audit/")       # every array and table as JSON, CSV and Parquet

Batches: the page has one section per analyzer and an example picker at the top that switches every view
and the summary to the chosen example (all examples' data is embedded; printing prints the shown example).
"""

from interpret.report.build import build_report
from interpret.report.model import DEFAULT_MAX_BYTES, ExampleTokens, ReportData, RunInfo, Section
from interpret.report.report import Report

__all__ = ["DEFAULT_MAX_BYTES", "ExampleTokens", "Report", "ReportData", "RunInfo", "Section", "build_report"]
