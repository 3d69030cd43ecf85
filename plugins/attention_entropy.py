"""Per-head attention statistics as an analyzer: how spread out each head's attention is, and how much of
it goes to special tokens ([CLS], [SEP], ...), per example.

Arrays (batch first):
    entropy            [batch, layer, head]  mean over real query rows of −Σ_k p·log p over real keys (nats;
                                             0·log 0 = 0). 0 = every row on one key; log n = uniform.
    special_attention  [batch, layer, head]  mean over real query rows of the attention on special keys.
    n_real             [batch]               real positions per example (the aggregation weight is 1).
It declares a head map (`entropy`), which the audit averages over examples into heads.csv; it has no
readout, because it says nothing about which token drove the decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from interpret.analyze import AnalyzerResult, Check, HeadMap, NamedArray, RunContext, View
from interpret.analyze.params import as_dict
from interpret.trace import Trace


@dataclass(frozen=True)
class EntropyParams:
    """Parameters of the attention statistics."""

    stack: Literal["auto", "encoder", "decoder"] = field(
        default="auto", metadata={"help": "which self-attention stack: auto (the only one, or the encoder's)"}
    )


class AttentionEntropy:
    """Per-head attention entropy and attention on special tokens."""

    name = "attention_entropy"
    summary = "Per-head attention entropy (nats) and share of attention on special tokens, per example."
    version = "1.0"
    requires = ("*attn.hook_pattern",)
    needs_model = False
    provides = ("head_map",)
    Params = EntropyParams

    def run(self, trace: Trace, params: EntropyParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-example [layer, head] statistics (arrays as the module docstring lists)."""
        prefix = _prefix(trace, params.stack)
        side = trace.encoded.decoder if prefix == "decoder." and trace.encoded.decoder is not None else trace.encoded
        # float64 on the trace's device: one fused pass per statistic, and sums that do not lose digits.
        pattern = trace.stack("attn.hook_pattern", prefix).detach().to(torch.float64)
        real = side.attention_mask.to(pattern.device).bool()
        special = side.special.to(pattern.device).bool() & real
        entropy = attention_entropy(pattern, real)
        # Σ over special keys as a contraction with the key mask: no [batch, layer, head, query, key] temporary.
        on_special = _mean_over_real_rows(torch.einsum("blhqk,bk->blhq", pattern, special.to(pattern.dtype)), real)
        row_sums = pattern.sum(-1).masked_fill(~real[:, None, None, :], 1.0)
        arrays = {
            "entropy": NamedArray(entropy.cpu().numpy(), ("batch", "layer", "head")),
            "special_attention": NamedArray(on_special.cpu().numpy(), ("batch", "layer", "head")),
            "n_real": NamedArray(real.sum(-1).cpu().numpy().astype(np.float64), ("batch",)),
        }
        checks = {
            "pattern_row_sum_error": Check(
                float((row_sums - 1.0).abs().max()) if row_sums.numel() else 0.0, 1e-4,
                "largest |row sum − 1| of the attention rows the statistics read",
            )
        }
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params), arrays=arrays, checks=checks,
            views=(
                View("table", "entropy", "Attention entropy by layer and head (nats)"),
                View("table", "special_attention", "Attention on special tokens by layer and head"),
            ),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            head_map=HeadMap("entropy"),
        )


def _prefix(trace: Trace, stack: str) -> str:
    if trace.meta.kind != "encoder-decoder":
        return ""
    return "decoder." if stack == "decoder" else "encoder."


def attention_entropy(
    pattern: Float[Tensor, "batch layer head query key"], real: Bool[Tensor, "batch key"]
) -> Float[Tensor, "batch layer head"]:
    """Return each example's mean over real query rows of −Σ p·log p over real keys (nats)."""
    # entr(0) = 0; padding keys drop out of the contraction with the real-key mask. [batch, layer, head, query]
    row_entropy = torch.einsum("blhqk,bk->blhq", torch.special.entr(pattern), real.to(pattern.dtype))
    return _mean_over_real_rows(row_entropy, real)


def _mean_over_real_rows(
    per_row: Float[Tensor, "batch layer head query"], real: Bool[Tensor, "batch query"]
) -> Float[Tensor, "batch layer head"]:
    counts = real.sum(-1).clamp(min=1).to(per_row.dtype)[:, None, None]
    return per_row.masked_fill(~real[:, None, None, :], 0.0).sum(-1) / counts
