"""`explain`: load → encode → collect → analyze → Report, in one call."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import torch
from torch import Tensor, nn

from interpret.analyze import analyze, required_names
from interpret.collect import collect
from interpret.collect.engine import GIB
from interpret.decision import decisions
from interpret.errors import AnalyzerError, suggest
from interpret.inputs import Encoded
from interpret.report import Report, RunInfo, build_report
from interpret.versions import library_versions

DEFAULT_ANALYZERS = ("rollout", "flow")


def explain(
    model: nn.Module,
    tokenizer: Any,
    inputs: str | Sequence[str] | Tensor | Encoded,
    analyzers: Sequence[str] = DEFAULT_ANALYZERS,
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    target: int | str | None = None,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    max_length: int | None = None,
    decoder_inputs: str | Sequence[str] | Tensor | None = None,
    head: nn.Module | None = None,
    seed: int = 0,
    model_id: str | None = None,
    budget_bytes: int | None = 2 * GIB,
) -> Report:
    """Return a Report explaining the model's decision on `inputs` with each analyzer in `analyzers`.

    params: per analyzer, its parameters ({"rollout": {"head_fusion": "max"}}).
    target: a class index or label (classifiers) or a token (language models); default: the prediction.
    layers / heads: what the attention views embed (analyzers still see every layer they need).
    head: a module mapping the model's hidden states and mask to class logits (for a bare encoder).
    """
    started = time.perf_counter()
    torch.manual_seed(seed)
    params = dict(params or {})
    unknown = [name for name in params if name not in analyzers]
    if unknown:
        raise AnalyzerError(
            f"params given for {unknown[0]!r}, which is not among the analyzers run ({', '.join(analyzers)});"
            f"{suggest(unknown[0], analyzers)} add it with -a/analyzers= or drop its params."
        )
    names = list(dict.fromkeys(["*attn.hook_pattern", *required_names(analyzers)]))
    trace = collect(
        model, tokenizer, inputs, names=names, max_length=max_length,
        decoder_inputs=decoder_inputs, budget_bytes=budget_bytes,
    )
    decided = decisions(model, trace, tokenizer, target, head)
    target_index = decided[0].target_index if decided else None
    results = [
        analyze(trace, name, model=model, params=params.get(name), tokenizer=tokenizer, target=target_index, seed=seed)
        for name in analyzers
    ]
    first = decided[0]
    run = RunInfo(
        model_id=model_id or trace.meta.model_id,
        revision=str(getattr(getattr(model, "config", None), "_commit_hash", None) or ""),
        attention=trace.meta.attention,
        kind=trace.meta.kind,
        inputs=tuple(trace.encoded.texts or ()),
        target=None if target is None else str(target),
        prediction=first.predicted,
        probability=first.probability,
        seed=seed,
        versions=dict(library_versions()),
        wall_seconds=time.perf_counter() - started,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra={"decisions": [d.__dict__ for d in decided], "analyzers": list(analyzers)},
    )
    return build_report(trace, results, run, layers=layers, heads=heads)
