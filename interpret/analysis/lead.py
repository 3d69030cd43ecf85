"""The defaults' lead: the first of `defaults.LEADS` (the evidence's order; an audit's: `AUDIT_LEADS`, tried by
`interpret.audit.runner.audit_defaults`) that runs on the model.

A lead that refuses the model (an AnalyzerError: a head, block layout or kind it does not cover; no decision to
score) gives way to the next, with a note saying why; a result that failed its checks is an error as always.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

from interpret.analysis import registry
from interpret.analysis.contract import RunContext
from interpret.analysis.defaults import DEFAULT_ANALYZERS, LEADS
from interpret.analysis.result import AnalyzerResult
from interpret.analysis.run import analyze_with
from interpret.analysis.strategy import streamed_strategies
from interpret.capture.sites import Capturable
from interpret.errors import AnalyzerError, ResultError
from interpret.runtime.progress import Stage, begin
from interpret.trace import Trace

Note = tuple[str, str]


def capturable_leads(capturable: Capturable, candidates: Sequence[str] = LEADS) -> tuple[list[str], list[Note]]:
    """Return the `candidates` whose every hook point the model exposes, and (lead, why) for each other one."""
    available = [site.name for site in capturable.sites]
    leads, refused = [], []
    for name in candidates:
        missing = [glob for glob in registry.get(name).requires if not fnmatch.filter(available, glob)]
        if missing:
            refused.append((name, f"{name} reads {missing[0]}, which {type(capturable.model).__name__} does not expose"))
        else:
            leads.append(name)
    return leads, refused


def run_lead(
    trace: Trace, context: RunContext, params: Mapping[str, Any] | None, leads: Sequence[str],
    refused: Sequence[tuple[str, str]] = (),
) -> tuple[AnalyzerResult | None, list[Note]]:
    """Return the result of the first of `leads` that runs on `trace` (None when none does), and a note per lead
    refused (`refused`: (lead, why) found before the run) or refusing, naming why and what led instead."""
    refused = list(refused)
    result = None
    for name in leads:
        try:
            result = analyze_with(trace, name, (params or {}).get(name), context)
            break
        except ResultError:
            raise
        except AnalyzerError as err:
            refused.append((name, str(err)))
    then = "" if result is None else f"; {result.analyzer} leads instead (next in the evidence's ranking)"
    return result, [(f"{name} skipped", f"{why.rstrip('.')}{then}.") for name, why in refused]


def streamed_defaults(why: str) -> tuple[dict[str, str], list[Note]]:
    """Return `strategy.streamed_strategies` of the defaults, led by the first lead that streams (a lead with no
    streamed computation is left out with a note, as the defaults' other analyzers that need every pattern are)."""
    chosen, notes = streamed_strategies((*LEADS, *DEFAULT_ANALYZERS[1:]), why, leave_out=True)
    leads = [name for name in chosen if name in LEADS and chosen[name] == "streamed"][:1]
    for name in chosen:
        if name in LEADS and chosen[name] == "full":  # its one backward pass would hold every layer's attention
            notes.append((f"{name} left out", f"{name} has no streamed computation, and {why} (a default analyzer)"))
    return {name: strategy for name, strategy in chosen.items() if name not in LEADS or name in leads}, notes


def run_analyzers(
    trace: Trace, strategies: Mapping[str, str], params: Mapping[str, Any], context: RunContext,
    leads: tuple[list[str], list[Note]] | None = None, progress: Stage | None = None,
) -> tuple[list[AnalyzerResult], list[Note]]:
    """Return (the results, a note per default analyzer skipped): the analysis loop of `interpret.pipeline`, each
    analyzer run with its strategy (`strategies`: name -> "full" or "streamed").

    With the defaults (`leads`: the leads the model exposes every hook point of, and why each other one is not),
    the first of those that runs leads, and one that runs the model and cannot run on these inputs (no decision
    to score, inputs that are not token ids) is skipped with a note; an analyzer the user named, or a result that
    failed its checks, is an error as always.
    """
    results, skipped = [], []
    defaults = leads is not None
    batch = trace.encoded.batch
    advance = begin(progress, f"analyze ({len(strategies)} analyzers × {batch} examples)", len(strategies) * batch)
    for name, strategy in strategies.items():
        if leads is not None and name == LEADS[0]:
            lead, notes = run_lead(trace, context, params, *leads)
            results.extend([lead] if lead is not None else [])
            skipped.extend(notes)
            advance(batch)
            continue
        try:
            results.append(analyze_with(trace, name, params.get(name), context, strategy))
            advance(batch)
        except AnalyzerError as err:
            if not defaults or isinstance(err, ResultError) or not registry.get(name).needs_model:
                raise
            skipped.append((f"{name} skipped", str(err)))
    return results, skipped
