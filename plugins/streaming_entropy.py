"""Per-head attention entropy and attention on special tokens in O(n·d) memory: what `attention_entropy`
computes from every [head, n, n] pattern, here from each layer's queries, keys and row log-sum-exps (one fused
attention call per chunk of heads, `interpret.streaming.entropy`), so it runs where the patterns would not fit.

Arrays (batch first), as `attention_entropy`'s:
    entropy            [batch, layer, head]  mean over real query rows of −Σ_k p·log p over real keys (nats).
    special_attention  [batch, layer, head]  mean over real query rows of the attention on special keys.
    n_real             [batch]               real positions per example.
It declares the same head map (`entropy`). Equal to `attention_entropy` on the full patterns (tests, 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from interpret.analyze import AnalyzerResult, HeadMap, NamedArray, RunContext, View
from interpret.analyze.params import as_dict
from interpret.arrays import to_numpy
from interpret.plugins._streaming import compute_device, lse_check
from interpret.streaming.capture import REQUIRES, layers_from_trace, real_positions
from interpret.streaming.entropy import row_statistics
from interpret.trace import Trace


@dataclass(frozen=True)
class StreamingEntropyParams:
    """Parameters of the streamed attention statistics."""

    block_mib: int = field(
        default=64, metadata={"help": "working memory of one chunk of heads' fused call, in MiB (at least 1)"}
    )

    def __post_init__(self) -> None:
        if self.block_mib < 1:
            raise ValueError(f"block_mib={self.block_mib} must be 1 or more; use e.g. 64")


class StreamingAttentionEntropy:
    """Per-head attention entropy and attention on special tokens, streamed."""

    name = "streaming_attention_entropy"
    streams = "attention_entropy"  # the full analyzer it stands for when a run streams (interpret.streaming.select)
    summary = "Per-head attention entropy (nats) and share on special tokens in O(n·d) memory: one fused call per layer, no pattern."
    version = "1.0"
    requires = REQUIRES
    needs_model = False
    provides = ("head_map",)
    Params = StreamingEntropyParams

    def run(self, trace: Trace, params: StreamingEntropyParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-example [layer, head] statistics (arrays as the module docstring lists)."""
        per_example = layers_from_trace(trace, self.name, compute_device(ctx))
        special = (trace.encoded.special.bool() & trace.encoded.attention_mask.bool()).cpu()
        batch, n_layers = trace.encoded.batch, len(per_example[0])
        n_heads = per_example[0][0].heads if n_layers else 0
        entropy = np.zeros((batch, n_layers, n_heads))
        on_special = np.zeros_like(entropy)
        worst = 0.0
        for b, positions in enumerate(real_positions(trace)):
            keys = special[b, positions]
            for index, layer in enumerate(per_example[b]):
                rows, share, error = row_statistics(layer, keys, params.block_mib << 20)
                entropy[b, index] = to_numpy(rows.mean(-1))
                on_special[b, index] = to_numpy(share.mean(-1))
                worst = max(worst, error)
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params),
            arrays={
                "entropy": NamedArray(entropy, ("batch", "layer", "head")),
                "special_attention": NamedArray(on_special, ("batch", "layer", "head")),
                "n_real": NamedArray(to_numpy(trace.encoded.attention_mask.sum(-1)).astype(np.float64), ("batch",)),
            },
            checks={"lse_error": lse_check(worst, "every row")},
            views=(
                View("table", "entropy", "Attention entropy by layer and head (nats, streamed)"),
                View("table", "special_attention", "Attention on special tokens by layer and head (streamed)"),
            ),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            head_map=HeadMap("entropy"),
        )
