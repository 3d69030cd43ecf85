"""Loading a plugin entry-point group: built-ins first, provenance recorded, import failures kept as errors.

The analyzer and adapter registries both build on this; each adds its own contract check and its own rule
for what a plugin may not take over from a built-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import Any

from interpret.versions import DISTRIBUTION


@dataclass(frozen=True)
class LoadedEntry:
    """One entry point: its name and target, the distribution that provides it, and the object or error."""

    name: str
    target: str
    distribution: str
    dist_version: str
    obj: Any = None
    error: str | None = None

    @property
    def builtin(self) -> bool:
        """Whether this toolkit itself provides the entry."""
        return self.distribution == DISTRIBUTION


def load_group(group: str) -> list[LoadedEntry]:
    """Return every entry point of `group`, loaded, built-ins first then by name; a failed import is kept."""
    eps = sorted(metadata.entry_points(group=group), key=lambda ep: (dist_name(ep) != DISTRIBUTION, ep.name))
    loaded = []
    for ep in eps:
        dist, version = dist_name(ep), ep.dist.version if ep.dist is not None else "?"
        try:
            loaded.append(LoadedEntry(ep.name, ep.value, dist, version, obj=ep.load()))
        except Exception as err:  # a plugin's import may fail in any way; list it as broken, don't crash
            loaded.append(LoadedEntry(ep.name, ep.value, dist, version, error=f"import failed: {type(err).__name__}: {err}"))
    return loaded


def dist_name(ep: metadata.EntryPoint) -> str:
    """Return the providing distribution's name, normalised (PEP 503: case and separators ignored)."""
    return ep.dist.name.lower().replace("_", "-") if ep.dist is not None else "?"
