"""Post-hoc interpretability of Transformer models: capture true attention, analyze it, report it.

The public surface is small and stable; everything else lives in private modules.
"""

from interpret.analyze import AnalyzerResult, analyze, analyzers
from interpret.api import explain
from interpret.collect import collect
from interpret.errors import (
    AnalyzerError,
    CaptureError,
    ConfigError,
    HookNameError,
    InputError,
    InterpretError,
    MemoryBudgetError,
    ModelLoadError,
    ReportError,
    ResultError,
    UnsupportedModelError,
)
from interpret.inputs import Encoded, encode
from interpret.loading import load
from interpret.report import Report
from interpret.target import Target
from interpret.trace import Trace, TraceMeta
from interpret.versions import package_version

__version__ = package_version()

__all__ = [
    "AnalyzerResult",
    "AnalyzerError",
    "CaptureError",
    "ConfigError",
    "Encoded",
    "HookNameError",
    "InputError",
    "InterpretError",
    "MemoryBudgetError",
    "Report",
    "Target",
    "ModelLoadError",
    "ReportError",
    "ResultError",
    "Trace",
    "TraceMeta",
    "UnsupportedModelError",
    "__version__",
    "analyze",
    "analyzers",
    "collect",
    "encode",
    "explain",
    "load",
]
