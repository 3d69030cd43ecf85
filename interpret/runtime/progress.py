"""The progress hook that long library loops accept: the library never draws or prints progress itself.

A caller (the CLI draws tqdm bars on stderr, `interpret.cli.common.stages`) passes a `Stage`: the loop calls
`advance = stage(description, total, unit)` when a stage starts (total 0: not known in advance) and
`advance(n)` as each n units are done. Units are what the loop counts: "example" (one example through one
analyzer or one forward pass), "step" (a pruning step).
"""

from __future__ import annotations

from collections.abc import Callable

Advance = Callable[[int], None]
Stage = Callable[[str, int, str], Advance]


def begin(stage: Stage | None, description: str, total: int, unit: str = "example") -> Advance:
    """Open a stage on `stage` and return its advance function (one that does nothing when there is no hook)."""
    return stage(description, total, unit) if stage is not None else _nothing


def _nothing(_n: int) -> None:
    pass
