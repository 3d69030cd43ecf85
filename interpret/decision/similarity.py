"""The decision of a text-image dual encoder: how well each example's text matches its image.

A dual encoder (CLIP, SigLIP, OWL-ViT, ...) scores text i against image j by one logit, the model's
`logits_per_text[i, j]`: CLIP's τ·cos(t_i, v_j) (Radford et al. 2021, Figure 3), SigLIP's τ·cos(t_i, v_j) + b
(Zhai et al. 2023, Algorithm 1). Each example pairs one text with one image, so its decision is that pair's
logit, the diagonal `logits_per_text[b, b]` (`pair_logits`): what the gradient methods differentiate. SigLIP is
trained with a sigmoid per pair, so σ(logit) is the probability that the pair matches (`match_probability`);
CLIP's softmax runs over a batch of candidates and gives no probability of one pair, so none is claimed.
Where the decision reads the text is where the text tower pools (`interpret.capture.hf.pooling`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from interpret.errors import InputError


def is_pair_output(output: Any) -> bool:
    """Whether `output` is a dual encoder's (it holds `logits_per_text`, [texts, images])."""
    logits = getattr(output, "logits_per_text", None)
    return isinstance(logits, Tensor) and logits.dim() == 2 and logits.is_floating_point()


def pair_logits(output: Any) -> Tensor:
    """Return each example's text-image logit [batch]: the diagonal of `logits_per_text` [batch, batch]."""
    logits = output.logits_per_text
    if logits.shape[0] != logits.shape[1]:
        raise InputError(
            f"{logits.shape[0]} texts and {logits.shape[1]} images: a dual encoder's decision pairs each text with"
            " one image; give as many images as texts."
        )
    return logits.diagonal()


def scores_sigmoid(model: nn.Module) -> bool:
    """Whether `model` is trained with a sigmoid per pair (SigLIP's learned `logit_bias`), so σ(logit) is the
    probability that a pair matches."""
    return isinstance(getattr(model, "logit_bias", None), Tensor)


def match_probability(logit: float, sigmoid: bool) -> float | None:
    """Return σ(logit), the probability that a pair matches, for a sigmoid-trained model; else None."""
    return float(torch.tensor(logit, dtype=torch.float64).sigmoid()) if sigmoid else None
