"""Attention × gradient and gradient-weighted rollout of the decision's readout rows in O(n·d) memory per layer.

Both run the model once with autograd (queries, keys and values captured where they enter the attention,
∂score/∂z at each output projection's input) and take each layer as the backward pass reaches it
(`interpret.streaming.capture.gradient_pass`); ∂score/∂A[h, i, j] = ∂score/∂z[h, i] · v[h, j] needs no [n, n]
gradient either. Attention × gradient over many rows takes two fused attention calls per layer (the second in
the transposed direction); over a block of rows, and gradient-weighted rollout always, the patterns are rebuilt
one block of query rows at a time (`interpret.streaming.readout`). Equal to the full computation from captured
patterns and their autograd gradients (tests, 1e-5).

streaming_attention_gradient arrays (batch first; padding is zero):
    per_layer [batch, layer, key]  Σ_i w_i · Σ_h (A ⊙ ∂score/∂A)[h, i, key]: w = 1 on every query row (rows="all",
                                   the default), or the decision's pooling over its rows (rows="readout")
    readout   [batch, key]         the sum over layers (layers="all") or the last layer's (layers="last"); signed.
                                   rows="all" is `attention_x_gradient`'s readout (Σ_layer Σ_head Σ_query ∇A ⊙ A).
streaming_grad_rollout (Chefer, Gur & Wolf 2021, eqs. 5–6):
    readout   [batch, key]         w · (I + Ā_{L−1})⋯(I + Ā_0), Ā_l = mean_h (∂score/∂A_l ⊙ A_l)⁺
Neither gives one row per target token (the full analyzers' per_step): a target of several tokens (a
continuation, --generate N) is refused in one line rather than explained by one row for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from interpret.analyze import AnalyzerResult, NamedArray, Readout, RunContext, View
from interpret.analyze.params import as_dict
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.plugins._per_step import refuse_steps
from interpret.plugins._streaming import StreamingParams, compute_device, example_weights, output_check, place
from interpret.streaming.capture import gradient_pass
from interpret.streaming.pattern import StreamedLayer
from interpret.streaming.readout import attention_gradient_layer, grad_rollout_layer
from interpret.trace import Trace


class _Seen:
    """The largest output error over the layers a pass handed over, and their dtype (for the check's tolerance)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.dtype = torch.float32

    def update(self, error: float, dtype: torch.dtype) -> None:
        self.worst, self.dtype = max(self.worst, error), dtype


@dataclass(frozen=True)
class GradientPassParams(StreamingParams):
    """Parameters of a streaming analyzer that runs the model with autograd."""

    offload: Literal["auto", "on", "off"] = field(
        default="auto",
        metadata={"help": "keep what the gradient pass saves in host memory (CUDA): auto (from 4,096 tokens on), on, off"},
    )

    recompute: Literal["auto", "on", "off"] = field(
        default="auto",
        metadata={"help": "recompute each block in the backward pass instead of keeping its activations: auto (CPU, from 4,096 tokens on), on, off"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.offload not in ("auto", "on", "off"):
            raise ValueError(f"offload={self.offload!r} is unknown; use auto, on or off")
        if self.recompute not in ("auto", "on", "off"):
            raise ValueError(f"recompute={self.recompute!r} is unknown; use auto, on or off")


@dataclass(frozen=True)
class AttentionGradientParams(GradientPassParams):
    """Parameters of streaming attention × gradient."""

    layers: Literal["all", "last"] = field(
        default="all", metadata={"help": "layers summed into the readout: all, or the last one only"}
    )
    rows: Literal["all", "readout"] = field(
        default="all",
        metadata={"help": "query rows summed: all (attention_x_gradient's readout) or the decision's, weighted as it pools"},
    )
    method: Literal["auto", "fused", "blocks"] = field(
        default="auto",
        metadata={"help": "auto: two fused attention calls per layer (each row's lse, then the transposed direction) when the rows span more than a block; fused: always; blocks: rebuild pattern rows in blocks"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.layers not in ("all", "last"):
            raise ValueError(f"layers={self.layers!r} is unknown; use all or last")
        if self.rows not in ("readout", "all"):
            raise ValueError(f"rows={self.rows!r} is unknown; use readout or all")
        if self.method not in ("auto", "fused", "blocks"):
            raise ValueError(f"method={self.method!r} is unknown; use auto, fused or blocks")


class StreamingAttentionGradient:
    """Attention × gradient of the readout rows, streamed."""

    name = "streaming_attention_gradient"
    streams = "attention_x_gradient"  # the full analyzer it stands for (interpret.streaming.select)
    summary = "Attention × gradient (∂score/∂A ⊙ A) in O(n·d) memory: fused attention calls, or pattern rows rebuilt in blocks."
    version = "1.2"
    requires = ()
    needs_model = True
    provides = ("readout",)
    Params = AttentionGradientParams

    def run(self, trace: Trace, params: AttentionGradientParams, ctx: RunContext) -> AnalyzerResult:
        """Return per_layer [batch, layer, key] and readout [batch, key] (see the module docstring)."""
        refuse_steps(ctx, self.name, self.streams)
        examples = example_weights(trace, ctx.targets, params.readout)
        if params.rows == "all":
            examples = [(positions, np.ones(len(positions))) for positions, _ in examples]
        device = compute_device(ctx)
        sums: dict[tuple[int, int], np.ndarray] = {}  # (example, layer index) → [n]
        seen = _Seen()

        def consume(index: int, layers: list[StreamedLayer] | None) -> None:  # each layer as the backward reaches it
            if layers is None:
                return  # the score does not reach this layer: its row stays 0
            for b, (_, weights) in enumerate(examples):
                sums[b, index], error = attention_gradient_layer(
                    layers[b], weights, block_bytes=params.block_bytes, method=params.method, device=device
                )
                seen.update(error, layers[b].q.dtype)

        order = gradient_pass(trace, ctx, self.name, consume, params.offload, params.recompute)
        batch, pos = trace.encoded.batch, trace.encoded.pos
        per_layer = np.zeros((batch, len(order), pos))
        for (b, index), row in sums.items():
            per_layer[b, index] = place(row, examples[b][0], pos)
        readout = per_layer[:, -1] if params.layers == "last" else per_layer.sum(1)
        for b in range(batch):
            if not np.any(readout[b]):
                raise AnalyzerError(
                    f"streaming_attention_gradient: the score gets no gradient through the readout rows of example {b}"
                    f" ({params.layers} layer{'s' if params.layers == 'all' else ''}: the decision does not read them);"
                    " use readout=auto, layers=all or rows=all."
                )
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params),
            arrays={
                "readout": NamedArray(readout, ("batch", "key")),
                "per_layer": NamedArray(per_layer, ("batch", "layer", "key")),
            },
            checks={"output_error": output_check(seen.worst, seen.dtype)},
            views=(
                View("token_strip", "readout", "Attention × gradient from the decision's rows (streamed)"),
                View("heatmap", "per_layer", "Attention × gradient by layer [layer × key]"),
            ),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=True),
        )


class StreamingGradRollout:
    """Gradient-weighted rollout of the readout rows, streamed."""

    name = "streaming_grad_rollout"
    streams = "gradient_weighted_rollout"  # the full analyzer it stands for (interpret.streaming.select)
    summary = "Gradient-weighted rollout (Chefer et al. 2021) of the decision's rows in O(n·d) memory."
    version = "1.1"
    requires = ()
    needs_model = True
    provides = ("readout",)
    Params = GradientPassParams

    def run(self, trace: Trace, params: GradientPassParams, ctx: RunContext) -> AnalyzerResult:
        """Return readout [batch, key] (see the module docstring)."""
        refuse_steps(ctx, self.name, self.streams)
        examples = example_weights(trace, ctx.targets, params.readout)
        vectors = [torch.as_tensor(weights, dtype=torch.float64) for _, weights in examples]
        device = compute_device(ctx)
        seen = _Seen()

        def consume(index: int, layers: list[StreamedLayer] | None) -> None:  # from the last layer down
            if layers is None:
                return  # Ā = 0: the carried row passes unchanged
            for b in range(len(examples)):
                vectors[b], error = grad_rollout_layer(layers[b], vectors[b], block_bytes=params.block_bytes, device=device)
                seen.update(error, layers[b].q.dtype)

        gradient_pass(trace, ctx, self.name, consume, params.offload, params.recompute)
        readout = np.zeros((trace.encoded.batch, trace.encoded.pos))
        for b, (positions, _) in enumerate(examples):
            readout[b] = place(to_numpy(vectors[b]), positions, trace.encoded.pos)
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params),
            arrays={"readout": NamedArray(readout, ("batch", "key"))},
            checks={"output_error": output_check(seen.worst, seen.dtype)},
            views=(View("token_strip", "readout", "Gradient-weighted rollout from the decision's rows (streamed)"),),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )
