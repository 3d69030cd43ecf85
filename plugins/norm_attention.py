"""Norm-based attention (Kobayashi et al. 2020, "Attention is Not Only a Weight", EMNLP): how much of each
token's transformed value reaches each query, ‖α_ij f(x_j)‖, instead of the weight α_ij alone.

For layer l, head h, query i, key j (f^h(x_j) = v^h_j W_O^h, the value through the output projection;
as in the paper, bias of the output projection left out as there):

    norms[h, i, j] = α^h_ij ‖f^h(x_j)‖                       (per head, the paper's ‖α f(x)‖)
    fused[i, j]    = ‖Σ_h α^h_ij f^h(x_j)‖      head_fusion="sum" (the paper's layer-level analysis)
                   = mean_h α^h_ij ‖f^h(x_j)‖   head_fusion="mean"

Arrays (batch first; padding zero):
    norms   [batch, head, query, key]  per head, of the chosen layer.
    fused   [batch, query, key]        heads combined as above.
    readout [batch, key]               Σ_i w_i · fused[i, :] / Σ_k fused[i, k], w the decision's pooling
                                       (its rows and weights). With every ‖f^h(x_j)‖ equal and
                                       head_fusion="mean" this is the raw attention of the layer read the
                                       same way (`last_layer_attention`).
One layer only (default the last): O(head · n²) memory, computed from the trace's hook_pattern and hook_v
and the model's output projection. Models and kinds covered: see `interpret.plugins._decompose`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.analysis.params import as_dict
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.plugins import _decompose
from interpret.plugins._attention import readout_weights, row_sum_error, target_of
from interpret.trace import Trace


@dataclass(frozen=True)
class NormAttentionParams:
    """Parameters of norm-based attention."""

    layer: int = field(default=-1, metadata={"help": "the layer analysed (negative counts from the last captured)"})
    head_fusion: Literal["sum", "mean"] = field(
        default="sum", metadata={"help": "sum: ‖Σ_h α f‖ (the paper's layer level); mean: mean_h ‖α f‖"}
    )

    def __post_init__(self) -> None:
        if self.head_fusion not in ("sum", "mean"):
            raise ValueError(f"head_fusion={self.head_fusion!r} is unknown; use sum or mean")


class NormAttention:
    """Norm-based attention of one layer, read from the decision's rows."""

    name = "norm_attention"
    summary = "Norm-based attention (Kobayashi et al. 2020): ‖α_ij f(x_j)‖ with f the value and output projections."
    version = "1.0"
    requires = ("*attn.hook_pattern", "*attn.hook_v")
    needs_model = True
    provides = ("readout",)
    Params = NormAttentionParams

    def run(self, trace: Trace, params: NormAttentionParams, ctx: RunContext) -> AnalyzerResult:
        """Return the norms of the chosen layer and the readout (arrays as the module docstring lists)."""
        _decompose.check_kind(trace, self.name)
        captured = trace.layers("attn.hook_pattern")
        layer = captured[params.layer] if -len(captured) <= params.layer < 0 else params.layer
        if layer not in captured:
            raise AnalyzerError(
                f"{self.name}: layer={params.layer} was not captured (captured layers: {captured}); pick one of those."
            )
        parts = [p for p in _decompose.block_parts(ctx, trace, self.name, norms=False) if p.layer == layer]
        batch, pos = trace.encoded.batch, trace.encoded.pos
        heads = parts[0].out_weight.shape[0]
        norms = np.zeros((batch, heads, pos, pos))
        fused = np.zeros((batch, pos, pos))
        readout = np.zeros((batch, pos))
        for b, positions, (example,) in _decompose.example_layers(trace, parts, stream=False):
            values = _decompose.transformed_values(example, parts[0])  # [head, key, d_model]
            per_head = example.pattern * values.norm(dim=-1)[:, None, :]  # α^h_ij ‖f^h(x_j)‖
            if params.head_fusion == "sum":
                combined = torch.einsum("hij,hjd->ijd", example.pattern, values).norm(dim=-1)
            else:
                combined = per_head.mean(0)
            grid = np.ix_(positions, positions)
            norms[b][:, grid[0], grid[1]] = to_numpy(per_head)
            fused[b][grid] = to_numpy(combined)
            weights = readout_weights("auto", target_of(ctx.targets, b), positions)
            readout[b, positions] = weights @ _decompose.row_normalised(to_numpy(combined))
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params),
            arrays={
                "norms": NamedArray(norms, ("batch", "head", "query", "key")),
                "fused": NamedArray(fused, ("batch", "query", "key")),
                "readout": NamedArray(readout, ("batch", "key")),
            },
            checks={
                "readout_sum_error": Check(row_sum_error(readout), 1e-6, "largest |Σ readout − 1| (rows normalised to one)")
            },
            views=(
                View("heatmap", "fused", f"‖Σ α f(x)‖ of layer {layer} [query × key]"),
                View("token_strip", "readout", f"Norm-based attention of layer {layer} from the decision's rows"),
            ),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )
