"""Post-hoc interpretability of Transformer models: capture true attention, analyze it, report it.

The public surface is small and stable; everything else lives in private modules. It is listed once, in
`__init__.pyi`: type checkers read it, and lazy_loader turns it into this module's `__getattr__`, so `import
interpret` (and with it the command line's `--help`) pays for torch and transformers only when a name that
needs them is touched.
"""

from __future__ import annotations

from typing import Any

import lazy_loader

_lazy_getattr, _, _names = lazy_loader.attach_stub(__name__, __file__)
__all__ = [*_names, "__version__"]


def __getattr__(name: str) -> Any:
    """Return the public name `name` (its module imported on first use), or the package's version."""
    if name == "__version__":
        from interpret.runtime.versions import package_version

        return package_version()
    if name not in _names:
        raise AttributeError(f"module 'interpret' has no attribute {name!r}")
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    """Return the module's names with the lazily imported public ones, so completion and dir() list them."""
    return sorted({*globals(), *__all__})
