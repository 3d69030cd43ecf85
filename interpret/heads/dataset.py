"""A dataset in batches for head importance and pruning, and the two numbers computed over it: the importance
under a mask and the metric under a mask.

Modes: "labels" (classification against given labels; metric: accuracy), "label-free" (against the unpruned
model's own predictions; metric: agreement with them), "language-model" (next-token loss; metric: perplexity).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interpret.heads.importance import Importance, accumulate
from interpret.heads.scoring import GatedModel
from interpret.inputs import Encoded
from interpret.runtime.progress import Advance

Mode = Literal["labels", "label-free", "language-model"]


@dataclass(frozen=True)
class HeadData:
    """Batches of a dataset and each batch's labels ([rows] long; None for a language model) and the mode."""

    batches: tuple[Encoded, ...]
    labels: tuple[Int[Tensor, " _rows"] | None, ...]  # each batch its own rows (unbound: batches differ in size)
    mode: Mode

    @property
    def examples(self) -> int:
        """Rows over all batches."""
        return sum(batch.batch for batch in self.batches)


def head_data(gated: GatedModel, batches: Sequence[Encoded], labels: Sequence[int] | None) -> HeadData:
    """Return the HeadData of `batches`: labels split per batch, or (label-free) the ungated predictions."""
    if gated.kind == "token":
        return HeadData(tuple(batches), tuple(None for _ in batches), "language-model")
    if labels is None:
        return HeadData(tuple(batches), tuple(gated.predictions(batch).cpu() for batch in batches), "label-free")
    split, start = [], 0
    for batch in batches:
        split.append(torch.tensor(list(labels[start:start + batch.batch]), dtype=torch.long))
        start += batch.batch
    return HeadData(tuple(batches), tuple(split), "labels")


def dataset_importance(
    gated: GatedModel, data: HeadData, mask: Float[Tensor, "layer head"], progress: Advance | None = None
) -> Importance:
    """Return Σ_x |∂L(x)/∂ξ| / N_tokens over `data`, gates held at `mask` (one gate set per example)."""

    def batches():
        for batch, labels in zip(data.batches, data.labels, strict=True):
            # each row's loss under the gates, the rows, the real (non-padding) positions: the importance's normaliser
            yield partial(gated.losses, batch, labels=labels), batch.batch, int(batch.attention_mask.sum())
            if progress is not None:
                progress(batch.batch)

    return accumulate(batches(), mask)


def dataset_metric(
    gated: GatedModel, data: HeadData, mask: Float[Tensor, "layer head"] | None, progress: Advance | None = None
) -> float:
    """Return the metric under `mask` ([layer, head]; None: ungated): accuracy against the labels (given, or
    the unpruned predictions in label-free mode), or perplexity exp(Σ loss / Σ predicted tokens)."""
    correct = total = 0
    loss_sum, predicted = 0.0, 0
    with torch.no_grad():
        for batch, labels in zip(data.batches, data.labels, strict=True):
            if labels is None:
                loss_sum += float(gated.losses(batch, mask, None).double().sum())
                side = gated.reader.side_of(batch).attention_mask
                predicted += int((side[:, :-1].bool() & side[:, 1:].bool()).sum())
            else:
                guess = gated.logits(batch, mask).argmax(-1).cpu()
                correct += int((guess == labels).sum())
                total += batch.batch
            if progress is not None:
                progress(batch.batch)
    if data.mode == "language-model":
        return math.exp(loss_sum / max(predicted, 1))
    return correct / max(total, 1)


def metric_name(mode: Mode) -> str:
    """Return what the metric of `mode` is called."""
    return {"labels": "accuracy", "label-free": "agreement", "language-model": "perplexity"}[mode]
