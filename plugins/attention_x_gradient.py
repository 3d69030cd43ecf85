"""Attention × gradient: ∂score/∂A ⊙ A per layer and head (Chefer et al. 2021, eq. 5 before the head mean).

Arrays (batch first; padding is zero):
    attn_grad [batch, layer, head, query, key]  ∇A ⊙ A of the main stack (an encoder-decoder's encoder), signed
    head_map  [batch, layer, head]              Σ_{query, key} ∇A ⊙ A: the first-order change of the score when
                                                the head's pattern is scaled (Michel et al. 2019, eq. 2, signed)
    readout   [batch, key]                      Σ_layer Σ_head Σ_query ∇A ⊙ A (layers="all"), or the last layer's
                                                only: how much the score rests on attention paid to each token
Encoder-decoder models also give cross_grad [batch, layer, head, dec, enc] (cross-attention ∇A ⊙ A), and
their readout sums the encoder's self-attention and the cross-attention into the encoder's tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from interpret.analyze import AnalyzerResult, HeadMap, NamedArray, Readout, RunContext, View
from interpret.analyze.params import as_dict
from interpret.plugins import gradient_math
from interpret.plugins._pattern_grad import pattern_gradients
from interpret.trace import Trace


@dataclass(frozen=True)
class AttentionGradientParams:
    """Parameters of attention × gradient."""

    layers: Literal["all", "last"] = field(
        default="all", metadata={"help": "layers summed into the readout: all, or the last one only"}
    )


class AttentionGradient:
    """∂score/∂A ⊙ A of every layer and head, for each example's own target."""

    name = "attention_x_gradient"
    summary = "Attention × gradient (∂score/∂A ⊙ A) per layer and head, for the decision's own score."
    version = "1.0"
    requires = ()
    needs_model = True
    provides = ("readout", "head_map")
    Params = AttentionGradientParams

    def run(self, trace: Trace, params: AttentionGradientParams, ctx: RunContext) -> AnalyzerResult:
        """Return ∇A ⊙ A, its head map and readout (module docstring)."""
        grads = pattern_gradients(trace, ctx, self.name)
        weighted = gradient_math.attention_times_gradient(*grads.main)  # [batch, layer, head, query, key]
        chosen = weighted if params.layers == "all" else weighted[:, -1:]
        readout = chosen.sum(axis=(1, 2, 3))
        arrays = {
            "attn_grad": NamedArray(weighted, ("batch", "layer", "head", "query", "key")),
            "head_map": NamedArray(weighted.sum(axis=(3, 4)), ("batch", "layer", "head")),
        }
        if grads.cross is not None:
            cross = gradient_math.attention_times_gradient(*grads.cross)
            arrays["cross_grad"] = NamedArray(cross, ("batch", "layer", "head", "query", "key"))
            readout = readout + (cross if params.layers == "all" else cross[:, -1:]).sum(axis=(1, 2, 3))
        arrays["readout"] = NamedArray(readout, ("batch", "key"))
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params), arrays=arrays,
            checks={"capture_score_error": grads.score_check()},
            views=(View("token_strip", "readout", "Attention × gradient into each token (signed)"),
                   View("head_grid", "head_map", "Σ ∇A ⊙ A per layer and head (signed)")),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=True), head_map=HeadMap("head_map"),
        )
