"""Raw attention of the last layer, read from the rows the decision reads: the simplest attention baseline.

Arrays (batch first; padding is zero):
    readout [batch, key]  Σ_i w_i · mean_h A_L[h, i, key], w the decision's pooling (its rows and weights).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.arrays import to_numpy


@dataclass(frozen=True)
class LastLayerParams:
    """Parameters of the last layer's attention."""

    head_fusion: Literal["mean", "max"] = field(default="mean", metadata={"help": "how heads are combined"})


class LastLayerAttention:
    """The last layer's attention from the decision's rows."""

    name = "last_layer_attention"
    summary = "Raw attention of the last layer from the rows the decision reads (a baseline for other methods)."
    version = "1.0"
    requires = ("*attn.hook_pattern",)
    needs_model = False
    provides = ("readout",)
    Params = LastLayerParams

    def run(self, trace, params: LastLayerParams, ctx: RunContext) -> AnalyzerResult:
        """Return the readout [batch, key] of the last captured self-attention layer."""
        prefix = "encoder." if trace.meta.kind == "encoder-decoder" else ""
        last = trace.layers("attn.hook_pattern", prefix)[-1]
        heads = to_numpy(trace[f"{prefix}blocks.{last}.attn.hook_pattern"].double())  # [batch, head, q, k]
        fused = heads.mean(1) if params.head_fusion == "mean" else heads.max(1)  # [batch, query, key]
        readout = np.zeros(fused.shape[::2])
        for b, target in enumerate(ctx.targets):
            if prefix:  # the decision reads decoder rows; this graph holds the encoder's: read its first token
                readout[b] = fused[b, 0]
                continue
            for position, weight in target.pooling:
                readout[b] += weight * fused[b, position]
        error = float(np.abs(readout.sum(-1) - 1.0).max()) if params.head_fusion == "mean" else 0.0
        return AnalyzerResult(
            analyzer=self.name,
            version=self.version,
            params={"head_fusion": params.head_fusion},
            arrays={"readout": NamedArray(readout, ("batch", "key"))},
            checks={"readout_sum_error": Check(error, 1e-5, "|Σ readout − 1| (rows of a softmax sum to one)")},
            views=(View("token_strip", "readout", f"Attention of layer {last} from the decision's rows"),),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )
