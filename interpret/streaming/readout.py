"""Readout rows of rollout, attention × gradient and gradient-weighted rollout, streamed layer by layer.

From one example's `StreamedLayer`s (rollout: all of them; the gradient methods: one layer at a time, as the
gradient pass hands it over) and the readout weights w [n] (the decision's rows and pooling weights, summing
to one), w·M for the method's matrix M, without forming M or any [head, n, n] pattern: the row vector is
carried backwards through the layers and each layer's pattern is rebuilt one block of query rows at a time
(`pattern_rows`). A block's product is float32 (heads fused, rows of a few hundred terms), the carried row float64.

- Rollout (Abnar & Zuidema 2020, eq. of §3; this toolkit's `rollout_math.add_residual`):
  Â_l = rownorm(r·I + (1 − r)·fuse_h A_l), rollout = Â_{L−1} ⋯ Â_start, readout w·rollout:
  v ← v·Â_l from the last layer down, v·Â_l = Σ_blocks v[block]·Â_l[block, :]. With heads mean-fused,
  v·Â_l = (1 − r)/H·Σ_h A_hᵀ·v + r·v, and Σ_h A_hᵀ·v comes from fused attention calls instead (one in the
  transposed direction, `interpret.streaming.transposed`, after a forward one for each row's log-sum-exp
  when the layer did not keep the kernel's), no block of pattern rows at all, whenever the rows with a weight
  span more than one block.
- Attention × gradient: per layer, Σ_i w_i · Σ_h (A ⊙ ∂score/∂A)[h, i, :] (the first-order contribution of
  each attention weight to the score, Chefer et al. 2021 eq. 5 before the head mean), with ∂score/∂A[h, i, j] =
  ∂score/∂z[h, i] · v[h, j], so the sum is v_j · (Aᵀ (w ⊙ ∂score/∂z))_j: two fused attention calls per layer
  (`interpret.streaming.transposed`) when the rows with a weight span more than one block (w = 1 on every row
  gives the sum over all query rows), else only the blocks of rows with a weight are rebuilt.
- Gradient-weighted rollout (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability", eqs. 5–6):
  Ā_l = mean_h (∂score/∂A_l ⊙ A_l)⁺, R = (I + Ā_{L−1}) ⋯ (I + Ā_0), readout w·R: v ← v + v·Ā_l.

Every function also returns the largest `output_error` it saw (A·V against the kernel's output z) on the
blocks it rebuilt (on every row where rollout took the fused path), and rollout, for layers that kept the
kernel's row log-sum-exps instead of v and z, the largest `lse_error` on each layer's first and last block of
rows (`lse_check`), so a mask or scale that does not restate the model's is reported, never hidden.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interpret.arrays import to_numpy
from interpret.streaming.pattern import (
    DEFAULT_BLOCK_BYTES,
    StreamedLayer,
    block_rows,
    lse_error,
    output_error,
    pattern_grad_rows,
    pattern_rows,
    row_blocks,
)
from interpret.streaming.transposed import column_sums, fused_available, gradient_column_sums

HEAD_FUSIONS = ("mean", "max", "min")
ROLLOUT_METHODS = ("auto", "fused", "blocks")


def _fuse(pattern: torch.Tensor, how: str) -> torch.Tensor:
    """Return the heads of `pattern` [head, rows, keys] fused into [rows, keys] (float32: a mean of a few
    probabilities loses nothing a 1e-5 comparison sees, and halves the traffic of a float64 copy)."""
    if how == "mean":
        return pattern.mean(0)
    if how == "max":
        return pattern.amax(0)
    if how == "min":
        return pattern.amin(0)
    raise ValueError(f"head fusion {how!r} is unknown; use one of {', '.join(HEAD_FUSIONS)}")


def rollout_readout(
    layers: Sequence[StreamedLayer],
    weights: Float[np.ndarray, " n"],
    *,
    residual: float = 0.5,
    head_fusion: str = "mean",
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    method: str = "auto",
    device: torch.device | None = None,
) -> tuple[Float[np.ndarray, " n"], float]:
    """Return (w·Â_{L−1}⋯Â_0 [n], largest output error) for `layers` (first to last), Â as the module says.

    method: "auto" carries the row through a layer by fused attention calls (`transposed`: Σ_h A_hᵀ·v in the
    transposed direction, after an lse call when the layer kept no lse) when heads are mean-fused, the device
    has such a kernel and the row's weight spans more than one block of rows; "fused" on every layer (mean
    fusion only); "blocks" rebuilds pattern rows in blocks on every layer. The fused path's lse call checks A·V
    against the kernel's z on every row. A layer with a sliding window narrower than the input or soft-capped
    scores, or with sinks and no kept lse, is rebuilt in blocks whatever the method: the fused kernels apply a
    causal mask only, to scores as they are.
    device: where each layer is computed (its tensors moved there one layer at a time, e.g. from pinned host
    memory); default: where the layer is.
    """
    if method not in ROLLOUT_METHODS:
        raise ValueError(f"method {method!r} is unknown; use one of {', '.join(ROLLOUT_METHODS)}")
    if method == "fused" and head_fusion != "mean":
        raise ValueError(f"method 'fused' needs head_fusion 'mean' (not {head_fusion!r}); use auto or blocks")
    vector = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    worst = 0.0
    for layer in reversed(layers):
        layer = layer.to(device)
        vector = vector.to(layer.q.device)
        fused = method == "fused" or (method == "auto" and head_fusion == "mean" and _spans_blocks(vector, layer, block_bytes))
        if fused and layer.fusable and (layer.sink is None or layer.lse is not None):
            vector, error = _fused_layer(layer, vector, residual, block_bytes)
        else:
            vector, error = _blocks_layer(layer, vector, residual, head_fusion, block_bytes)
        worst = max(worst, error, lse_check(layer, block_bytes))
    return to_numpy(vector), worst


def lse_check(layer: StreamedLayer, block_bytes: int = DEFAULT_BLOCK_BYTES) -> float:
    """Return `lse_error` on the first and the last block of rows of `layer` (0 when it kept no lse): the rows
    a wrong causal mask or window changes most and the rows that see every key."""
    if layer.lse is None:
        return 0.0
    size = block_rows(layer.heads, layer.n, block_bytes)
    first = lse_error(layer, 0, size)
    return first if size >= layer.n else max(first, lse_error(layer, layer.n - size, layer.n))


def _spans_blocks(vector: torch.Tensor, layer: StreamedLayer, block_bytes: int) -> bool:
    """Return whether the rows with a weight span more than one block of rows and a fused kernel exists (a
    single block, e.g. a decoder's last row in the last layer, is cheaper rebuilt than two whole passes)."""
    if not fused_available(layer.q.device):
        return False
    rows = torch.nonzero(vector).flatten()
    return len(rows) > 0 and int(rows[-1] - rows[0]) + 1 > block_rows(layer.heads, layer.n, block_bytes)


def _fused_layer(
    layer: StreamedLayer, vector: torch.Tensor, residual: float, block_bytes: int
) -> tuple[torch.Tensor, float]:
    """Return (v·Â [n] float64, output error) by fused attention calls per chunk of heads (one with the layer's
    kept lse, two without): v·Â = (1 − r)/H·Σ_h A_hᵀ·v' + r·v', v' = v / d, d_i the sum of row i of r·I +
    (1 − r)·mean_h A_h before `rownorm`: 1 (no division), but where the attention has sinks, whose rows hold
    Σ_j A_hij = 1 − exp(sink_h − lse_hi) (the kept lse has the sink's term)."""
    if layer.sink is not None:
        mass = torch.expm1(layer.sink.to(layer.lse.device)[:, None].double() - layer.lse.double()).neg_()  # [head, n]
        vector = vector / mass.mean(0).mul_(1.0 - residual).add_(residual)
    sums, error = column_sums(
        layer.q, layer.k, layer.v, layer.z, vector, causal=layer.causal, scale=layer.scale, chunk_bytes=block_bytes,
        lse=layer.lse, sink=layer.sink,
    )
    return sums.mul_((1.0 - residual) / layer.heads).add_(vector, alpha=residual), error


def _blocks_layer(
    layer: StreamedLayer, vector: torch.Tensor, residual: float, head_fusion: str, block_bytes: int
) -> tuple[torch.Tensor, float]:
    """Return (v·Â [n] float64, output error on the last block) with pattern rows rebuilt in blocks."""
    worst = 0.0
    carried = torch.zeros(layer.n, dtype=torch.float64, device=vector.device)
    for start, stop in row_blocks(layer, block_bytes):
        rows = vector[start:stop]
        needed = bool(torch.any(rows != 0))
        if not needed and stop < layer.n:
            continue
        pattern = pattern_rows(layer, start, stop)  # [head, rows, keys first..end − 1]
        if stop == layer.n:  # the last block (every key) shows whether the pattern is the kernel's
            worst = max(worst, output_error(layer, start, stop, pattern))
        if not needed:
            continue
        first, end = layer.key_span(start, stop)
        if head_fusion == "mean":  # v·Â = (1 − r)/H · Σ_h v'·A_h + r·v', v' = v / (row sums before rownorm)
            if layer.sink is not None:  # rows of A hold less than one: 1 without sinks
                rows = rows / pattern.sum(-1, dtype=torch.float64).mean(0).mul_(1.0 - residual).add_(residual)
            mixed = torch.matmul(rows.float(), pattern).sum(0)  # [keys]
            carried[first:end] += mixed.double().mul_((1.0 - residual) / pattern.shape[0])
            carried[start:stop] += residual * rows
            continue
        augmented = _fuse(pattern, head_fusion).mul_(1.0 - residual)  # [rows, keys]
        index = torch.arange(stop - start, device=augmented.device)
        augmented[index, index + start - first] += residual
        augmented /= augmented.sum(-1, keepdim=True)
        carried[first:end] += (rows.float() @ augmented).double()
    return carried, worst


def attention_gradient_layer(
    layer: StreamedLayer,
    weights: Float[np.ndarray, " n"],
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    method: str = "auto",
    device: torch.device | None = None,
) -> tuple[Float[np.ndarray, " n"], float]:
    """Return (Σ_i w_i Σ_h (A ⊙ ∂score/∂A)[h, i, :] [n], output error) of one layer; device as
    `rollout_readout`'s.

    method: "auto" takes the layer by two fused attention calls (`transposed.gradient_column_sums`: each row's
    lse and A·V, then Aᵀ·(w ⊙ ∂score/∂z) in the transposed direction, dotted with v) when the device has such a
    kernel and the rows with a weight span more than one block of rows (rows="all" does), else rebuilds those
    blocks; "fused" always (but on a layer whose sliding window is narrower than the input or whose scores are
    soft-capped, which the fused kernels do not apply); "blocks" never. The fused path checks A·V against the
    kernel's z on every row, the blocks on the blocks they rebuild."""
    if method not in ROLLOUT_METHODS:
        raise ValueError(f"method {method!r} is unknown; use one of {', '.join(ROLLOUT_METHODS)}")
    layer = layer.to(device)
    weight_vector = torch.as_tensor(np.asarray(weights, dtype=np.float64)).to(layer.q.device)
    fused = method == "fused" or (method == "auto" and _spans_blocks(weight_vector, layer, block_bytes))
    if fused and layer.fusable:
        if layer.grad_z is None or layer.v is None:
            raise ValueError("this layer was streamed without gradients; capture ∂score/∂z first")
        sums, error = gradient_column_sums(
            layer.q, layer.k, layer.v, layer.z, layer.grad_z, weight_vector, causal=layer.causal, scale=layer.scale,
            chunk_bytes=block_bytes, sink=layer.sink,
        )
        return to_numpy(sums), error
    out = np.zeros(len(weights))
    worst = 0.0
    for start, stop in row_blocks(layer, block_bytes):
        rows = weight_vector[start:stop]
        if not torch.any(rows != 0):
            continue
        pattern = pattern_rows(layer, start, stop)
        worst = max(worst, output_error(layer, start, stop, pattern))
        product = pattern_grad_rows(layer, start, stop).mul_(pattern).sum(0)  # [rows, keys]
        first, end = layer.key_span(start, stop)
        out[first:end] += to_numpy((rows.float() @ product).double())
    return out, worst


def grad_rollout_layer(
    layer: StreamedLayer,
    vector: Float[Tensor, " n"],
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    device: torch.device | None = None,
) -> tuple[Float[Tensor, " n"], float]:
    """Return (vector·(I + Ā) [n] float64, output error on the last block) of one layer, Ā = mean_h (∂score/∂A ⊙
    A)⁺ rebuilt in blocks of rows (the positive part needs every entry: no fused form)."""
    layer = layer.to(device)
    vector = vector.to(layer.q.device)
    carried = vector.clone()
    worst = 0.0
    for start, stop in row_blocks(layer, block_bytes):
        rows = vector[start:stop]
        if stop < layer.n and not torch.any(rows != 0):
            continue
        pattern = pattern_rows(layer, start, stop)
        if stop == layer.n:  # the last block (every key) shows whether the pattern is the kernel's
            worst = max(worst, output_error(layer, start, stop, pattern))
        relevance = pattern_grad_rows(layer, start, stop).mul_(pattern).clamp_(min=0).mean(0)  # [rows, keys]
        first, end = layer.key_span(start, stop)
        carried[first:end] += (rows.float() @ relevance).double()
    return carried, worst
