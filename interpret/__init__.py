"""Post-hoc interpretability of Transformer models: capture true attention, analyze it, report it.

The public surface is small and stable; everything else lives in private modules. The public names are
imported on first use (PEP 562), so `import interpret` — and with it the command line's `--help` — does not
pay for torch and transformers until a name that needs them is touched.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

# Every public name and the module that defines it.
_EXPORTS: dict[str, str] = {
    "AnalyzerResult": "interpret.analyze",
    "analyze": "interpret.analyze",
    "analyzers": "interpret.analyze",
    "explain": "interpret.api",
    "collect": "interpret.collect",
    "AnalyzerError": "interpret.errors",
    "CaptureError": "interpret.errors",
    "ConfigError": "interpret.errors",
    "HookNameError": "interpret.errors",
    "InputError": "interpret.errors",
    "InterpretError": "interpret.errors",
    "MemoryBudgetError": "interpret.errors",
    "ModelLoadError": "interpret.errors",
    "ReportError": "interpret.errors",
    "ResultError": "interpret.errors",
    "UnsupportedModelError": "interpret.errors",
    "Encoded": "interpret.inputs",
    "encode": "interpret.inputs",
    "load": "interpret.api",
    "Report": "interpret.report",
    "Target": "interpret.target",
    "Trace": "interpret.trace",
    "TraceMeta": "interpret.trace",
}

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


def __getattr__(name: str) -> Any:
    """Return the public name `name`, importing its module on first use (then cached as a module global)."""
    if name == "__version__":
        from interpret.versions import package_version

        value: Any = package_version()
    elif name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'interpret' has no attribute {name!r}")
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """The `interpret` module object: `interpret.collect` and `interpret.analyze` stay the functions.

    Importing the subpackage `interpret.collect` (or `interpret.analyze`) makes Python set it as an attribute
    of this package, which would hide the function of the same name; the eager `__init__` rebound the
    function after that import, and this keeps that behaviour without importing anything up front.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


_SHADOWED = frozenset({"collect", "analyze"})
sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    """Return the module's names with the lazily imported public ones, so completion and dir() list them."""
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # static type checkers and IDEs see the eager imports
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
    from interpret.api import load
    from interpret.report import Report
    from interpret.target import Target
    from interpret.trace import Trace, TraceMeta

    __version__: str
