"""The planning rule of a streamed run: each analyzer with a streamed computation (`streamed_requires`) runs
it; one that needs every [layer, head, n, n] pattern and has none is refused in one line naming those that
stream, or, when the user named no analyzers (the default set), left out with a note; the rest (reading no
pattern) run as they are (docs/architecture.md, "Streaming is a strategy"). `streaming`: "on" always streams;
"off" never does (an over-budget capture is refused as before); "auto" streams exactly when the full capture
(every layer's and head's pattern, float32) is over the capture budget: the collector's own estimate,
`MemoryBudgetError`, decides it, before the model runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from interpret.analysis import registry
from interpret.errors import AnalyzerError


def needs_patterns(requires: Sequence[str]) -> bool:
    """Return whether hook-name globs `requires` take full [n, n] attention (patterns or scores)."""
    return any("hook_pattern" in glob or "attn_scores" in glob for glob in requires)


def streamed_strategies(
    analyzers: Iterable[str], why: str, *, leave_out: bool = False
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Return ({analyzer: strategy} of each analyzer a streamed run runs, notes (label, text)). `why` says why
    the run streams; an analyzer that needs every pattern and has no streamed computation is refused
    (AnalyzerError, one line naming those that stream and give what it gives), or with `leave_out` left out
    with a note."""
    streams = [name for name in registry.names() if hasattr(registry.get(name), "streamed_requires")]
    chosen: dict[str, str] = {}
    notes: list[tuple[str, str]] = []
    for name in analyzers:
        cls = registry.get(name)
        if name in streams or not needs_patterns(cls.requires):
            chosen[name] = "streamed" if name in streams else "full"
            continue
        reason = f"{name} needs every [layer, head, n, n] attention pattern, and {why}"
        alike = [other for other in streams if set(registry.get(other).provides) & set(cls.provides)]
        alternatives = ", ".join(sorted(alike or streams))  # those that give what it gives (a readout, ...)
        if not leave_out:
            raise AnalyzerError(f"{reason}; use analyzers that stream ({alternatives}) or shorter inputs.")
        notes.append((f"{name} left out", f"{reason} (a default analyzer; streamed ones: {alternatives})"))
    return chosen, notes
