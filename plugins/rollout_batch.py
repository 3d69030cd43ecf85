"""Attention rollout of a whole padded batch at once, in torch on the patterns' own device.

The same statement as `rollout_math` (Abnar & Zuidema 2020; no discard): per layer l

    Â_l = rownorm(w·I + (1 − w)·A_l),    A_l the head-fused attention,

restricted to each example's real positions, and the rollout Â_{L−1} · … · Â_start (all rows) or the
readout r = s · Â_{L−1} · … · Â_start (s the start weights over the real positions). The per-example path
(`rollout_math`) cuts every example's real block [real, real] out of the padded pattern first; here the
padded rows and columns of A_l are set to zero instead (`torch.where`, so a padded row the model left NaN
is cleared too) and nothing is added to their diagonal. A zero row and column carry nothing through a
product, so every real entry is the per-example value, summed in another order (tests: 1e-12), and every
padded entry is zero, as `scatter` leaves it. One batched operation per layer replaces a NumPy loop over
the examples, and on an accelerator the patterns never leave it: only the results come back.

A present row is one with some attention on a real key (for min fusion: in some head, as
`rollout_math.augmented_attention` decides). A present row that sums to zero, or any non-finite value,
makes `augmented` return None: the caller then runs the per-example statement, which names the row and
the cause in its error.
"""

from __future__ import annotations

from collections.abc import Sequence  # `_head`: stages may differ in head count (Swin)

import torch
from jaxtyping import Bool, Float
from torch import Tensor


def augmented(
    heads: Float[Tensor, "batch _head n n"], real: Bool[Tensor, "batch n"], head_fusion: str, residual: float
) -> Float[Tensor, "batch n n"] | None:
    """Return Â [batch, n, n] in float64 (padded rows and columns zero), or None where a present row sums to
    zero or a value is not finite (module docstring)."""
    if head_fusion == "mean":  # whole head slices added into one float64 buffer, as `rollout_math.fuse_heads`
        fused = heads[:, 0].to(torch.float64)
        for head in range(1, heads.shape[1]):
            fused.add_(heads[:, head])
        fused.div_(heads.shape[1])
    elif head_fusion == "max":
        fused = heads.amax(1).to(torch.float64)
    else:
        fused = heads.amin(1).to(torch.float64)
    keep = real[:, :, None] & real[:, None, :]
    fused = torch.where(keep, fused, 0.0)
    if head_fusion == "min":  # from the heads: min-fusion can zero a row whose heads all attend somewhere
        present = ((heads != 0) & real[:, None, None, :]).any(-1).any(1) & real
    else:
        present = (fused != 0).any(-1)
    fused.mul_(1.0 - residual)
    fused.diagonal(dim1=-2, dim2=-1).add_(present.to(torch.float64), alpha=residual)
    row_sum = fused.sum(-1, keepdim=True)
    if not bool(torch.isfinite(row_sum).all()) or bool((present & (row_sum[..., 0] <= 0.0)).any()):
        return None
    return fused.div_(torch.where(row_sum > 0.0, row_sum, 1.0))


def readout(
    layers: Sequence[Float[Tensor, "batch _head n n"]], real: Bool[Tensor, "batch n"], start: Float[Tensor, "batch n"],
    head_fusion: str, residual: float,
) -> Float[Tensor, "batch n"] | None:
    """Return s · Â_{L−1} · … · Â_0 [batch, n] for the start weights s [batch, n] (zero on padding), one layer's
    Â at a time from the last layer down; None as `augmented` returns it."""
    current = start.to(device=layers[0].device, dtype=torch.float64)[:, None, :]
    for heads in reversed(layers):
        step = augmented(heads, real, head_fusion, residual)
        if step is None:
            return None
        current = torch.bmm(current, step)
    return current[:, 0]


def products(
    layers: Sequence[Float[Tensor, "batch _head n n"]], real: Bool[Tensor, "batch n"], head_fusion: str,
    residual: float, cumulative: bool = False,
) -> list[Float[Tensor, "batch n n"]] | None:
    """Return [Â_{L−1} · … · Â_0] [batch, n, n], or with `cumulative` the product after each layer (Â_0 first);
    None as `augmented` returns it."""
    out: list[Tensor] = []
    for heads in layers:
        step = augmented(heads, real, head_fusion, residual)
        if step is None:
            return None
        current = step if not out else torch.bmm(step, out[-1])
        out = [*out, current] if cumulative else [current]
    return out
