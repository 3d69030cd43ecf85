"""Dataset audits: run analyzers over every example in batches, resumably, into tables and a summary page.

`run_audit(model, tokenizer, examples, out_dir, options=AuditOptions(...))` writes tokens.parquet/.csv (example ×
analyzer × token), examples.parquet/.csv (one row per example), heads.csv ([layer, head] statistics),
drivers.parquet/.csv and counterfactuals.csv (what drives the decisions, checked by re-running the model:
`interpret.audit.drivers`), slices.csv (with `slice_by`: `interpret.audit.failures`) and summary.html; the tables'
columns and dtypes are listed in `interpret.audit.tables` and those modules. Resuming requires the same
fingerprint (`interpret.audit.identity`); the directory is locked while an audit runs (`DirectoryLocked`
otherwise).
"""

from interpret.audit.lock import DirectoryLocked
from interpret.audit.runner import DEFAULT_ANALYZERS, AuditResult, run_audit
from interpret.audit.tables import EXAMPLE_DTYPES, TOKEN_DTYPES, example_dtypes
from interpret.request import AuditOptions

__all__ = [
    "DEFAULT_ANALYZERS", "EXAMPLE_DTYPES", "TOKEN_DTYPES", "AuditOptions", "AuditResult", "DirectoryLocked", "example_dtypes",
    "run_audit",
]
