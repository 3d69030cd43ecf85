"""Plugin entry points: the one record of an entry (both registries and `interpret analyzers list` use it)
and the loader of a group, built-ins first, with import failures kept as errors."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import Any

from interpret.runtime.versions import DISTRIBUTION


@dataclass(frozen=True)
class Entry:
    """One entry point: its name and target, the distribution that provides it, and its object or error.

    obj: the loaded object once it meets its group's contract (None while broken); for an analyzer that
    `interpret analyzers list` read from its source without importing it (`checked` False), the class
    attributes read there.
    """

    name: str
    target: str
    distribution: str
    dist_version: str
    obj: Any = None
    error: str | None = None
    checked: bool = True

    @property
    def broken(self) -> bool:
        """Whether the entry failed to load, to meet the contract, or clashes with another entry."""
        return self.error is not None

    @property
    def builtin(self) -> bool:
        """Whether this toolkit itself provides the entry."""
        return self.distribution == DISTRIBUTION

    @property
    def summary(self) -> str:
        """The object's one-line summary, or why the entry is broken."""
        return f"BROKEN: {self.error}" if self.error is not None else str(getattr(self.obj, "summary", ""))


def sorted_entry_points(group: str) -> list[metadata.EntryPoint]:
    """Return the entry points of `group`, built-ins first, then by name."""
    return sorted(metadata.entry_points(group=group), key=lambda ep: (dist_name(ep) != DISTRIBUTION, ep.name))


def entry(ep: metadata.EntryPoint, obj: Any = None, error: str | None = None, checked: bool = True) -> Entry:
    """Return the record of `ep`, its distribution and version read from the installed metadata."""
    return Entry(ep.name, ep.value, dist_name(ep), ep.dist.version if ep.dist is not None else "?", obj, error, checked)


def load_group(group: str) -> list[Entry]:
    """Return every entry point of `group`, loaded (not yet checked against a contract); a failed import is kept."""
    loaded = []
    for ep in sorted_entry_points(group):
        try:
            loaded.append(entry(ep, obj=ep.load()))
        except Exception as err:  # a plugin's import may fail in any way; list it as broken, don't crash
            loaded.append(entry(ep, error=f"import failed: {type(err).__name__}: {err}"))
    return loaded


def dist_name(ep: metadata.EntryPoint) -> str:
    """Return the providing distribution's name, normalised (PEP 503: case and separators ignored)."""
    return ep.dist.name.lower().replace("_", "-") if ep.dist is not None else "?"
