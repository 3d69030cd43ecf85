"""Attention × gradient: ∂score/∂A ⊙ A per layer and head (Chefer et al. 2021, eq. 5 before the head mean),
full or streamed.

Full (captured patterns and their autograd gradients). Arrays (batch first; padding is zero):
    attn_grad [batch, layer, head, query, key]  ∇A ⊙ A of the main stack (an encoder-decoder's encoder), signed
    head_map  [batch, layer, head]              Σ_{query, key} ∇A ⊙ A: the first-order change of the score when
                                                the head's pattern is scaled (Michel et al. 2019, eq. 2, signed)
    readout   [batch, key]                      Σ_layer Σ_head Σ_query ∇A ⊙ A (layers="all"), or the last layer's
                                                only: how much the score rests on attention paid to each token
    per_step  [batch, query, key]               for a target of several tokens (a continuation, --generate N):
                                                each token's own readout in the row of the position whose
                                                logits score it (`_per_step`); its rows add up to the readout
Encoder-decoder models also give cross_grad [batch, layer, head, dec, enc] (cross-attention ∇A ⊙ A), and
their readout sums the encoder's self-attention and the cross-attention into the encoder's tokens. A text-image
dual encoder also gives image_readout [batch, image_key]: the same sum over its vision stack (`vision.blocks.{i}`),
into its class token and patches.

Streamed (O(n·d) memory per layer): one autograd pass of the model (q, k, v where they enter the attention,
∂score/∂z at each output projection's input, `interpret.streaming.capture.gradient_pass`), each layer taken as
the backward pass reaches it; ∂score/∂A[h, i, j] = ∂score/∂z[h, i] · v[h, j] needs no [n, n] gradient. Over
many rows two fused attention calls per layer (the second transposed), over a block of rows the patterns
rebuilt in blocks (`interpret.streaming.readout`). Arrays:
    per_layer [batch, layer, key]  Σ_i w_i · Σ_h (A ⊙ ∂score/∂A)[h, i, key]: w = 1 on every query row (rows="all",
                                   the default: the full readout's sum) or the decision's pooling (rows="readout")
    readout   [batch, key]         the sum over layers (layers="all") or the last layer's (layers="last"); signed
Equal to the full computation (tests, 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from interpret.analysis import AnalyzerResult, HeadMap, NamedArray, Readout, RunContext, View
from interpret.analysis.params import as_dict
from interpret.errors import AnalyzerError
from interpret.plugins._attention import READOUT_HELP, ReadoutRows, scatter_row
from interpret.plugins._pattern_grad import PatternGradients, pattern_gradients
from interpret.plugins._per_step import Parts, per_step
from interpret.plugins._streaming import (
    BLOCK_HELP, OFFLOAD_HELP, RECOMPUTE_HELP, check_streamed, example_weights,
    gradient_layers, streamed,
)
from interpret.streaming.pattern import StreamedLayer
from interpret.streaming.readout import attention_gradient_layer
from interpret.trace import Trace


@dataclass(frozen=True)
class AttentionGradientParams:
    """Parameters of attention × gradient."""

    layers: Literal["all", "last"] = field(
        default="all", metadata={"help": "layers summed into the readout: all, or the last one only"}
    )
    readout: ReadoutRows = streamed("auto", f"streamed: {READOUT_HELP}")
    block_mib: int = streamed(64, BLOCK_HELP)
    offload: Literal["auto", "on", "off"] = streamed("auto", OFFLOAD_HELP)
    recompute: Literal["auto", "on", "off"] = streamed("auto", RECOMPUTE_HELP)
    rows: Literal["all", "readout"] = streamed(
        "all", "streamed: query rows summed: all (the full readout's) or the decision's, weighted as it pools"
    )
    method: Literal["auto", "fused", "blocks"] = streamed(
        "auto",
        "streamed: auto: two fused attention calls per layer (each row's lse, then the transposed direction) when"
        " the rows span more than a block; fused: always; blocks: rebuild pattern rows in blocks",
    )

    def __post_init__(self) -> None:
        if self.layers not in ("all", "last"):
            raise ValueError(f"layers={self.layers!r} is unknown; use all or last")
        if self.rows not in ("readout", "all"):
            raise ValueError(f"rows={self.rows!r} is unknown; use readout or all")
        check_streamed(self)


class AttentionGradient:
    """∂score/∂A ⊙ A of every layer and head, for each example's own target."""

    name = "attention_x_gradient"
    summary = "Attention × gradient (∂score/∂A ⊙ A) per layer and head, for the decision's own score."
    version = "1.0"
    requires = ()
    streamed_requires = ()
    needs_model = True
    provides = ("readout", "head_map")
    Params = AttentionGradientParams

    def run(self, trace: Trace, params: AttentionGradientParams, ctx: RunContext) -> AnalyzerResult:
        """Return ∇A ⊙ A, its head map and readout, or streamed its per-layer rows (module docstring)."""
        arrays, checks, views = (self._streamed if ctx.strategy == "streamed" else self._full)(trace, params, ctx)
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params, ctx.strategy), arrays=arrays,
            checks=checks, views=views, tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=True), head_map=HeadMap("head_map") if "head_map" in arrays else None,
        )

    def _full(self, trace: Trace, params: AttentionGradientParams, ctx: RunContext) -> Parts:
        grads = pattern_gradients(trace, ctx, self.name)
        weighted, cross, readout = _weighted(grads, params)
        arrays = {
            "attn_grad": NamedArray(weighted, ("batch", "layer", "head", "query", "key")),
            "head_map": NamedArray(weighted.sum(axis=(3, 4)), ("batch", "layer", "head")),
        }
        if cross is not None:
            arrays["cross_grad"] = NamedArray(cross, ("batch", "layer", "head", "query", "key"))
        arrays["readout"] = NamedArray(readout, ("batch", "key"))
        steps, step_checks, step_views = per_step(  # linear in the score, as the readout is
            trace, ctx, readout,
            lambda rows, step: _weighted(pattern_gradients(trace, ctx, self.name, rows, step), params)[2],
            "Attention × gradient", linear=True,
        )
        views = (View("token_strip", "readout", "Attention × gradient into each token (signed)"),
                 View("head_grid", "head_map", "Σ ∇A ⊙ A per layer and head (signed)"), *step_views)
        image = grads.weighted("image")
        if image is not None:  # a dual encoder's vision stack, by the same sum
            chosen = image if params.layers == "all" else image[:, -1:]
            arrays["image_readout"] = NamedArray(chosen.sum(axis=(1, 2, 3)), ("batch", "image_key"))
            views = (*views, View("token_strip", "image_readout", "Attention × gradient into each patch (signed)"))
        return {**arrays, **steps}, {"capture_score_error": grads.score_check(), **step_checks}, views

    def _streamed(self, trace: Trace, params: AttentionGradientParams, ctx: RunContext) -> Parts:
        examples = example_weights(trace, ctx.targets, params.readout)
        if params.rows == "all":
            examples = [(positions, np.ones(len(positions))) for positions, _ in examples]
        device = ctx.device
        sums: dict[tuple[int, int], np.ndarray] = {}  # (example, layer index) → [n]; a layer not reached stays 0

        def step(index: int, b: int, layer: StreamedLayer) -> float:
            sums[b, index], error = attention_gradient_layer(
                layer, examples[b][1], block_bytes=params.block_mib << 20, method=params.method, device=device
            )
            return error

        order, check = gradient_layers(trace, ctx, self.name, params, step)
        batch, pos = trace.encoded.batch, trace.encoded.pos
        per_layer = np.zeros((batch, len(order), pos))
        for (b, index), row in sums.items():
            per_layer[b, index] = scatter_row(row, examples[b][0], pos)
        readout = per_layer[:, -1] if params.layers == "last" else per_layer.sum(1)
        for b in range(batch):
            if not np.any(readout[b]):
                raise AnalyzerError(
                    f"{self.name}: the score gets no gradient through the readout rows of example {b}"
                    f" ({params.layers} layer{'s' if params.layers == 'all' else ''}: the decision does not read them);"
                    " use readout=auto, layers=all or rows=all."
                )
        arrays = {"readout": NamedArray(readout, ("batch", "key")),
                  "per_layer": NamedArray(per_layer, ("batch", "layer", "key"))}
        views = (View("token_strip", "readout", "Attention × gradient from the decision's rows (streamed)"),
                 View("heatmap", "per_layer", "Attention × gradient by layer [layer × key]"))
        return arrays, {"output_error": check}, views


def _weighted(
    grads: PatternGradients, params: AttentionGradientParams
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Return (∇A ⊙ A of the main stack [rows, layer, head, query, key], of the cross-attention or None, the
    readout [rows, key]: Σ over the chosen layers, heads and queries of both)."""
    weighted = grads.weighted("main")
    readout = (weighted if params.layers == "all" else weighted[:, -1:]).sum(axis=(1, 2, 3))
    cross = grads.weighted("cross")
    if cross is not None:
        readout = readout + (cross if params.layers == "all" else cross[:, -1:]).sum(axis=(1, 2, 3))
    return weighted, cross, readout
