"""Semantic tensor aliases: every tensor-valued field and function states its axes with these.

The axis vocabulary is shared across the toolkit: batch, layer, head, query, key, pos, d_model, d_head,
d_mlp, vocab. Batch is always axis 0; a stacked layer axis comes right after batch; a pattern sums to one
over `key`. The aliases are checked at run time while the tests run (jaxtyping + beartype import hook).
"""

from __future__ import annotations

from jaxtyping import Bool, Float, Int, Num
from torch import Tensor

TokenIds = Int[Tensor, "batch pos"]
Mask = Num[Tensor, "batch pos"]
SpecialMask = Bool[Tensor, "batch pos"]
Residual = Float[Tensor, "batch pos d_model"]
HeadVectors = Float[Tensor, "batch pos head d_head"]
Scores = Float[Tensor, "batch head query key"]
Pattern = Float[Tensor, "batch head query key"]
StackedPattern = Float[Tensor, "batch layer head query key"]
MlpActs = Float[Tensor, "batch pos d_mlp"]
Logits = Float[Tensor, "batch ..."]
AttnMask = Bool[Tensor, "*batch query key"]

__all__ = [
    "AttnMask",
    "HeadVectors",
    "Logits",
    "Mask",
    "MlpActs",
    "Pattern",
    "Residual",
    "Scores",
    "SpecialMask",
    "StackedPattern",
    "TokenIds",
]
