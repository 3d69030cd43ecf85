"""Whether a run streams, and what it runs then: each analyzer that has a streaming version is replaced by it,
and an analyzer that needs every [layer, head, n, n] pattern and has none is refused in one line that names
the streaming alternatives — or, when the user named no analyzers (the default set), left out with a note.

A streaming analyzer names the full analyzer it stands for in its class attribute `streams` (e.g.
`StreamingRollout.streams = "rollout"`), so no core module names a specific analyzer. `streaming`:
"on" always streams; "off" never does (an over-budget capture is refused as before); "auto" streams exactly
when the full capture (every layer's and head's pattern, float32) is over the capture budget — the
collector's own estimate, `MemoryBudgetError`, decides it, before the model runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from interpret.errors import AnalyzerError

Streaming = Literal["auto", "on", "off"]
STREAMING_CHOICES = ("auto", "on", "off")


def streamed_versions() -> dict[str, str]:
    """Return {full analyzer: its streaming analyzer} over the registered analyzers' `streams` attributes."""
    from interpret.analyze import registry

    versions: dict[str, str] = {}
    for name in registry.names():
        full = getattr(registry.get(name), "streams", None)
        if isinstance(full, str) and full:
            versions[full] = name
    return versions


def needs_patterns(requires: Sequence[str]) -> bool:
    """Return whether hook-name globs `requires` take full [n, n] attention (patterns or scores)."""
    return any("hook_pattern" in glob or "attn_scores" in glob for glob in requires)


def check_streaming(streaming: str) -> None:
    """Raise AnalyzerError unless `streaming` is auto, on or off."""
    if streaming not in STREAMING_CHOICES:
        raise AnalyzerError(f"streaming={streaming!r} is unknown; use auto, on or off")


def streamed_plan(
    analyzers: Sequence[str], params: Mapping[str, Mapping[str, Any]], why: str, *, leave_out: bool = False
) -> tuple[list[str], dict[str, Mapping[str, Any]], list[tuple[str, str]]]:
    """Return (the analyzers a streamed run runs, their params, notes), each full analyzer replaced by its
    streaming version with the params given for it. `why` says why the run streams. An analyzer that needs
    every pattern and has no streaming version is refused (AnalyzerError, one line naming the alternatives),
    or, with `leave_out` (the default set, which the user did not choose), left out with a note
    (label, text) saying why.
    """
    from interpret.analyze import registry

    versions = streamed_versions()
    streaming = set(versions.values())
    chosen: list[str] = []
    chosen_params: dict[str, Mapping[str, Any]] = {}
    notes: list[tuple[str, str]] = []
    for name in analyzers:
        target = versions.get(name, name)
        cls = registry.get(target)
        if target not in streaming and needs_patterns(cls.requires):
            reason = f"{name} needs every [layer, head, n, n] attention pattern, and {why}"
            alike = [other for other in streaming if set(registry.get(other).provides) & set(cls.provides)]
            alternatives = ", ".join(sorted(alike or streaming))  # those that give what it gives (a readout, ...)
            if not leave_out:
                raise AnalyzerError(f"{reason}; use the streaming alternatives ({alternatives}) or shorter inputs.")
            notes.append((f"{name} left out", f"{reason} (a default analyzer; streamed ones: {alternatives})"))
            continue
        chosen.append(target)
        if name in params:
            chosen_params[target] = params[name]
    return chosen, chosen_params, notes
