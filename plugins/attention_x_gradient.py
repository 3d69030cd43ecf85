"""Attention × gradient: ∂score/∂A ⊙ A per layer and head (Chefer et al. 2021, eq. 5 before the head mean).

Arrays (batch first; padding is zero):
    attn_grad [batch, layer, head, query, key]  ∇A ⊙ A of the main stack (an encoder-decoder's encoder), signed
    head_map  [batch, layer, head]              Σ_{query, key} ∇A ⊙ A: the first-order change of the score when
                                                the head's pattern is scaled (Michel et al. 2019, eq. 2, signed)
    readout   [batch, key]                      Σ_layer Σ_head Σ_query ∇A ⊙ A (layers="all"), or the last layer's
                                                only: how much the score rests on attention paid to each token
    per_step  [batch, query, key]               for a target of several tokens (a continuation, --generate N):
                                                each token's own readout in the row of the position whose
                                                logits score it (`_per_step`); its rows add up to the readout
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
from interpret.plugins._pattern_grad import PatternGradients, pattern_gradients
from interpret.plugins._per_step import per_step, sum_check
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
        """Return ∇A ⊙ A, its head map and readout, and per_step for a target of several tokens (module docstring)."""
        grads = pattern_gradients(trace, ctx, self.name)
        weighted, cross, readout = _weighted(grads, params)
        arrays = {
            "attn_grad": NamedArray(weighted, ("batch", "layer", "head", "query", "key")),
            "head_map": NamedArray(weighted.sum(axis=(3, 4)), ("batch", "layer", "head")),
        }
        if cross is not None:
            arrays["cross_grad"] = NamedArray(cross, ("batch", "layer", "head", "query", "key"))
        arrays["readout"] = NamedArray(readout, ("batch", "key"))
        checks = {"capture_score_error": grads.score_check()}
        views = [View("token_strip", "readout", "Attention × gradient into each token (signed)"),
                 View("head_grid", "head_map", "Σ ∇A ⊙ A per layer and head (signed)")]
        steps = per_step(trace, ctx, readout.shape[1],
                         lambda rows, step: _weighted(pattern_gradients(trace, ctx, self.name, rows, step), params)[2])
        if steps is not None:  # linear in the score, as the readout is: the steps' rows add up to the readout
            arrays["per_step"] = NamedArray(steps, ("batch", "query", "key"))
            views.append(View("heatmap", "per_step", "Attention × gradient per target token [row: the position scoring it × input token]"))
            checks["per_step_sum_error"] = sum_check(steps, readout)
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params), arrays=arrays, checks=checks,
            views=tuple(views), tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=True), head_map=HeadMap("head_map"),
        )


def _weighted(
    grads: PatternGradients, params: AttentionGradientParams
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Return (∇A ⊙ A of the main stack [rows, layer, head, query, key], of the cross-attention or None, the
    readout [rows, key]: Σ over the chosen layers, heads and queries of both)."""
    weighted = gradient_math.attention_times_gradient(*grads.main)
    readout = (weighted if params.layers == "all" else weighted[:, -1:]).sum(axis=(1, 2, 3))
    cross = None if grads.cross is None else gradient_math.attention_times_gradient(*grads.cross)
    if cross is not None:
        readout = readout + (cross if params.layers == "all" else cross[:, -1:]).sum(axis=(1, 2, 3))
    return weighted, cross, readout
