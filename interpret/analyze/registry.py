"""The analyzer registry: discovery through the `interpret.analyzers` entry points, validated at load.

Built-ins register in this project's pyproject.toml exactly as a third-party package does. A plugin that
fails to import or to meet the contract is listed as broken and never run; a plugin may not shadow a
built-in; an unknown name is answered with a close match.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from functools import cache

from interpret.analyze.contract import GROUP
from interpret.entry_points import load_group
from interpret.errors import AnalyzerError, suggest
from interpret.versions import DISTRIBUTION


@dataclass(frozen=True)
class Entry:
    """One registered analyzer: where it comes from and either its class or why it is broken."""

    name: str
    target: str
    distribution: str
    dist_version: str
    analyzer: type | None = None
    error: str | None = None

    @property
    def broken(self) -> bool:
        """Whether the entry failed to load or to meet the contract."""
        return self.error is not None

    @property
    def builtin(self) -> bool:
        """Whether this toolkit itself provides the analyzer."""
        return self.distribution == DISTRIBUTION

    @property
    def summary(self) -> str:
        """The one-line summary, or the error of a broken entry."""
        return self.analyzer.summary if self.analyzer is not None else f"BROKEN: {self.error}"


def validate(cls: Any, name: str) -> str | None:
    """Return why `cls` does not meet the Analyzer contract under entry-point `name`, or None if it does."""
    if not inspect.isclass(cls):
        return f"entry point must name a class, got {type(cls).__name__}"
    expected: dict[str, type | tuple[type, ...]] = {
        "name": str, "summary": str, "version": str, "requires": tuple, "needs_model": bool, "Params": type,
    }
    for attr, kind in expected.items():
        if not isinstance(getattr(cls, attr, None), kind):
            return f"class attribute {attr} missing or not a {getattr(kind, '__name__', kind)}"
    if cls.name != name:
        return f"class name attribute {cls.name!r} differs from the entry-point name {name!r}"
    if not all(isinstance(glob, str) for glob in cls.requires):
        return "requires must be a tuple of hook-name globs (str)"
    params_cls = cls.Params
    if not dataclasses.is_dataclass(params_cls) or not params_cls.__dataclass_params__.frozen:
        return "Params must be a frozen dataclass"
    try:
        params_cls()
    except TypeError as err:
        return f"Params must be constructible with defaults ({err})"
    run: Callable[..., object] | None = getattr(cls, "run", None)
    if not callable(run) or len(inspect.signature(run).parameters) != 4:
        return "run(self, trace, params, ctx) is missing or has the wrong signature"
    return None


@cache
def entries() -> dict[str, Entry]:
    """Return every registered analyzer by name (built-ins first), loading and validating each once."""
    found: dict[str, Entry] = {}
    for item in load_group(GROUP):
        entry = Entry(item.name, item.target, item.distribution, item.dist_version, error=item.error)
        if item.name in found:
            holder = found[item.name]
            reason = "shadows a built-in analyzer" if holder.builtin else f"duplicates one from {holder.distribution}"
            found[f"{item.name}@{item.distribution}"] = replace(entry, error=f"{reason}; rename it")
            continue
        if item.error is None:
            problem = validate(item.obj, item.name)
            entry = replace(entry, analyzer=None if problem else item.obj, error=problem)
        found[item.name] = entry
    return found


def refresh() -> None:
    """Forget the discovered entries, so newly installed plugins are found on the next look-up."""
    entries.cache_clear()


def names() -> list[str]:
    """Return the names of the working (not broken) analyzers, sorted."""
    return sorted(entry.name for entry in entries().values() if not entry.broken)


def get(name: str) -> type:
    """Return the analyzer class registered as `name`, or raise AnalyzerError (unknown or broken)."""
    entry = entries().get(name)
    if entry is None:
        known = names()
        raise AnalyzerError(
            f"unknown analyzer {name!r};{suggest(name, known)} registered: {', '.join(known) or 'none'}"
            " (see `interpret analyzers list`)."
        )
    if entry.analyzer is None:
        raise AnalyzerError(f"analyzer {name!r} from {entry.distribution} is broken ({entry.error}); fix or uninstall it.")
    return entry.analyzer
