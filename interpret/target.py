"""`Target`: what one example's explanation is for, resolved once per example by the decision step.

Every analyzer receives one Target per example (`RunContext.targets`); none assumes example 0's. A Target
says which output is scored (a class, or token ids at given positions), against what (a contrast), where
the decision reads the sequence (its pooling), and why it was chosen (the prediction, the user, the gold
label).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from jaxtyping import Float

TargetKind = Literal["class", "token", "similarity", "none"]
TargetSource = Literal["prediction", "given", "gold", "generated"]
Pooling = Literal["first", "last", "mean", "patches", "first_two", "first_and_patches", "targets"]


@dataclass(frozen=True)
class Target:
    """What one example's explanation is for.

    kind: "class" (a classifier's class, or the class of a head on a bare encoder), "token" (token ids of a
        language model or of an encoder-decoder's target side, each scored at a position), "similarity" (a
        dual encoder's text-image logit), or "none" (the model makes no decision that can be scored: gradient
        analyzers refuse such an example).
    ids: the class index (one), or the token ids scored, one per step: (next token,) for a language model,
        the continuation's tokens, or an encoder-decoder's target tokens.
    positions: for "token", the position (on the decision's side: the decoder of an encoder-decoder) whose
        logits score ids[i]; () for a class or a similarity (which has no ids either).
    labels: a readable label per id (class names, or tokens as the tokenizer writes them).
    contrast / contrast_labels: the alternative's ids (same length as ids) for "why this rather than that"
        (score = logit(id) − logit(contrast)); () when the explanation is not contrastive.
    source: "prediction" (the model's own top choice), "given" (named by the user), "gold" (the example's
        gold label from the input file), "generated" (tokens the model generated greedily, `interpret.decision.generate`).
    pooling: the positions the decision reads and their weights (summing to one), on the side the readout
        of attention analyzers starts from (the decoder for an encoder-decoder): (0, 1.0) for a [CLS]-pooled
        classifier, the last real token for a decoder, every real position (1/n each) for a mean-pooled head.
    image_pooling: the same on the image side of a text-image dual encoder (its vision tower's class token,
        ((0, 1.0),)); () where the decision reads no image, or none that positions stand for (an attention head).
    """

    kind: TargetKind
    ids: tuple[int, ...] = ()
    positions: tuple[int, ...] = ()
    labels: tuple[str, ...] = ()
    contrast: tuple[int, ...] = ()
    contrast_labels: tuple[str, ...] = ()
    source: TargetSource = "prediction"
    pooling: tuple[tuple[int, float], ...] = field(default=())
    image_pooling: tuple[tuple[int, float], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.kind == "class" and len(self.ids) != 1:
            raise ValueError(f"a class target has one id, got {self.ids}")
        if self.kind == "similarity" and (self.ids or self.positions or self.contrast):
            raise ValueError(f"a similarity target has no ids, positions or contrast, got {self.ids} at {self.positions}")
        if self.kind == "token" and (not self.ids or len(self.positions) != len(self.ids)):
            raise ValueError(f"a token target needs one position per id, got ids {self.ids} at {self.positions}")
        if self.contrast and len(self.contrast) != len(self.ids):
            raise ValueError(f"contrast {self.contrast} must have one id per target id {self.ids}")
        for rows in (self.pooling, self.image_pooling):
            if rows and abs(sum(weight for _, weight in rows) - 1.0) > 1e-9:
                raise ValueError(f"pooling weights must sum to one, got {rows}")

    @property
    def label(self) -> str:
        """Return the target as one readable string ("positive", "Ġcat", "a b c" for several tokens)."""
        text = " ".join(self.labels) if self.labels else ", ".join(str(i) for i in self.ids)
        if self.contrast:
            versus = " ".join(self.contrast_labels) if self.contrast_labels else ", ".join(map(str, self.contrast))
            text = f"{text} vs {versus}"
        return text

    def readout_weights(self, pos: int) -> Float[np.ndarray, " pos"]:
        """Return the decision's pooling as a weight vector over the `pos` (padded) positions."""
        return _weights(self.pooling, pos)

    def image_weights(self, pos: int) -> Float[np.ndarray, " pos"]:
        """Return the decision's pooling of the image side as a weight vector over its `pos` positions."""
        return _weights(self.image_pooling, pos)

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict of every field."""
        return {
            "kind": self.kind,
            "ids": list(self.ids),
            "positions": list(self.positions),
            "labels": list(self.labels),
            "contrast": list(self.contrast),
            "contrast_labels": list(self.contrast_labels),
            "source": self.source,
            "pooling": [[position, weight] for position, weight in self.pooling],
            "image_pooling": [[position, weight] for position, weight in self.image_pooling],
            "label": self.label,
        }


def uniform_pooling(positions: Sequence[int]) -> tuple[tuple[int, float], ...]:
    """Return equal weights over `positions` (the pooling of a mean-pooled head or of several target steps)."""
    positions = list(dict.fromkeys(int(p) for p in positions))
    if not positions:
        return ()
    return tuple((position, 1.0 / len(positions)) for position in positions)


def _weights(pooling: tuple[tuple[int, float], ...], pos: int) -> Float[np.ndarray, " pos"]:
    weights = np.zeros(pos)
    for position, weight in pooling:
        weights[position] += weight
    return weights
