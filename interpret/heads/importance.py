"""Head importance (Michel, Levy and Neubig 2019, "Are Sixteen Heads Really Better than One?", eq. 2):

    I_h = Σ_x |∂L(x)/∂ξ_h|  /  N_tokens,

ξ_h the gate of head h held at 1 (or at the current mask while pruning), L(x) the loss of one example x,
N_tokens the real tokens of the dataset (as the bertology script divides). The absolute value is taken per
example: every row of a batch gets gates of its own ([rows, layer, head]), so that Σ over rows of |∂L_r/∂ξ_r|
is exactly what one example at a time gives, whatever the batch size.

What the bertology example of Hugging Face (`run_bertology.py`, `compute_heads_importance`) does differently,
and why this module does not follow it: it backpropagates the batch-mean loss into one shared `head_mask`
and adds `head_mask.grad.abs()` after every batch without zeroing the gradient. So (a) it takes |Σ_batch g|
rather than Σ |g| — examples whose gradients disagree in sign cancel, and the result depends on how the data
was batched — and (b) at batch t it adds |Σ_{s≤t} g_s|, the running sum of all earlier batches, again. Both
make the score a property of the batching rather than of the data; here it is the paper's expectation of
|∂L/∂ξ_h| per example, and a batch of 32 equals 32 single examples.

Normalisations: per-layer ℓ2 (Michel et al. Sec. 4.1, after Molchanov et al. 2017): I_l,h / ‖I_l,·‖₂; global
min–max (the bertology script's `normalize_global_importance`): (I − min I) / (max I − min I).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from interpret.errors import AnalyzerError, ResultError

RowLoss = Callable[[Tensor], Tensor]  # gates [rows, layer, head] -> loss [rows]


@dataclass(frozen=True)
class Importance:
    """Accumulated head importance.

    raw: [layer, head] Σ_x |∂L(x)/∂ξ| / tokens (float64). tokens: real tokens seen. examples: rows seen.
    """

    raw: Float[Tensor, "layer head"]
    tokens: int
    examples: int


def batch_gradients(loss_of: RowLoss, rows: int, mask: Float[Tensor, "layer head"]) -> Float[Tensor, "rows layer head"]:
    """Return ∂L_r/∂ξ_r [rows, layer, head] of each row's loss with respect to its own gates, held at `mask`."""
    gates = mask.detach().to(torch.float32).expand(rows, *mask.shape).clone().requires_grad_(True)
    losses = loss_of(gates)
    if losses.shape != (rows,):
        raise AnalyzerError(f"the loss has shape {tuple(losses.shape)}; expected one loss per row ({rows},).")
    (grad,) = torch.autograd.grad(losses.sum(), gates)
    return grad


def accumulate(
    batches: Iterable[tuple[RowLoss, int, int]], mask: Float[Tensor, "layer head"]
) -> Importance:
    """Return the importance over `batches` of (loss_of, rows, real tokens), gates held at `mask` [layer, head].

    Each row's gradient is taken with respect to its own gates, then |·| per row, then summed (float64)."""
    total = torch.zeros(mask.shape, dtype=torch.float64)
    tokens = examples = 0
    for loss_of, rows, n_tokens in batches:
        grad = batch_gradients(loss_of, rows, mask.to(torch.float32))
        total += grad.detach().abs().sum(0).to("cpu", torch.float64)
        tokens += n_tokens
        examples += rows
    if tokens == 0:
        raise AnalyzerError("no tokens to estimate head importance on; give at least one non-empty example.")
    return Importance(total / tokens, tokens, examples)


def normalize_by_layer(importance: Float[Tensor, "layer head"], exponent: float = 2.0) -> Float[Tensor, "layer head"]:
    """Return I_l,h / (‖I_l,·‖_p + 1e-20) (p = `exponent`; Michel et al. Sec. 4.1 use the ℓ2 norm per layer)."""
    norm = importance.abs().pow(exponent).sum(-1).pow(1.0 / exponent)
    return importance / (norm[:, None] + 1e-20)


def normalize_global(importance: Float[Tensor, "layer head"]) -> Float[Tensor, "layer head"]:
    """Return (I − min I) / (max I − min I) over all heads; ResultError when every head scores the same."""
    low, high = importance.min(), importance.max()
    if not bool(high > low):
        raise ResultError(
            f"every head has the same importance ({float(high):.3g}); min-max scaling is undefined. Use more"
            " examples, or turn global normalisation off."
        )
    return (importance - low) / (high - low)


def normalized(
    raw: Float[Tensor, "layer head"], by_layer: bool = True, global_min_max: bool = True
) -> Float[Tensor, "layer head"]:
    """Return `raw` after the chosen normalisations (per-layer ℓ2 first, then global min–max)."""
    scores = raw
    if by_layer:
        scores = normalize_by_layer(scores)
    if global_min_max:
        scores = normalize_global(scores)
    return scores


def ranked(scores: Float[Tensor, "layer head"], mask: Float[Tensor, "layer head"] | None = None) -> list[tuple[int, int, float]]:
    """Return (layer, head, score) of the heads still on in `mask`, most important first (ties: lower layer,
    then lower head first)."""
    values = scores.tolist()
    heads = [
        (layer, head, float(values[layer][head]))
        for layer in range(scores.shape[0])
        for head in range(scores.shape[1])
        if mask is None or float(mask[layer, head]) != 0.0
    ]
    return sorted(heads, key=lambda item: (-item[2], item[0], item[1]))
