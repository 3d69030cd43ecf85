"""Hand-made traces for analyzer tests: random row-stochastic patterns under the canonical names."""

from __future__ import annotations

import torch

from interpret.inputs import from_ids
from interpret.trace import Trace, TraceMeta


def random_pattern_trace(
    batch: int = 2, layers: int = 2, heads: int = 3, pos: int = 6, *, causal: bool = False, seed: int = 0
) -> Trace:
    """Return a Trace whose `blocks.{i}.attn.hook_pattern` [batch, head, query, key] are random softmaxes."""
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(layers):
        scores = torch.randn(batch, heads, pos, pos, generator=gen, dtype=torch.float64)
        if causal:
            scores = scores.masked_fill(torch.ones(pos, pos).triu(1).bool(), float("-inf"))
        tensors[f"blocks.{layer}.attn.hook_pattern"] = scores.softmax(-1).float()
    ids = torch.arange(batch * pos).reshape(batch, pos) % 7
    meta = TraceMeta(
        model_id="fake", kind="decoder" if causal else "encoder", n_layers=layers, n_heads=heads,
        layers=tuple(range(layers)),
    )
    return Trace(tensors=tensors, encoded=from_ids(ids), meta=meta)
