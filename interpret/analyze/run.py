"""`analyze`: run one registered analyzer on a Trace, after checking that the trace holds what it needs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from torch import nn

from interpret.analyze import params as params_mod
from interpret.analyze import registry
from interpret.analyze.contract import RunContext
from interpret.analyze.result import AnalyzerResult
from interpret.errors import AnalyzerError
from interpret.trace import Trace


def analyze(
    trace: Trace,
    name: str,
    model: nn.Module | None = None,
    params: Mapping[str, Any] | Any | None = None,
    *,
    tokenizer: Any = None,
    target: int | None = None,
    seed: int = 0,
    workers: int = 0,
) -> AnalyzerResult:
    """Return the AnalyzerResult of analyzer `name` on `trace` (params: a mapping or the Params instance)."""
    cls = registry.get(name)
    parsed = params_mod.build(cls.Params, params, name)
    missing = [glob for glob in cls.requires if not trace.names(glob)]
    if missing:
        raise AnalyzerError(
            f"{name} needs {', '.join(missing)} in the trace; collect with names={list(cls.requires)!r}."
        )
    if cls.needs_model and model is None:
        raise AnalyzerError(f"{name} re-runs the model; pass model= (and tokenizer=) to analyze.")
    ctx = RunContext(model=model, tokenizer=tokenizer, target=target, seed=seed, workers=workers)
    result = cls().run(trace, parsed, ctx)
    if not isinstance(result, AnalyzerResult):
        raise AnalyzerError(f"analyzer {name!r} returned {type(result).__name__}, not an AnalyzerResult.")
    return result


def required_names(names: Iterable[str]) -> list[str]:
    """Return the union of the hook-name globs the named analyzers require, in first-seen order."""
    globs: list[str] = []
    for name in names:
        for glob in registry.get(name).requires:
            if glob not in globs:
                globs.append(glob)
    return globs


def analyzers() -> list[str]:
    """Return the names of the registered, working analyzers."""
    return registry.names()

