"""Each query row's attention entropy and its attention on chosen keys, from one fused attention call per
chunk of heads: no row of the pattern is ever formed.

With scores s_ij = scale·q_i·k_j (+ a causal mask) and A_ij = exp(s_ij − lse_i):

    H_i = −Σ_j A_ij·log A_ij = lse_i − Σ_j A_ij·s_ij = lse_i − scale · q_i · (A·K)_i

(Shannon entropy in nats; log A_ij = s_ij − lse_i), and the attention on a set S of keys is (A·1_S)_i. One
fused call with the values [K | 1_S] (`interpret.streaming.transposed.fused_attention`, float32, O(n·d)
memory) returns A·[K | 1_S] and lse; the dot product and the difference are float64. The kernel's lse of
every row is compared with the one the model's kernel kept (`hook_lse`): the same check as streaming
rollout's, on every row instead of two blocks.

An attention with sinks has rows P = c·A (c_i = exp(lse_i − lse'_i), lse' with the sink's term) and the sink
one more outcome of each row, with share σ_i = exp(sink − lse'_i) (as the full strategy counts it):
H_i = c_i·lse'_i − scale·c_i·q_i·(A·K)_i − σ_i·(sink − lse'_i), its attention on S c_i·(A·1_S)_i. A layer
whose sliding window is narrower than the input, or whose scores are soft-capped, is rebuilt in blocks of rows
instead (the fused kernels apply a causal mask only): H_i = −Σ_j P_ij·log P_ij − σ_i·log σ_i in float64 from each float32 block.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from interpret.capture.hf.recompute import with_sink
from interpret.streaming.pattern import StreamedLayer, normalised_rows, row_blocks
from interpret.streaming.transposed import fused_attention, head_slices


def row_statistics(
    layer: StreamedLayer, keys: Bool[Tensor, " n"], chunk_bytes: int
) -> tuple[Float[Tensor, "head n"], Float[Tensor, "head n"], float]:
    """Return (entropy of each row [head, n] in nats, attention of each row on `keys` [head, n], both float64,
    max |lse − the kept lse| / max(1, max |kept lse|) (0 when the layer kept none)) of one layer, a few heads
    at a time (`head_slices`: about six float32 [heads, n, d_head + 1] within `chunk_bytes`)."""
    if not layer.fusable:
        return _block_statistics(layer, keys, chunk_bytes)
    heads, n, d_head = layer.q.shape
    indicator = keys.to(device=layer.k.device, dtype=layer.k.dtype).view(1, n, 1)  # 0 and 1: exact in any dtype
    entropy = torch.empty(heads, n, dtype=torch.float64, device=layer.q.device)
    on_keys = torch.empty_like(entropy)
    worst, largest = 0.0, 1.0
    for part in head_slices(heads, n, d_head + 1, chunk_bytes):
        q, k = layer.q[part], layer.k[part]  # the model's dtype: fused_attention computes in float32
        values = torch.cat([k, indicator.expand(k.shape[0], n, 1)], dim=-1)  # [chunk, n, d_head + 1]
        out, lse = fused_attention(q, k, values, layer.causal, layer.scale)
        mixed = (q.double() * out[..., :d_head].double()).sum(-1)  # q_i · (A·K)_i
        if layer.sink is None:
            entropy[part] = lse.double() - layer.scale * mixed
            on_keys[part] = out[..., d_head].double()
        else:  # P = c·A, and the sink one more outcome with share σ
            total = with_sink(lse.double(), layer.sink[part])
            sink = layer.sink[part].to(total)[:, None]
            mass, share = torch.exp(lse.double() - total), torch.exp(sink - total)
            entropy[part] = mass * (total - layer.scale * mixed) - share * (sink - total)
            on_keys[part] = mass * out[..., d_head].double()
            lse = total.float()
        if layer.lse is not None:
            kept = layer.lse[part].float()
            worst = max(worst, float((lse - kept).abs().max()))
            largest = max(largest, float(kept.abs().max()))
    return entropy.clamp_(min=0.0), on_keys, worst / largest


def _block_statistics(
    layer: StreamedLayer, keys: Bool[Tensor, " n"], chunk_bytes: int
) -> tuple[Float[Tensor, "head n"], Float[Tensor, "head n"], float]:
    """`row_statistics` from rows of the pattern rebuilt in blocks (`normalised_rows`: the window and causal
    mask), each row's entropy −Σ_j P_ij·log P_ij (− σ_i·log σ_i for the sink's share) in float64."""
    heads, n = layer.heads, layer.n
    entropy = torch.empty(heads, n, dtype=torch.float64, device=layer.q.device)
    on_keys = torch.empty_like(entropy)
    chosen = keys.to(layer.q.device)
    worst, largest = 0.0, 1.0
    for start, stop in row_blocks(layer, max(chunk_bytes // 4, 1)):  # float64 copies: 4 float32 blocks' worth more
        pattern, lse = normalised_rows(layer, start, stop)  # [head, rows, keys], [head, rows]
        pattern = pattern.double()
        rows = slice(start, stop)
        entropy[:, rows] = -torch.special.xlogy(pattern, pattern).sum(-1)
        first, end = layer.key_span(start, stop)
        on_keys[:, rows] = pattern[..., chosen[first:end]].sum(-1)
        if layer.sink is not None:
            share = torch.exp(layer.sink.to(pattern)[:, None] - lse.double())
            entropy[:, rows] -= torch.special.xlogy(share, share)
        if layer.lse is not None:
            kept = layer.lse[:, rows].float()
            worst = max(worst, float((lse - kept).abs().max()))
            largest = max(largest, float(kept.abs().max()))
    return entropy.clamp_(min=0.0), on_keys, worst / largest
