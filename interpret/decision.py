"""The decision being explained: the model's prediction and the target's probability, per example."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from interpret.errors import InputError, suggest
from interpret.trace import Trace


@dataclass(frozen=True)
class Decision:
    """One example's decision.

    kind: "class" (classifier), "token" (next token of a language model) or "none" (a bare encoder).
    predicted / predicted_probability: the model's own top choice.
    target / target_index / probability: what is explained (the prediction unless a target was given).
    """

    kind: Literal["class", "token", "none"]
    predicted: str = ""
    predicted_probability: float | None = None
    target: str = ""
    target_index: int | None = None
    probability: float | None = None


def decisions(
    model: nn.Module,
    trace: Trace,
    tokenizer: Any = None,
    target: int | str | None = None,
    head: nn.Module | None = None,
) -> list[Decision]:
    """Return one Decision per example from the trace's model output (and `head` for a bare encoder)."""
    logits, kind = _logits(model, trace, head)
    if logits is None:
        return [Decision(kind="none") for _ in range(trace.encoded.batch)]
    probabilities = logits.double().softmax(-1).cpu()
    names = _label_names(model, head, tokenizer, kind, probabilities.shape[-1])
    wanted = None if target is None else resolve_target(target, names, tokenizer, kind)
    out = []
    for row in probabilities:
        best = int(row.argmax())
        index = best if wanted is None else wanted
        out.append(
            Decision(
                kind=kind,
                predicted=names(best),
                predicted_probability=float(row[best]),
                target=names(index),
                target_index=index,
                probability=float(row[index]),
            )
        )
    return out


def resolve_target(target: int | str, names: Any, tokenizer: Any, kind: str) -> int:
    """Return the class index or token id that `target` (an index, a label or a token) names."""
    if isinstance(target, int) or (isinstance(target, str) and target.lstrip("-").isdigit()):
        return int(target)
    if kind == "class":
        labels = list(names.labels)
        if target in labels:
            return labels.index(target)
        raise InputError(f"target {target!r} is not a label of this model;{suggest(target, labels)} labels: {', '.join(labels)}.")
    token_id = tokenizer.convert_tokens_to_ids(target) if tokenizer is not None else None
    unknown = getattr(tokenizer, "unk_token_id", None)
    if token_id is None or (token_id == unknown and target != getattr(tokenizer, "unk_token", None)):
        raise InputError(f"target token {target!r} is not in the vocabulary; pass a token the tokenizer knows or an id.")
    return int(token_id)


class _Names:
    """Index → label (class labels or decoded tokens)."""

    def __init__(self, labels: Sequence[str], tokenizer: Any = None) -> None:
        self.labels = list(labels)
        self.tokenizer = tokenizer

    def __call__(self, index: int) -> str:
        if self.tokenizer is not None:
            return str(self.tokenizer.convert_ids_to_tokens(index))
        return self.labels[index] if 0 <= index < len(self.labels) else f"class {index}"


def _label_names(model: nn.Module, head: nn.Module | None, tokenizer: Any, kind: str, size: int) -> _Names:
    if kind == "token":
        return _Names([], tokenizer)
    labels = getattr(head, "labels", None)
    if labels is None:
        id2label = getattr(getattr(model, "config", None), "id2label", None)
        if isinstance(id2label, dict) and len(id2label) == size:
            labels = [str(id2label[i]) for i in range(size)]
    return _Names(labels or [f"class {i}" for i in range(size)])


def _logits(model: nn.Module, trace: Trace, head: nn.Module | None) -> tuple[Tensor | None, Literal["class", "token", "none"]]:
    """Return logits [batch, classes] or [batch, vocab] at the readout position, and their kind."""
    output = trace.output
    encoded = trace.encoded
    if head is not None:
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output
        with torch.no_grad():
            return head(hidden, encoded.attention_mask), "class"
    logits = getattr(output, "logits", output)
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        return None, "none"
    if logits.dim() == 2 and trace.meta.kind in ("encoder", "vision"):
        return logits, "class"
    if logits.dim() == 3 and getattr(getattr(model, "config", None), "vocab_size", None) == logits.shape[-1]:
        side = encoded.decoder if encoded.decoder is not None else encoded
        last = side.attention_mask.long().cumsum(-1).argmax(-1)  # the last real position of each example
        return logits[torch.arange(logits.shape[0]), last], "token"
    if logits.dim() == 2:
        return logits, "class"
    return None, "none"
