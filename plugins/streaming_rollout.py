"""Attention rollout of the decision's readout rows in O(n·d) memory per layer (Abnar & Zuidema 2020).

Reads each layer's queries, keys and each query row's log-sum-exp (hook_q, hook_k, hook_lse: the SDPA kernel's
own normaliser when a fused kernel served the call), never a pattern: the readout row is carried back through
the layers (`interpret.streaming.readout.rollout_readout`), under mean fusion by one fused attention call per
layer (Σ_h A_hᵀ·row in the transposed direction, `interpret.streaming.transposed`), otherwise by rebuilding
the pattern one block of query rows at a time. Each layer's first and last block of rows are restated from q
and k and their log-sum-exps compared with the captured ones (check `lse_error`): a scale, bias or mask the
restatement does not reproduce is an error, not a result. Same definition as `rollout` with
rows="readout" (Â = rownorm(r·I + (1 − r)·fuse_h A), readout w·Â_{L−1}⋯Â_start) and equal to it (tests, 1e-5).

Arrays (batch first; padding is zero):
    readout [batch, key]  w · rollout, w the decision's pooling (or the `readout` positions given).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from interpret.analyze import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.analyze.params import as_dict
from interpret.errors import AnalyzerError
from interpret.plugins._attention import row_sum_error
from interpret.plugins._streaming import StreamingParams, compute_device, example_weights, lse_check, place
from interpret.streaming.capture import REQUIRES, layers_from_trace
from interpret.streaming.readout import rollout_readout
from interpret.trace import Trace


@dataclass(frozen=True)
class StreamingRolloutParams(StreamingParams):
    """Parameters of streaming rollout."""

    residual: float = field(
        default=0.5, metadata={"help": "weight w of the identity: w·I + (1−w)·A, rows renormalised; in [0, 1)"}
    )
    head_fusion: Literal["mean", "max", "min"] = field(default="mean", metadata={"help": "how heads are combined"})
    start_layer: int = field(default=0, metadata={"help": "first layer multiplied in"})
    method: Literal["auto", "fused", "blocks"] = field(
        default="auto",
        metadata={"help": "auto: one fused attention call per layer (transposed, from the kernel's lse) under mean fusion when the rows span more than a block; fused: always (mean fusion); blocks: rebuild pattern rows in blocks"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.residual < 1.0:
            raise ValueError(f"residual={self.residual} is outside [0, 1); use a weight in [0, 1) (the paper's 0.5)")
        if self.head_fusion not in ("mean", "max", "min"):
            raise ValueError(f"head_fusion={self.head_fusion!r} is unknown; use mean, max or min")
        if self.start_layer < 0:
            raise ValueError(f"start_layer={self.start_layer} must be 0 or more; use 0 for every layer")
        if self.method not in ("auto", "fused", "blocks"):
            raise ValueError(f"method={self.method!r} is unknown; use auto, fused or blocks")
        if self.method == "fused" and self.head_fusion != "mean":
            raise ValueError(f"method=fused needs head_fusion=mean, not {self.head_fusion}; use method=auto or blocks")


class StreamingRollout:
    """Rollout of the readout rows, streamed: memory linear in the input length."""

    name = "streaming_rollout"
    streams = "rollout"  # the full analyzer it stands for when a run streams (interpret.streaming.select)
    summary = "Attention rollout of the decision's rows in O(n·d) memory: from q, k and the kernel's row normalisers, no pattern."
    version = "2.0"
    requires = REQUIRES
    needs_model = False
    provides = ("readout",)
    Params = StreamingRolloutParams

    def run(self, trace: Trace, params: StreamingRolloutParams, ctx: RunContext) -> AnalyzerResult:
        """Return the readout [batch, key] of every example (see the module docstring)."""
        device = compute_device(ctx)
        per_example = layers_from_trace(trace, self.name, device)
        captured = trace.layers("attn.hook_q")
        if params.start_layer not in captured:
            raise AnalyzerError(
                f"start_layer={params.start_layer} was not captured (captured layers: {captured}); pick one of those."
            )
        start = captured.index(params.start_layer)
        readout = np.zeros((trace.encoded.batch, trace.encoded.pos))
        worst = 0.0
        for b, (positions, weights) in enumerate(example_weights(trace, ctx.targets, params.readout)):
            row, error = rollout_readout(
                per_example[b][start:], weights, residual=params.residual, head_fusion=params.head_fusion,
                block_bytes=params.block_bytes, method=params.method,
            )
            readout[b] = place(row, positions, trace.encoded.pos)
            worst = max(worst, error)
        # Each block's pattern is a float32 softmax whose rows sum to one only up to float32 rounding: about
        # sqrt(n)·2⁻²⁴ per row (random-walk accumulation over n keys), carried through every layer. The check
        # allows four times that per layer (1e-6 at least), far below what a real fault (a lost mask, a wrong
        # scale) moves the sum; measured 1.4e-6 at 8,192 tokens over 32 layers on an H200.
        tolerance = float(max(1e-6, 4.0 * (len(captured) - start) * np.sqrt(trace.encoded.pos) * 2.0**-24))
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params),
            arrays={"readout": NamedArray(readout, ("batch", "key"))},
            checks={
                "readout_sum_error": Check(
                    row_sum_error(readout), tolerance,
                    "largest |Σ readout − 1| (a weighted mean of float32 rows that sum to one)",
                ),
                "lse_error": lse_check(worst),
            },
            views=(View("token_strip", "readout", "Rollout from the decision's rows (streamed)"),),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )
