"""`study_heads`: head importance, both pruning curves and the attention entropy of a dataset, in one call
(what `interpret heads` runs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interpret.heads.curve import PruningCurve, pruning_curve
from interpret.heads.dataset import Mode, dataset_importance, dataset_metric, head_data, metric_name
from interpret.heads.importance import normalized
from interpret.heads.scoring import GatedModel
from interpret.inputs import encode
from interpret.runtime.progress import Stage, begin


@dataclass(frozen=True)
class HeadStudy:
    """What `study_heads` found.

    raw: [layer, head] Σ_x |∂L(x)/∂ξ| / N_tokens; scores: raw after per-layer ℓ2 and global min–max;
    entropy: [layer, head] mean attention entropy (nats) over examples; mode and metric name; the two curves
    (least-important-first is the method, most-important-first the contrast); tokens and examples seen.
    """

    raw: Float[Tensor, "layer head"]
    scores: Float[Tensor, "layer head"]
    entropy: Float[Tensor, "layer head"]
    mode: Mode
    metric: str
    least: PruningCurve
    most: PruningCurve
    tokens: int
    examples: int


def study_heads(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    labels: Sequence[int] | None,
    *,
    head: nn.Module | None = None,
    batch_size: int = 32,
    max_length: int | None = None,
    fraction: float = 0.1,
    threshold: float = 0.9,
    stage: Stage | None = None,
) -> HeadStudy:
    """Return the head study of `texts` (labels: class indices, or None for the label-free mode); `stage`: the
    progress hook (`interpret.runtime.progress`), in examples through the model (a pruning step passes them twice)."""
    starts = range(0, len(texts), batch_size)
    batches = [encode(tokenizer, list(texts[i:i + batch_size]), max_length=max_length) for i in starts]
    gated = GatedModel.of(model, tokenizer, batches[0], head)
    data = head_data(gated, batches, labels)
    advance = begin(stage, "head importance", data.examples)
    importance = dataset_importance(gated, data, torch.ones(gated.gate_shape), advance)
    entropy = _entropy(model, tokenizer, texts, batch_size, max_length, stage)
    lower = data.mode == "language-model"
    curves = {}
    for order in ("least", "most"):
        advance = begin(stage, f"pruning ({order} important first)", 0)  # its steps end at the threshold
        curves[order] = pruning_curve(
            lambda mask, advance=advance: dataset_importance(gated, data, mask, advance).raw,
            lambda mask, advance=advance: dataset_metric(gated, data, mask, advance),
            gated.gate_shape, metric=metric_name(data.mode), order=order, fraction=fraction, threshold=threshold,
            lower_is_better=lower,
        )
    return HeadStudy(
        raw=importance.raw, scores=normalized(importance.raw), entropy=entropy, mode=data.mode,
        metric=metric_name(data.mode), least=curves["least"], most=curves["most"], tokens=importance.tokens,
        examples=importance.examples,
    )


def _entropy(
    model: nn.Module, tokenizer: Any, texts: Sequence[str], batch_size: int, max_length: int | None, stage: Stage | None
) -> Float[Tensor, "layer head"]:
    """Return the mean attention entropy [layer, head] over examples (interpret.plugins.attention_entropy)."""
    from interpret.capture.api import collect
    from interpret.plugins.attention_entropy import attention_entropy

    advance = begin(stage, "attention entropy", len(texts))
    total: Tensor | None = None
    for start in range(0, len(texts), batch_size):
        chunk = list(texts[start:start + batch_size])
        trace = collect(model, tokenizer, chunk, names=["*attn.hook_pattern"], max_length=max_length)
        prefix = "encoder." if trace.meta.kind == "encoder-decoder" else ""
        pattern = trace.stack("attn.hook_pattern", prefix).detach().to("cpu", torch.float64)
        per_example = attention_entropy(pattern, trace.encoded.attention_mask.bool().cpu())
        total = per_example.sum(0) if total is None else total + per_example.sum(0)
        advance(len(chunk))
    assert total is not None
    return total / len(texts)


def describe_mode(mode: Mode) -> str:
    """Return the mode in words for a report."""
    return {
        "labels": "classification against the given labels (metric: accuracy)",
        "label-free": "label-free: no labels were given, so the loss and the metric are against the unpruned"
                      " model's own predictions (metric: agreement, the share of examples whose predicted class"
                      " with the heads off is the unpruned model's)",
        "language-model": "language model: next-token loss (metric: perplexity)",
    }[mode]
