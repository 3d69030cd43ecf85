"""`analyze`: run one registered analyzer on a Trace, with a run context, and check what it returns.

Before the analyzer runs: its parameters are validated (a combination that cannot give a meaningful result
is refused by its Params) and the trace must hold what it reads. After it ran: every array must be finite,
the declared readout must not be all zero for any example, and every invariant check must hold; otherwise
the result is refused with one line naming the analyzer, what failed and the parameters — a wrong number is
never handed on as a result.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from torch import nn

from interpret.analysis import params as params_mod
from interpret.analysis import registry
from interpret.analysis.contract import STRATEGIES, RunContext
from interpret.analysis.decision_rows import check_decision_rows
from interpret.analysis.defaults import DEPRECATED_STREAMING
from interpret.analysis.result import AnalyzerResult
from interpret.analysis.runner import ModelRunner
from interpret.arrays import to_numpy
from interpret.capture.api import capturable_for
from interpret.capture.sites import Capturable
from interpret.decision.decide import DecisionReader, decision_head, reader_for, structural_targets
from interpret.errors import AnalyzerError, ResultError
from interpret.target import Target
from interpret.trace import Trace


def analyze(
    trace: Trace, name: str, model: nn.Module | None = None, params: Mapping[str, Any] | Any | None = None, *,
    tokenizer: Any = None, targets: Sequence[Target] | None = None, head: nn.Module | None = None,
    context: RunContext | None = None, seed: int = 0, workers: int = 0, strategy: str | None = None,
) -> AnalyzerResult:
    """Return the AnalyzerResult of analyzer `name` on `trace` (params: a mapping or the Params instance).

    targets: one Target per example (what each explanation is for); default: each example's prediction,
        resolved from the trace's output when `model` is given. Without the model nothing says how the
        decision pools, so attention analyzers read the first token (the last for decoders; see
        `interpret.decision.decide.structural_targets`): pass model= to read the rows the decision really reads.
    head: a decision head on a bare encoder (default: the default model's sentiment head when `model` is the
        default model from `interpret.load()`; `interpret.decision.decide.decision_head`).
    context: a RunContext built once for several analyzers (`run_context`); overrides the arguments above.
    strategy: "full" (the default) or "streamed", for an analyzer that declares `streamed_requires` (its
        computation from what those name, no pattern); None: the context's.
    """
    name, forced = resolve_name(name)
    head = decision_head(model, head)  # issue 27: the head `interpret.load()` recorded for the default model
    ctx = context or run_context(trace, model, tokenizer, head=head, targets=targets, seed=seed, workers=workers)
    return analyze_with(trace, name, params, ctx, forced or strategy)


def analyze_with(
    trace: Trace, name: str, params: Mapping[str, Any] | Any | None, context: RunContext, strategy: str | None = None
) -> AnalyzerResult:
    """Return the checked AnalyzerResult of registered analyzer `name` on `trace` with `context`, computed by
    `strategy` (None: the context's): the one path every analysis takes (`analyze`, the analysis loop of
    `interpret.analysis.lead`, the classes side by side of `interpret.pipeline`)."""
    cls = registry.get(name)
    strategy = strategy or context.strategy
    check_strategy(cls, strategy, params)
    parsed = params_mod.build(cls.Params, params, name)
    described = params_mod.as_dict(parsed, strategy)  # what a refusal names
    reads = cls.streamed_requires if strategy == "streamed" else cls.requires
    missing = [glob for glob in reads if not trace.names(glob)]
    if missing:
        raise AnalyzerError(f"{name} needs {', '.join(missing)} in the trace; collect with names={list(reads)!r}.")
    if context.strategy != strategy:
        context = replace(context, strategy=strategy)
    if cls.needs_model and context.runner is None:
        raise AnalyzerError(f"{name} runs the model; pass model= (and tokenizer=) to analyze.")
    result = cls().run(trace, parsed, context)
    if not isinstance(result, AnalyzerResult):
        raise AnalyzerError(f"analyzer {name!r} returned {type(result).__name__}, not an AnalyzerResult.")
    if strategy != "full":
        result = replace(result, strategy=strategy)
    check_result(result, trace, described)
    return result


def resolve_name(name: str) -> tuple[str, str | None]:
    """Return (the analyzer `name` stands for, "streamed" for an old streaming analyzer's name, else None),
    warning (DeprecationWarning) once per call for an old name."""
    new = DEPRECATED_STREAMING.get(name)
    if new is None:
        return name, None
    warnings.warn(f"analyzer {name!r} is now {new!r} streamed (streaming='on'); the old name goes in the next"
                  " release.", DeprecationWarning, stacklevel=3)
    return new, "streamed"


def check_strategy(cls: type, strategy: str, params: Any = None) -> None:
    """Raise AnalyzerError for an unknown strategy, "streamed" for an analyzer with no streamed computation, or a
    parameter given in `params` (a mapping) that `strategy` does not read (`params.check_strategy`)."""
    if strategy not in STRATEGIES:
        raise AnalyzerError(f"strategy={strategy!r} is unknown; use full or streamed.")
    if strategy == "streamed" and not hasattr(cls, "streamed_requires"):
        raise AnalyzerError(f"{cls.name} has no streamed computation (it needs every pattern); run it with streaming off.")
    if isinstance(params, Mapping):
        params_mod.check_strategy(cls.Params, params, strategy, cls.name)


def run_context(
    trace: Trace, model: nn.Module | None, tokenizer: Any = None, *, head: nn.Module | None = None,
    targets: Sequence[Target] | None = None, seed: int = 0, workers: int = 0,
) -> RunContext:
    """Return the RunContext for analyzers of `trace`: each example's target and, with a model, the runner."""
    if model is None:
        chosen = tuple(targets) if targets is not None else structural_targets(trace)
        return RunContext(targets=chosen, tokenizer=tokenizer, seed=seed, workers=workers)
    reader = reader_for(model, trace.meta.kind, head, trace.output)
    if targets is None:
        targets = [decision.target for decision in reader.decide(trace, tokenizer)]
    capturable = capturable_for(model, tokenizer)
    return bound_context(trace, capturable, reader, targets, tokenizer, seed=seed, workers=workers)


def bound_context(
    trace: Trace, capturable: Capturable, reader: DecisionReader, targets: Sequence[Target], tokenizer: Any = None,
    *, seed: int = 0, workers: int = 0,
) -> RunContext:
    """Return the RunContext of `trace` on a model read once (its Capturable and decision reader, as the pipeline
    holds them from the capture): one target per example, the runner, the model's device. The rows the targets
    say each decision reads are held against the model once (`decision_rows.check_decision_rows`)."""
    if len(targets) != trace.encoded.batch:
        raise AnalyzerError(f"{len(targets)} targets for {trace.encoded.batch} examples; give one target per example.")
    prefix = "encoder." if trace.meta.kind == "encoder-decoder" else ""
    runner = ModelRunner(capturable, reader, targets, gate_prefix=prefix)
    check_decision_rows(trace.encoded, runner, targets, "decoder." if reader.side == "decoder" else "")
    return RunContext(
        targets=tuple(targets), model=capturable.model, tokenizer=tokenizer, seed=seed, workers=workers,
        device=capturable.device, runner=runner,
    )


def retargeted(context: RunContext, targets: Sequence[Target]) -> RunContext:
    """Return `context` explaining `targets` instead: the same model, structure, decision reader and seed, nothing
    read from the model again."""
    runner = context.runner
    if runner is not None:
        runner = type(runner)(runner.capturable, runner.reader, targets, gate_prefix=runner.gate_prefix)
    return replace(context, targets=tuple(targets), runner=runner)


def check_result(result: AnalyzerResult, trace: Trace, params: Mapping[str, Any]) -> None:
    """Raise ResultError when `result` holds a non-finite value, an all-zero readout or a broken invariant."""
    where = f"{result.analyzer} with {_describe(params)}"
    for array_name, array in result.arrays.items():
        values = np.asarray(array.values)
        if values.dtype.kind in "fc" and not np.isfinite(values).all():
            bad = int((~np.isfinite(values)).sum())
            raise ResultError(
                f"{where} returned {bad} non-finite value(s) in {array_name!r}; these parameters cannot give a"
                " meaningful result here: change them (see `interpret analyzers show"
                f" {result.analyzer}`)."
            )
    readout = result.readout
    if readout is not None and result.readout_of is not None:
        side = trace.encoded.decoder if result.readout_of.side == "decoder" else trace.encoded
        real = to_numpy(side.attention_mask.bool()) if side is not None else np.ones(readout.shape, bool)
        for example in range(readout.shape[0]):
            if not np.any(readout[example][real[example, : readout.shape[1]]]):
                raise ResultError(
                    f"{where} gave example {example} a readout that is zero on every token, which explains"
                    " nothing; change the parameters."
                )
    for check_name, check in result.checks.items():
        if check.severity == "invariant" and not check.ok:
            raise ResultError(
                f"{where} broke its invariant {check_name} ({check.description or 'no description'}):"
                f" {check.value:.3g} > {check.tolerance:.3g}; the result is wrong, so it is not returned."
                f" {check.remedy or 'Report this with the input.'}"
            )


def _describe(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in params.items()) or "default parameters"


def required_names(names: Iterable[str] | Mapping[str, str]) -> list[str]:
    """Return the union of the hook-name globs the named analyzers read, in first-seen order; `names` may map each
    analyzer to its strategy (streamed: what its streamed computation reads, `requires` for one without)."""
    globs: list[str] = []
    for name in names:
        cls = registry.get(name)
        streamed = isinstance(names, Mapping) and names[name] == "streamed"
        for glob in getattr(cls, "streamed_requires", cls.requires) if streamed else cls.requires:
            if glob not in globs:
                globs.append(glob)
    return globs


def analyzers() -> list[str]:
    """Return the names of the registered, working analyzers."""
    return registry.names()
