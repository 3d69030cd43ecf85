"""The analyzer registry: the `interpret.analyzers` entry points, each checked by the contract's rules
(`interpret.registration.analyzer_rules`) when it loads (docs/architecture.md, "The analyzer contract")."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from interpret.errors import AnalyzerError, suggest
from interpret.registration.analyzer_rules import GROUP, validate
from interpret.registration.entry_points import Entry, load_group


@cache
def entries() -> dict[str, Entry]:
    """Return every registered analyzer by name (built-ins first), loading and validating each once."""
    found: dict[str, Entry] = {}
    for item in load_group(GROUP):
        if item.name in found:
            holder = found[item.name]
            reason = "shadows a built-in analyzer" if holder.builtin else f"duplicates one from {holder.distribution}"
            found[f"{item.name}@{item.distribution}"] = replace(item, obj=None, error=f"{reason}; rename it")
            continue
        problem = item.error or validate(item.obj, item.name)
        found[item.name] = replace(item, obj=None, error=problem) if problem else item
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
    if entry.broken:
        raise AnalyzerError(f"analyzer {name!r} from {entry.distribution} is broken ({entry.error}); fix or uninstall it.")
    return entry.obj
