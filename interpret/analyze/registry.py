"""The analyzer registry: discovery through the `interpret.analyzers` entry points, validated at load.

Built-ins register in this project's pyproject.toml exactly as a third-party package does. A plugin that
fails to import or to meet the contract is listed as broken and never run; a plugin may not shadow a
built-in; an unknown name is answered with a close match.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from interpret.analyze.contract import GROUP
from interpret.analyze.result import PROVIDES
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


RUN_PARAMETERS = ("self", "trace", "params", "ctx")


def validate(cls: Any, name: str) -> str | None:
    """Return why `cls` does not meet the Analyzer contract under entry-point `name`, or None if it does.

    Checks exactly the attributes of `interpret.analyze.contract.Analyzer`, with the types it documents.
    """
    if not inspect.isclass(cls):
        return f"entry point must name a class, got {type(cls).__name__}"
    for attr in ("name", "summary", "version"):
        if not isinstance(getattr(cls, attr, None), str) or not getattr(cls, attr):
            return f"class attribute {attr} missing or not a non-empty str"
    if cls.name != name:
        return f"class name attribute {cls.name!r} differs from the entry-point name {name!r}"
    if "\n" in cls.summary:
        return "summary must be one line"
    for attr in ("requires", "provides"):
        value = getattr(cls, attr, None)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            return f"class attribute {attr} missing or not a sequence of strings"
    unknown = [item for item in cls.provides if item not in PROVIDES]
    if unknown:
        return f"provides names {unknown[0]!r}; an analyzer provides any of {', '.join(PROVIDES)}"
    if not isinstance(getattr(cls, "needs_model", None), bool):
        return "class attribute needs_model missing or not a bool"
    params_cls = getattr(cls, "Params", None)
    if not isinstance(params_cls, type) or not dataclasses.is_dataclass(params_cls) or not params_cls.__dataclass_params__.frozen:
        return "Params must be a frozen dataclass"
    try:
        params_cls()
    except (TypeError, ValueError) as err:
        return f"Params must be constructible with defaults ({err})"
    run: Callable[..., object] | None = getattr(cls, "run", None)
    if not callable(run):
        return "run(self, trace, params, ctx) is missing"
    parameters = tuple(inspect.signature(run).parameters)
    if parameters != RUN_PARAMETERS:
        return f"run must take (self, trace, params, ctx), not ({', '.join(parameters)})"
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
