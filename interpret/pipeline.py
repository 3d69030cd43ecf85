"""One plan, one runner: what `explain` and every audit batch run.

`plan_for(...)` turns a request's parts into a frozen `Plan` once; `run_plan(plan, model, tokenizer, inputs)` runs
it on one batch: the only place that calls collect → decide → run context → analyze → classes side by side →
evidence. The audit runs its halves apart (`interpret.audit.overlap`): `capture` (collect, decide) and `analyzed`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from interpret.analysis import AnalyzerResult, registry, required_names
from interpret.analysis.contract import RunContext
from interpret.analysis.defaults import DEFAULT_ANALYZERS, LEADS
from interpret.analysis.lead import Note, capturable_leads, run_analyzers, streamed_defaults
from interpret.analysis.run import analyze_with, bound_context, resolve_name, retargeted
from interpret.analysis.strategy import streamed_strategies
from interpret.capture import collect
from interpret.capture.api import capturable_for
from interpret.decision.decide import Decision, TargetRequest, decision_head, reader_for
from interpret.decision.generate import generated_inputs
from interpret.errors import AnalyzerError, HookNameError, MemoryBudgetError, suggest
from interpret.evidence import Evidence, evidence_or_reason
from interpret.evidence.causality import later_positions_note
from interpret.request import EvidenceOptions, Limits, Subject
from interpret.runtime.progress import Stage
from interpret.trace import Trace


@dataclass(frozen=True)
class Plan:
    """What every batch of a run is computed with, read from no model (picklable apart from `head`, a module).

    strategies: analyzer → "full" or "streamed", in run order; hook_names: what they read (a capture adds what the
    leads it runs read); head: the caller's decision head (None: the one recorded for the model, `decision_head`);
    generate: tokens each text is followed by, generated greedily and explained as its continuation
    (`decision.generate`); streaming: what a capture over `budget_bytes` does ("auto": runs `streamed`; else
    refused); offload: a streamed trace in pinned host memory (CUDA); attention: the audit's attention
    implementation (`interpret.audit.kernel`; the caller switches it); leads: the defaults' lead rule, the candidate leads in
    order (`defaults.LEADS`, an audit's `AUDIT_LEADS`: each capture leads with the first its model exposes,
    `analysis.lead`), None when the analyzers are not the defaults; compare: the classes side by side; notes: the
    report's notes so far.
    """

    strategies: Mapping[str, str]
    params: Mapping[str, Mapping[str, Any]]
    hook_names: tuple[str, ...]
    request: TargetRequest = TargetRequest()
    head: nn.Module | None = None
    seed: int = 0
    max_length: int | None = None
    generate: int | None = None
    budget_bytes: int | None = Limits().capture_bytes
    streaming: str = "off"
    offload: bool = False
    evidence: EvidenceOptions = EvidenceOptions(enabled=False)
    attention: str | None = None
    leads: tuple[str, ...] | None = None
    compare: tuple[int | str, ...] | None = None
    notes: tuple[Note, ...] = ()

    @property
    def analyzers(self) -> tuple[str, ...]:
        return tuple(self.strategies)

    def streamed(self, why: str) -> Plan:
        """Return this plan with no pattern captured (`why`, in words): each analyzer runs its streamed computation;
        one without is refused, or left out with a note from the defaults (`lead.streamed_defaults`)."""
        if self.leads is not None:
            strategies, left_out = streamed_defaults(why)
        else:
            strategies, left_out = streamed_strategies(self.strategies, why)
        notes = (*self.notes, *left_out,
                 ("Streaming", f"no attention pattern was captured ({why}); streamed analyzers ran"))
        return replace(self, strategies=strategies, hook_names=tuple(required_names(strategies)) or ("*attn.hook_z",),
                       streaming="on", offload=True, leads=None, notes=notes)


def plan_for(
    analyzers: Sequence[str], *, params: Mapping[str, Mapping[str, Any]] | None, subject: Subject,
    evidence: EvidenceOptions, limits: Limits, head: nn.Module | None, seed: int, notes: Sequence[Note] = (),
) -> Plan:
    """Return the Plan of an `explain` request, before any model is read: an old streaming analyzer's name as its
    twin streamed, params checked, the defaults' lead rule, every pattern captured besides what the analyzers
    read."""
    steps = [resolve_name(name) for name in analyzers]  # an old streaming analyzer's name: its twin, streamed
    renamed = {old: new for old, (new, _) in zip(analyzers, steps)}
    names = [name for name, _ in steps]
    params = {renamed.get(name, name): value for name, value in (params or {}).items()}
    unknown = [name for name in params if name not in names]
    if unknown:
        raise AnalyzerError(
            f"params given for {unknown[0]!r}, which is not among the analyzers run ({', '.join(names)});"
            f"{suggest(unknown[0], names)} add it with -a/analyzers= or drop its params."
        )
    strategies = {name: forced or "full" for name, forced in steps}
    leads = LEADS if tuple(names) == DEFAULT_ANALYZERS else None
    # Under the lead rule the capture adds what the lead the model exposes reads (`capture`); the first candidate's
    # own hook points are not asked for here, or a model without them (a mixture of experts has no one MLP hidden
    # layer) would be refused before another lead could run.
    read = {name: strategy for name, strategy in strategies.items() if leads is None or name not in leads}
    plan = Plan(
        strategies=strategies, params=params, hook_names=tuple(dict.fromkeys(["*attn.hook_pattern", *required_names(read)])),
        request=TargetRequest(target=subject.target, contrast=subject.contrast, gold=subject.explain_gold,
                              generated=subject.generate is not None),
        head=head, seed=seed, max_length=limits.max_length, generate=subject.generate,
        budget_bytes=limits.capture_bytes, streaming=limits.streaming, evidence=evidence,
        leads=leads,
        compare=None if subject.compare is None else tuple(subject.compare), notes=tuple(notes),
    )
    return plan.streamed("streaming=on") if limits.streaming == "on" else plan


@dataclass(frozen=True)
class Captured:
    """A batch after the model ran on it: the plan as run (streamed when the capture fell back), the trace, each
    example's decision, the run context of those decisions (the model's Capturable and decision reader as the
    capture read them: the analysis reads neither again), each example's gold label and, under the plan's lead
    rule, the leads the model exposes and (lead, why) of the others (`lead.capturable_leads`)."""

    plan: Plan
    trace: Trace
    decided: tuple[Decision, ...]
    context: RunContext
    gold: Sequence[str | None] | None = None
    leads: tuple[list[str], list[Note]] | None = None

    @property
    def head(self) -> nn.Module | None:
        """Return the decision head the batch was decided through (the plan's or the model's recorded one), if any."""
        return None if self.context.runner is None else self.context.runner.reader.head


@dataclass(frozen=True)
class ClassRuns:
    """One class-specific analyzer's result once per compared class (the rows: `interpret.report.classes`):
    roles [row], labels [batch][row], results [row]."""

    roles: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...]
    results: tuple[AnalyzerResult, ...]


@dataclass(frozen=True)
class Ran:
    """A batch run: its capture, results, notes (the plan's, the classes', the evidence's), a note per default
    analyzer skipped, the evidence (None when not asked or not computable) and the classes' re-runs."""

    captured: Captured
    results: tuple[AnalyzerResult, ...]
    notes: tuple[Note, ...]
    skipped: tuple[Note, ...]
    evidence: Evidence | None
    classes: tuple[ClassRuns, ...]

    @property
    def measured(self) -> Evidence:
        """Return the evidence, or raise AnalyzerError saying why none was computed (for callers that need it)."""
        if self.evidence is None:
            raise AnalyzerError(f"evidence {dict(self.notes).get('Evidence', 'was not asked for')}.")
        return self.evidence


def run_plan(
    plan: Plan, model: nn.Module, tokenizer: Any, inputs: Any, *, gold: Sequence[str | None] | None = None,
    decoder: Any = None, continuations: Sequence[str] | None = None, progress: Stage | None = None,
) -> Ran:
    """Return `plan` run on `inputs` (`collect`'s; `decoder`: its decoder_inputs; `gold`: per example)."""
    captured = capture(plan, model, tokenizer, inputs, gold=gold, decoder=decoder, continuations=continuations)
    return analyzed(captured, progress)


def capture(
    plan: Plan, model: nn.Module, tokenizer: Any, inputs: Any, *, gold: Sequence[str | None] | None = None,
    decoder: Any = None, continuations: Sequence[str] | None = None,
) -> Captured:
    """Return the trace of the plan's hook names on `inputs`, the decisions read from it and their run context (a
    capture over the budget runs `plan.streamed` when the plan's streaming is "auto")."""
    capturable = capturable_for(model, tokenizer)  # the model's structure and decision reader are read once
    if plan.generate is not None:
        inputs, decoder = generated_inputs(capturable, tokenizer, inputs, plan.generate, max_length=plan.max_length)

    def collected(plan: Plan) -> tuple[Trace, tuple[list[str], list[Note]] | None]:
        leads = None if plan.leads is None else capturable_leads(capturable, plan.leads)
        names = dict.fromkeys([*plan.hook_names, *required_names(leads[0] if leads else ())])
        return collect(capturable, tokenizer, inputs, names=list(names), max_length=plan.max_length,
                       decoder_inputs=decoder, budget_bytes=plan.budget_bytes, continuations=continuations,
                       offload=plan.offload), leads

    try:
        trace, leads = collected(plan)
    except MemoryBudgetError as err:
        if plan.streaming != "auto":
            raise
        over = str(err).split(";")[0]
        plan = plan.streamed(f"their capture is over the budget ({over})")
        try:
            trace, leads = collected(plan)
        except HookNameError as refused:  # the streamed computations read what this model does not offer
            raise MemoryBudgetError(
                f"{over}, and this model cannot run the streamed analyzers instead ({str(refused).split('; pick')[0]});"
                " raise the capture budget (limits=Limits(capture_bytes=...)), or capture fewer layers or smaller"
                " inputs."
            ) from None
    head = decision_head(model, plan.head)  # issue 27: the head `interpret.load()` recorded for the default model
    reader = reader_for(model, trace.meta.kind, head, trace.output)
    decided = tuple(reader.decide(trace, tokenizer, plan.request, gold))
    context = bound_context(trace, capturable, reader, [d.target for d in decided], tokenizer, seed=plan.seed)
    return Captured(plan=plan, trace=trace, decided=decided, context=context, gold=gold, leads=leads)


def analyzed(captured: Captured, progress: Stage | None = None) -> Ran:
    """Return the analysis of a captured batch in its run context: each analyzer with its strategy (the defaults'
    lead by the plan's rule), the classes side by side and the evidence when asked."""
    plan, trace, decided, context = captured.plan, captured.trace, captured.decided, captured.context
    results, skipped = run_analyzers(trace, plan.strategies, plan.params, context, captured.leads, progress)
    notes = list(plan.notes)
    later = later_positions_note(trace)  # a decoder that, as loaded, reads the tokens after each position
    if later is not None:
        notes.append(later)
    classes: tuple[ClassRuns, ...] = ()
    if plan.compare is not None and all(len(d.target.ids) == 1 for d in decided):
        classes = _class_runs(captured, results)
    elif plan.compare is not None:
        notes.append(("Classes side by side", "not shown: an example's target has several tokens (a continuation"
                      " or generated tokens), which the rows of single classes or tokens do not compare"))
    found = None
    if plan.evidence.enabled:
        found, why = evidence_or_reason(trace, results, context, plan.evidence.removal, plan.evidence.seeds, progress)
        if why:
            notes.append(("Evidence", why))
    return Ran(captured, tuple(results), tuple(notes), tuple(skipped), found, classes)


def _class_runs(captured: Captured, results: Sequence[AnalyzerResult]) -> tuple[ClassRuns, ...]:
    """Return each class-specific result (its analyzer runs the model, declares a readout) once per row of
    `interpret.report.classes`, each row decided through the capture's decision reader; a row whose request is the
    plan's own reuses the plan's result."""
    plan, trace, context, runner = captured.plan, captured.trace, captured.context, captured.context.runner
    assert runner is not None  # a capture's context runs the model
    chosen = [r for r in results if r.readout_of is not None and registry.get(r.analyzer).needs_model]
    if not chosen:
        return ()
    asked, contrast = plan.request, plan.request.contrast
    own = TargetRequest(target=asked.target, contrast=contrast, gold=asked.gold)
    compare = plan.compare or ()
    requests: list[tuple[str, TargetRequest]] = [("prediction", TargetRequest())]
    requests += [("asked", TargetRequest(target=value)) for value in dict.fromkeys(compare)]
    if contrast is not None:
        if contrast not in compare:
            requests.append(("contrast class", TargetRequest(target=contrast)))
        requests.append(("contrast", own))
    runs = []
    seen: set[tuple[Any, ...]] = set()  # the ids each asked request resolved to: "1" and "positive" are one class
    for role, request in requests:
        decided = runner.reader.decide(trace, context.tokenizer, request, captured.gold)
        if role == "asked":
            resolved = tuple((d.target.kind, d.target.ids, d.target.contrast) for d in decided)
            if resolved in seen:
                continue
            seen.add(resolved)
        other = None if request == own else retargeted(context, [d.target for d in decided])
        runs.append((role, [d.target.label for d in decided], other))
    roles = tuple(role for role, _, _ in runs)
    labels = tuple(tuple(labels[b] for _, labels, _ in runs) for b in range(trace.encoded.batch))
    return tuple(ClassRuns(roles, labels, tuple(
        result if other is None else analyze_with(trace, result.analyzer, plan.params.get(result.analyzer), other,
                                                  result.strategy)
        for _, _, other in runs
    )) for result in chosen)
