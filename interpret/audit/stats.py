"""Per-layer/per-head attention statistics, kept as running sums so that each batch's part can store its own.

For each example and each [layer, head]:
    entropy            mean over real query rows of −Σ p·log p over real keys (nats; 0·log 0 = 0)
    special_attention  mean over real query rows of the attention on special keys (CLS, SEP, ...)
A batch stores the sums of these over its examples; merging adds the batches in index order, so an
interrupted and resumed audit adds exactly the same numbers in the same order as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from interpret.trace import Trace


@dataclass(frozen=True)
class HeadStats:
    """Sums over `n_examples` examples of the per-example statistics, each [layer, head] float64.

    layers: the captured layer indices (axis 0 of each array).
    """

    layers: tuple[int, ...]
    entropy_sum: Float[np.ndarray, "layer head"]
    special_attention_sum: Float[np.ndarray, "layer head"]
    n_examples: int

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (floats survive JSON exactly) that `from_dict` reads back."""
        return {
            "layers": list(self.layers),
            "entropy_sum": self.entropy_sum.tolist(),
            "special_attention_sum": self.special_attention_sum.tolist(),
            "n_examples": self.n_examples,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeadStats:
        """Return the HeadStats that `to_dict` wrote."""
        return cls(
            layers=tuple(int(layer) for layer in data["layers"]),
            entropy_sum=np.asarray(data["entropy_sum"], dtype=np.float64),
            special_attention_sum=np.asarray(data["special_attention_sum"], dtype=np.float64),
            n_examples=int(data["n_examples"]),
        )


def head_stats(trace: Trace) -> HeadStats:
    """Return the batch's sums of per-example entropy and special-token attention, each [layer, head]."""
    prefix = "encoder." if trace.meta.kind == "encoder-decoder" else ""
    # float64 on the trace's device: one fused pass per statistic, and sums that do not lose digits.
    pattern = trace.stack("attn.hook_pattern", prefix).detach().to(torch.float64)
    real = trace.encoded.attention_mask.to(pattern.device).bool()
    special = trace.encoded.special.to(pattern.device).bool() & real
    entropy = attention_entropy(pattern, real)
    on_special = _mean_over_real_rows((pattern * special[:, None, None, None, :]).sum(-1), real)
    return HeadStats(
        layers=tuple(trace.layers("attn.hook_pattern", prefix)),
        entropy_sum=entropy.sum(0).cpu().numpy(),
        special_attention_sum=on_special.sum(0).cpu().numpy(),
        n_examples=int(pattern.shape[0]),
    )


def attention_entropy(
    pattern: Float[Tensor, "batch layer head query key"], real: Bool[Tensor, "batch key"]
) -> Float[Tensor, "batch layer head"]:
    """Return each example's mean over real query rows of −Σ p·log p over real keys (nats)."""
    keys = real[:, None, None, None, :]
    row_entropy = torch.special.entr(pattern).masked_fill(~keys, 0.0).sum(-1)  # entr(0) = 0; [batch, layer, head, query]
    return _mean_over_real_rows(row_entropy, real)


def merge(parts: Sequence[HeadStats]) -> HeadStats:
    """Return the sum of the batches' statistics, added in the order given."""
    if not parts:
        raise ValueError("no batch statistics to merge; the audit wrote no parts.")
    entropy = np.zeros_like(parts[0].entropy_sum)
    special = np.zeros_like(parts[0].special_attention_sum)
    for part in parts:
        entropy = entropy + part.entropy_sum
        special = special + part.special_attention_sum
    return HeadStats(parts[0].layers, entropy, special, sum(part.n_examples for part in parts))


def head_table(stats: HeadStats) -> pd.DataFrame:
    """Return one row per (layer, head): layer int64, head int64, entropy float64, special_attention float64."""
    n_layers, n_heads = stats.entropy_sum.shape
    count = max(stats.n_examples, 1)
    return pd.DataFrame(
        {
            "layer": np.repeat(np.asarray(stats.layers, dtype=np.int64), n_heads),
            "head": np.tile(np.arange(n_heads, dtype=np.int64), n_layers),
            "entropy": (stats.entropy_sum / count).reshape(-1),
            "special_attention": (stats.special_attention_sum / count).reshape(-1),
        }
    )


def _mean_over_real_rows(
    per_row: Float[Tensor, "batch layer head query"], real: Bool[Tensor, "batch query"]
) -> Float[Tensor, "batch layer head"]:
    counts = real.sum(-1).clamp(min=1).to(per_row.dtype)[:, None, None]
    return per_row.masked_fill(~real[:, None, None, :], 0.0).sum(-1) / counts
