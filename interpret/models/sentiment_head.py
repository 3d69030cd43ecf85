"""The default model's sentiment heads: small modules from an encoder's hidden states to class logits.

Both read the sentence embedding MiniLM was trained to produce (`embed_sentences`: the mean of the last
hidden states over real tokens, L2-normalised), so both read every real position with equal weight
(`pooling = "mean"`). `SentimentHead` is the logistic-regression head the default model uses;
`CentroidHead` is the earlier nearest-centroid head, kept for its callers and as a baseline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
import torch
from jaxtyping import Float, Shaped
from torch import Tensor, nn

from interpret.errors import InputError
from interpret.types import Residual

# 1 (or True) marks a real token; any dtype, as tokenizers give int64 and callers often hold a bool mask.
Mask = Shaped[Tensor, "batch pos"]

LABELS = ("negative", "positive")
TEMPERATURE = 20.0  # CentroidHead: cosine similarities lie in [-1, 1]; this spreads them into usable logits
HEAD_FORMAT = "sentiment-logistic-v1"  # bump when the cached head's layout or the fitting changes


@dataclass(frozen=True)
class HeadCard:
    """What a fitted SentimentHead was fitted on and how well it does; cached beside its weights."""

    n_train: int
    c: float  # the inverse L2 strength chosen by cross-validation on the training sentences
    cv_log_loss: float  # the mean cross-validated log loss at that C
    heldout_correct: int
    n_heldout: int
    plain_correct: int
    n_plain: int

    @property
    def heldout_accuracy(self) -> float:
        """Return the fraction of held-out sentences classified correctly."""
        return self.heldout_correct / self.n_heldout

    @property
    def note(self) -> str:
        """Return the one-sentence demonstration note shown by every report made with this head."""
        return (
            f"Demonstration head: logistic regression on MiniLM-L6 sentence embeddings, fitted on {self.n_train}"
            f" sentiment sentences written for this project; held-out accuracy {100 * self.heldout_accuracy:.1f}%"
            f" on {self.n_heldout} sentences."
        )

    def to_metadata(self) -> dict[str, str]:
        """Return the card as safetensors metadata (strings only; repr keeps floats exact)."""
        return {key: repr(value) for key, value in asdict(self).items()} | {"format": HEAD_FORMAT}

    @classmethod
    def from_metadata(cls, meta: dict[str, str]) -> HeadCard:
        """Return the card stored by `to_metadata`; KeyError or ValueError when `meta` is not one."""
        if meta.get("format") != HEAD_FORMAT:
            raise ValueError(f"format {meta.get('format')!r} is not {HEAD_FORMAT!r}")
        counts = ("n_train", "heldout_correct", "n_heldout", "plain_correct", "n_plain")
        card = cls(
            **{name: int(meta[name]) for name in counts}, c=float(meta["c"]), cv_log_loss=float(meta["cv_log_loss"])
        )
        if min(card.n_train, card.n_heldout, card.n_plain) <= 0 or not (
            0 <= card.heldout_correct <= card.n_heldout and 0 <= card.plain_correct <= card.n_plain
        ):
            raise ValueError(f"the counts of {card} are out of range")
        return card


class SentimentHead(nn.Module):
    """Logistic-regression sentiment head on mean-pooled, normalised token states: logits [batch, 2].

    forward: normalise the mean of the real positions' hidden states, then one linear layer to the logits
    of ("negative", "positive"). Differentiable end to end, so gradient methods attribute through it. The
    logits are ∓(w·x + b)/2, so their softmax is exactly the fitted model's σ(w·x + b) for "positive".
    """

    pooling: ClassVar[str] = "mean"  # reads every real position with equal weight

    def __init__(
        self, weight: Float[Tensor, "2 d_model"], bias: Float[Tensor, "2"], card: HeadCard | None = None
    ) -> None:
        super().__init__()
        self.linear = nn.Linear(weight.shape[1], 2)
        with torch.no_grad():
            self.linear.weight.copy_(weight)
            self.linear.bias.copy_(bias)
        self.linear.requires_grad_(False)  # fitted once; gradients still flow to the hidden states
        self.normalize = L2Normalize()
        self.labels = LABELS
        self.card = card

    @classmethod
    def from_logistic(
        cls, coef: Float[np.ndarray, " d_model"], intercept: float, card: HeadCard | None = None
    ) -> SentimentHead:
        """Return the head of a binary logistic model P(positive | x) = σ(coef·x + intercept)."""
        direction = torch.as_tensor(coef, dtype=torch.float32)
        weight = torch.stack([-direction, direction]) / 2
        bias = torch.tensor([-intercept, intercept], dtype=torch.float32) / 2
        return cls(weight, bias, card)

    @property
    def note(self) -> str:
        """Return the head's demonstration note ('' for a head built without a card)."""
        return self.card.note if self.card is not None else ""

    def forward(self, hidden: Residual, attention_mask: Mask) -> Float[Tensor, "batch 2"]:
        """Return logits [batch, 2] from hidden states [batch, pos, d_model] and mask [batch, pos]."""
        embedding = embed_sentences(hidden, attention_mask, self.normalize)
        logits = self.linear(embedding.to(self.linear.weight.dtype))
        finite = torch.isfinite(logits).all(-1)
        if not finite.all():
            rows = (~finite).nonzero().flatten().tolist()
            raise InputError(f"the hidden states of example(s) {rows} are not finite; check the model and its inputs.")
        return logits


class CentroidHead(nn.Module):
    """Nearest-centroid classifier on mean-pooled, normalised token states: logits [batch, n_classes].

    The logits are the cosine similarities to the normalised centroids times TEMPERATURE.
    """

    pooling: ClassVar[str] = "mean"

    def __init__(self, centroids: Float[Tensor, "label d_model"], labels: tuple[str, ...]) -> None:
        super().__init__()
        self.register_buffer("centroids", nn.functional.normalize(centroids, dim=-1))
        self.normalize = L2Normalize()
        self.labels = labels

    def forward(self, hidden: Residual, attention_mask: Mask) -> Float[Tensor, "batch label"]:
        """Return logits [batch, n_classes] from hidden states [batch, pos, d_model] and mask [batch, pos]."""
        return TEMPERATURE * embed_sentences(hidden, attention_mask, self.normalize) @ self.centroids.T


class L2Normalize(nn.Module):
    """x / ‖x‖₂ over the last axis [..., d] (torch's `normalize`): a module of its head, so that an analyzer's
    rules can reach the normalisation (`attnlrp` holds its divisor constant)."""

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.normalize(x, dim=-1)


def embed_sentences(
    hidden: Residual, attention_mask: Mask, normalize: nn.Module | None = None
) -> Float[Tensor, "batch d_model"]:
    """Return L2-normalised sentence embeddings [batch, d_model]: the mean of the real positions' states, through
    the head's `normalize` module where it has one."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    counts = weights.sum(1)  # [batch, 1]
    if (counts == 0).any():
        rows = (counts.squeeze(-1) == 0).nonzero().flatten().tolist()
        raise InputError(f"example(s) {rows} have no real token (attention_mask all zero); give each a non-empty text.")
    mean = (hidden * weights).sum(1) / counts
    return normalize(mean) if normalize is not None else nn.functional.normalize(mean, dim=-1)
