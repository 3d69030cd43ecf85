"""Layer-wise token-to-token contribution matrices from the per-token decomposition (`_decompose`), and
their aggregation across layers: shared by GlobEnc and ALTI (and ALTI-Logit, which reads ALTI's rollout).

For one example (n real positions) and layer l, with T_i(x_j) [query, key, d_model] and the resultant y_i
[query, d_model] of `_decompose.decomposed`: ALTI's c_ij (`alti`'s docstring, Ferrando et al. 2022, §3) or
GlobEnc's g_ij (`globenc`'s, Modarressi et al. 2022, N_Enc, and ‖T_i(x_j)‖₂ in a pre-norm block), each row
over its sum. Aggregation (both papers, Abnar & Zuidema's rollout without the added identity, since the
residual is already inside each matrix): R = C_{L−1} · … · C_0 [query, key], and the readout w · R for the
decision's pooling w over the top layer's rows.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Float

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout, View
from interpret.analysis.params import as_dict
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.plugins import _decompose, rollout_math
from interpret.plugins._attention import readout_weights, row_sum_error
from interpret.plugins._decompose import BlockParts, ExampleLayer

Method = Literal["alti", "globenc"]


def layer_matrix(layer: ExampleLayer, part: BlockParts, method: Method) -> tuple[Float[np.ndarray, "query key"], float]:
    """Return (the row-normalised contribution matrix [n, n] of one layer, the decomposition's relative error).

    The error is max over tokens of |Σ_j T_i(x_j) + bias terms − real output| / max |real output|: the split
    must add up to what the model computed (post-norm: the norm's output; pre-norm: x + attn_out).
    """
    n, d_model = layer.pattern.shape[-1], layer.resid_pre.shape[-1]
    matrix = torch.zeros((n, n), dtype=torch.float64)
    error = 0.0
    for rows in _decompose.query_chunks(n, d_model):
        parts, resultant = _decompose.decomposed(layer, part, rows)  # [chunk, key, d_model], [chunk, d_model]
        error = max(error, _sum_error(parts, resultant, layer, part, rows))
        if method == "alti":
            total = resultant.abs().sum(-1, keepdim=True)  # ‖y_i‖₁ [chunk, 1]
            distance = (resultant[:, None, :] - parts).abs().sum(-1)  # ‖y_i − T_i(x_j)‖₁ [chunk, key]
            matrix[rows] = torch.clamp(total - distance, min=0.0)
        elif part.post_norm and part.closing_norm is not None:
            assert layer.normalized is not None and layer.mlp_out is not None
            scale = _decompose.norm_scale(layer.normalized[rows] + layer.mlp_out[rows], part.closing_norm)
            matrix[rows] = _decompose.linear_part(parts, part.closing_norm, scale[:, None]).norm(dim=-1)
        else:
            matrix[rows] = parts.norm(dim=-1)
    return _decompose.row_normalised(to_numpy(matrix)), error


def _sum_error(parts: torch.Tensor, resultant: torch.Tensor, layer: ExampleLayer, part: BlockParts, rows: slice) -> float:
    """Return the largest relative error of the block's assumed structure on the rows, each against the model:

    the split adds up, Σ_j T_i(x_j) + bias terms = the real resultant (post-norm: the norm's own output); and
    the block is sequential, its output = x + attn_out + mlp_out (pre-norm) or LN₂(LN₁-output + mlp_out)
    (post-norm, when the closing norm is known). A norm inside a branch (sandwich norms) or a parallel MLP
    breaks the second by O(1).
    """
    assert layer.resid_pre is not None and layer.attn_out is not None and layer.mlp_out is not None
    assert layer.resid_post is not None
    summed = parts.sum(1)
    if part.post_norm:
        assert part.attn_norm is not None and layer.normalized is not None
        scale = _decompose.norm_scale(layer.resid_pre[rows] + layer.attn_out[rows], part.attn_norm)
        summed = summed + _decompose.linear_part(part.out_bias.expand_as(summed), part.attn_norm, scale) + part.attn_norm.bias
        block_out = None
        if part.closing_norm is not None:
            block_out = _decompose.layer_norm(layer.normalized[rows] + layer.mlp_out[rows], part.closing_norm)
    else:
        summed = summed + part.out_bias
        block_out = layer.resid_pre[rows] + layer.attn_out[rows] + layer.mlp_out[rows]
    structure = 0.0 if block_out is None else _decompose.relative(block_out, layer.resid_post[rows])
    if structure > DECOMPOSITION_TOLERANCE:
        layout = "LN₂(LN₁-output + mlp_out)" if part.post_norm else "x + attn_out + mlp_out"
        raise AnalyzerError(
            f"block {part.layer}'s output is not {layout} (relative error {structure:.2g}): a norm inside a branch"
            " (sandwich norms) or another block layout, which this decomposition does not cover."
        )
    return _decompose.relative(summed, resultant)


DECOMPOSITION_TOLERANCE = 1e-3  # relative; float32 models reach ~1e-6, a misread layout is off by O(1)


def layer_matrices(
    layers: list[ExampleLayer], parts: list[BlockParts], method: Method
) -> tuple[list[np.ndarray], list[float]]:
    """Return (one example's `layer_matrix` per layer [n, n], their decomposition errors)."""
    found = [layer_matrix(layer, part, method) for layer, part in zip(layers, parts)]
    return [matrix for matrix, _ in found], [error for _, error in found]


def new_maps(batch: int, pos: int, layers: int | None) -> dict[str, np.ndarray]:
    """Return zeroed {"rollout" [batch, query, key], "readout" [batch, key], and "per_layer" [batch, layer,
    query, key] when `layers` is given}: the arrays of a method aggregated by rollout."""
    out = {"rollout": np.zeros((batch, pos, pos)), "readout": np.zeros((batch, pos))}
    if layers is not None:
        out["per_layer"] = np.zeros((batch, layers, pos, pos))
    return out


def roll_out(
    out: dict[str, np.ndarray], b: int, positions: np.ndarray, matrices: list[np.ndarray], target: Any
) -> None:
    """Write example b's rollout R = C_{L−1} · … · C_0 of its layer matrices C_l [n, n] over its real `positions`,
    its readout w · R (w the decision's pooling, `target`) and, when `out` has them, the C_l into `out`."""
    index = np.ix_(positions, positions)
    rolled = rollout_math.chain(np.stack(matrices))
    out["rollout"][b][index] = rolled
    out["readout"][b, positions] = readout_weights("auto", target, positions) @ rolled
    for layer, matrix in enumerate(matrices if "per_layer" in out else []):
        out["per_layer"][b, layer][index] = matrix


def result(analyzer: Any, trace: Any, params: Any, out: dict[str, np.ndarray], titles: tuple[str, str], checks: dict) -> AnalyzerResult:
    """Return the AnalyzerResult of a method aggregated by rollout: the maps of `new_maps`, the heatmap and strip
    `titles`, the method's own `checks` and the rows' sums."""
    axes = {"rollout": ("batch", "query", "key"), "readout": ("batch", "key"), "per_layer": ("batch", "layer", "query", "key")}
    return AnalyzerResult(
        analyzer=analyzer.name, version=analyzer.version, params=as_dict(params),
        arrays={name: NamedArray(values, axes[name]) for name, values in out.items()},
        checks={
            **checks,
            "row_sum_error": Check(row_sum_error(out["rollout"]), 1e-6, "largest |row sum − 1| of the rollout"),
            "readout_sum_error": Check(row_sum_error(out["readout"]), 1e-6, "largest |Σ readout − 1|"),
        },
        views=(View("heatmap", "rollout", titles[0]), View("token_strip", "readout", titles[1])),
        tokens=tuple(tuple(row) for row in trace.encoded.tokens), readout_of=Readout("readout", signed=False),
    )
