"""Post-hoc interpretability of Transformer models: capture true attention, analyze it, report it.

The public surface is small and stable; everything else lives in private modules. It is listed once, in
`__init__.pyi`: type checkers read it, and lazy_loader turns it into this module's `__getattr__`, so `import
interpret` (and with it the command line's `--help`) pays for torch and transformers only when a name that
needs them is touched.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import lazy_loader

_lazy_getattr, _, _names = lazy_loader.attach_stub(__name__, __file__)
__all__ = [*_names, "__version__"]


def __getattr__(name: str) -> Any:
    """Return the public name `name` (its module imported on first use), or the package's version."""
    if name == "__version__":
        from interpret.versions import package_version

        return package_version()
    if name not in _names:
        raise AttributeError(f"module 'interpret' has no attribute {name!r}")
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    """Return the module's names with the lazily imported public ones, so completion and dir() list them."""
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The `interpret` module object: `interpret.collect` and `interpret.analyze` stay the functions.

    Importing the subpackage `interpret.collect` (or `interpret.analyze`) makes Python set it as an attribute
    of this package, which would hide the function of the same name; this keeps the function without
    importing anything up front.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


_SHADOWED = frozenset({"collect", "analyze"})
sys.modules[__name__].__class__ = _Package
