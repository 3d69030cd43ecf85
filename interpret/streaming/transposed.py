"""Σ_h A_hᵀ·r (a readout row carried back through one layer's attention) and Σ_h Σ_i w_i·(A_h ⊙ ∂score/∂A_h)[i, :]
(attention × gradient's column sums) by two fused attention calls, with no [n, n] tensor anywhere, not even a
block of one.

With scores s_ij = scale·q_i·k_j (+ a causal mask) and A_ij = exp(s_ij − lse_i), lse_i = log Σ_j exp(s_ij)
(+ exp(sink) for an attention with sinks: the transposed call reads lse as it is, so its rows may sum to less
than one; a sliding window is not a mask these kernels apply, nor soft-capping a transform of their scores: such a
layer is rebuilt in blocks instead):

    (Aᵀ r)_j = Σ_i r_i · exp(s_ij − lse_i)

is itself an attention, run in the transposed direction: queries k'_j = [k_j, 1], keys q'_i = [q_i, −lse_i /
scale] (one extra coordinate, so the kernel's score is s'_ji = s_ij − lse_i = log A_ij, at most 0: no
overflow, no underflow of a value), values r_i. A fused kernel returns out_j = Σ_i A_ij r_i / Σ_i A_ij and its
own log-normaliser lse'_j = log Σ_i A_ij (a log column sum, at most log n), so (Aᵀ r)_j = out_j · exp(lse'_j).
A causal mask (key j ≤ query i) becomes anti-causal in that direction (i ≥ j); reversing the order of both
sides turns it back into the kernel's own causal mask. Each call costs what one attention forward costs, in
O(n·d) memory.

The values may be any width: with ∂score/∂A_ij = g_i·v_j (z_i = Σ_j A_ij·v_j, g = ∂score/∂z),

    Σ_i w_i·A_ij·∂score/∂A_ij = v_j · Σ_i A_ij·(w_i·g_i) = v_j · (Aᵀ (w ⊙ G))_j,

the same transposed call with the values w_i·g_i [d_head] (`transposed_product`), then one dot product per key.

`row_normalisers` gives lse (and the layer's output A·V, for the check against the kernel's z) from the
first call; `transposed_sums` and `transposed_product` are the second. Both compute in float32 from the model's
own q and k (products of half-precision numbers are exact in float32). On CUDA, where Triton is installed and
the inputs qualify, two Triton kernels (`interpret.streaming.triton_attention`: scores on tensor cores, the
transposed sum directly, no probability rounded to a half type). Otherwise q and k are cast to float32 for
PyTorch's fused kernels: on CPU the flash kernel `aten._scaled_dot_product_flash_attention_for_cpu`, on CUDA
the memory-efficient kernel `aten._scaled_dot_product_efficient_attention` (the flash kernel there takes only
half precision). Both return the log-sum-exp this needs. Every other device raises `NotImplementedError` (the
caller falls back to rebuilding blocks of pattern rows, `interpret.streaming.pattern`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from types import ModuleType

import torch
from jaxtyping import Float
from torch import Tensor

from interpret.capture.hf.recompute import with_sink

_ALIGN = 8  # the CUDA memory-efficient kernel wants head sizes in multiples of 8 (zero columns change nothing)


def fused_available(device: torch.device) -> bool:
    """Return whether `device` has a fused kernel that returns its log-sum-exp (CPU and CUDA)."""
    return device.type in ("cpu", "cuda")


def fused_attention(
    query: Float[Tensor, "head q d"], key: Float[Tensor, "head k d"], value: Float[Tensor, "head k e"],
    causal: bool, scale: float,
) -> tuple[Float[Tensor, "head q e"], Float[Tensor, "head q"]]:
    """Return (softmax(query·keyᵀ·scale + mask)·value [head, q, e], log-sum-exp of each query row [head, q]),
    float32, by one fused call (head sizes padded with zero columns where the kernel wants them)."""
    kernels = _triton_kernels() if query.device.type == "cuda" else None
    if kernels is not None and kernels.qualifies(query, key, value):
        return kernels.attention_rows(query, key, value, causal, scale)
    value_width = value.shape[-1]
    query, key, value = query.float(), key.float(), value.float()
    if query.device.type == "cpu":
        width = max(query.shape[-1], value.shape[-1])  # the CPU kernel wants one head size for q, k and v
        query, key, value = (_pad(t, width) for t in (query, key, value))
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query[None], key[None], value[None], 0.0, causal, scale=scale
        )
        return out[0, ..., :value_width], lse[0]
    if query.device.type == "cuda":
        # The memory-efficient kernel takes a value head size of its own: the transposed call's one-column
        # values are padded to 8, not to q's 136 (measured on an H200 at 32 heads × 8,192: 13.7 ms, not 21.4).
        width, value_padded = (-(-t.shape[-1] // _ALIGN) * _ALIGN for t in (query, value))
        out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
            _pad(query, width)[None], _pad(key, width)[None], _pad(value, value_padded)[None], None, True, 0.0,
            causal, scale=scale,
        )
        return out[0, ..., :value_width], lse[0, :, : query.shape[1]]  # the kernel may pad lse's row axis
    raise NotImplementedError(f"no fused attention kernel returning its log-sum-exp on {query.device.type}")


@functools.cache
def _triton_kernels() -> ModuleType | None:
    """Return `interpret.streaming.triton_attention`, or None where Triton is not installed (the `triton` extra)."""
    try:
        from interpret.streaming import triton_attention
    except ImportError:
        return None
    return triton_attention


def _pad(tensor: Tensor, width: int) -> Tensor:
    """Return `tensor` [..., d] with zero columns up to `width` (itself when d == width), contiguous."""
    extra = width - tensor.shape[-1]
    if extra == 0:
        return tensor.contiguous()
    return torch.nn.functional.pad(tensor, (0, extra))


def row_normalisers(
    q: Float[Tensor, "head n d_head"], k: Float[Tensor, "head n d_head"], v: Float[Tensor, "head n d_head"],
    *, causal: bool, scale: float,
) -> tuple[Float[Tensor, "head n d_head"], Float[Tensor, "head n"]]:
    """Return (A·V [head, n, d_head], lse [head, n]) of one layer in float32: lse_i = log Σ_j exp(s_ij)."""
    return fused_attention(q, k, v, causal, scale)


def transposed_product(
    q: Float[Tensor, "head n d_head"], k: Float[Tensor, "head n d_head"], lse: Float[Tensor, "head n"],
    values: Float[Tensor, "#head n e"], *, causal: bool, scale: float,
) -> Float[Tensor, "head n e"]:
    """Return A_hᵀ·values_h [head, n, e] in float64, A_h the layer's pattern (softmax(q·kᵀ·scale + mask)), from
    q, k and each row's log-sum-exp lse: one fused attention call in the transposed direction (module
    docstring); `values` [head, n, e] (or [1, n, e], the same for every head) are cast to float32."""
    values = values.to(device=q.device, dtype=torch.float32)
    kernels = _triton_kernels() if q.device.type == "cuda" else None
    if kernels is not None and kernels.qualifies(q, k, values):
        return kernels.transposed(q, k, lse.float(), values, causal, scale).double()
    heads, n, _ = q.shape
    order = torch.arange(n - 1, -1, -1, device=q.device) if causal else None  # i ≥ j reversed is causal
    keys_side = _side(q, lse.float() / -scale, order)  # q'_i = [q_i, −lse_i/scale]
    queries_side = _side(k, None, order)  # k'_j = [k_j, 1]
    values = (values.flip(1) if causal else values).expand(heads, n, values.shape[-1])
    out, column_lse = fused_attention(queries_side, keys_side, values, causal, scale)
    del queries_side, keys_side
    product = out.double().mul_(column_lse.double().exp().unsqueeze(-1))  # out_j · Σ_i A_ij
    return product.flip(1) if causal else product


def transposed_sums(
    q: Float[Tensor, "head n d_head"], k: Float[Tensor, "head n d_head"], lse: Float[Tensor, "head n"],
    vector: Float[Tensor, " n"], *, causal: bool, scale: float,
) -> Float[Tensor, " n"]:
    """Return Σ_h (A_hᵀ·vector) [n] in float64, A_h the layer's pattern, from q, k and each row's lse: one fused
    attention call in the transposed direction (`transposed_product` with one column of values)."""
    return transposed_product(q, k, lse, vector.view(1, -1, 1), causal=causal, scale=scale)[..., 0].sum(0)


def _side(
    tensor: Float[Tensor, "head n d"], last: Float[Tensor, "head n"] | None, order: Tensor | None
) -> Float[Tensor, "head n d_plus"]:
    """Return [tensor, last] (last = ones when None) as float32 [head, n, d + 1], positions in `order` when
    given."""
    heads, n, d = tensor.shape
    out = torch.empty(heads, n, d + 1, dtype=torch.float32, device=tensor.device)
    if order is None:
        out[..., :d] = tensor
    else:
        out[..., :d] = tensor.index_select(1, order)
    if last is None:
        out[..., d] = 1.0
    else:
        out[..., d] = last if order is None else last.index_select(1, order)
    return out


def head_slices(heads: int, n: int, d_head: int, chunk_bytes: int, units: int = 6) -> list[slice]:
    """Return consecutive slices of the heads, as many per slice as keep the fused calls' working tensors (about
    `units` float32 [heads, n, d_head + 1]) within `chunk_bytes`; at least one head each."""
    chunk = max(1, min(heads, chunk_bytes // (units * n * (d_head + 1) * 4)))
    return [slice(first, min(first + chunk, heads)) for first in range(0, heads, chunk)]


def _head_chunks(
    q: Float[Tensor, "head n d_head"], k: Float[Tensor, "head n d_head"], v: Float[Tensor, "head n d_head"] | None,
    z: Float[Tensor, "head n d_head"] | None, lse: Float[Tensor, "head n"] | None, *, causal: bool, scale: float,
    chunk_bytes: int, units: int = 6, sink: Float[Tensor, " head"] | None = None,
) -> Iterator[tuple[slice, Float[Tensor, "chunk n"], float, float]]:
    """Yield (heads, their lse [chunk, n], max |A·V − z|, max(1, max |z|)) a few heads at a time
    (`head_slices`). With the kernel's own lse the first call is skipped (nothing to check: the pattern is the
    kernel's by construction); without v or z the output is not checked (error 0). With sinks' logits `sink`
    [head] each row's lse gets the sink's term, and A·V (its rows summing to less than one) is the fused call's
    output times exp(lse over the keys − lse)."""
    for part in head_slices(*q.shape, chunk_bytes, units):
        if lse is not None:
            yield part, lse[part], 0.0, 1.0
            continue
        values = v[part] if v is not None else k[part]
        out, row_lse = row_normalisers(q[part], k[part], values, causal=causal, scale=scale)
        if sink is not None:
            total = with_sink(row_lse, sink[part])
            out = out.mul_(torch.exp(row_lse - total).unsqueeze(-1))  # each row's mass on its keys
            row_lse = total
        if v is None or z is None:
            yield part, row_lse, 0.0, 1.0
            continue
        kernel = z[part].float()
        yield part, row_lse, float((out - kernel).abs().max()), max(1.0, float(kernel.abs().max()))


def column_sums(
    q: Float[Tensor, "head n d_head"], k: Float[Tensor, "head n d_head"], v: Float[Tensor, "head n d_head"] | None,
    z: Float[Tensor, "head n d_head"] | None, vector: Float[Tensor, " n"], *, causal: bool, scale: float,
    chunk_bytes: int, lse: Float[Tensor, "head n"] | None = None, sink: Float[Tensor, " head"] | None = None,
) -> tuple[Float[Tensor, " n"], float]:
    """Return (Σ_h A_hᵀ·vector [n] float64, max |A·V − z| / max(1, max |z|)) of one layer, a few heads at a
    time (`_head_chunks`: one fused call per chunk with the kernel's own lse [head, n], two without; `sink`:
    the sinks' logits [head], whose terms the kernel's lse holds already)."""
    sums = torch.zeros(q.shape[1], dtype=torch.float64, device=q.device)
    worst, largest = 0.0, 1.0
    chunks = _head_chunks(q, k, v, z, lse, causal=causal, scale=scale, chunk_bytes=chunk_bytes, sink=sink)
    for part, row_lse, error, size in chunks:
        worst, largest = max(worst, error), max(largest, size)
        sums += transposed_sums(q[part], k[part], row_lse, vector, causal=causal, scale=scale)
    return sums, worst / largest


def gradient_column_sums(
    q: Float[Tensor, "head n d_head"], k: Float[Tensor, "head n d_head"], v: Float[Tensor, "head n d_head"],
    z: Float[Tensor, "head n d_head"] | None, grad_z: Float[Tensor, "head n d_head"], weights: Float[Tensor, " n"],
    *, causal: bool, scale: float, chunk_bytes: int, sink: Float[Tensor, " head"] | None = None,
) -> tuple[Float[Tensor, " n"], float]:
    """Return (Σ_h Σ_i w_i·(A_h ⊙ ∂score/∂A_h)[i, :] [n] float64, max |A·V − z| / max(1, max |z|)) of one layer:
    per chunk of heads, each row's lse and A·V from one fused call (A·V checked against the kernel's z on every
    row), then Aᵀ·(w ⊙ ∂score/∂z) from one transposed call, dotted with v per key (module docstring); `sink`:
    the sinks' logits [head], or None."""
    sums = torch.zeros(q.shape[1], dtype=torch.float64, device=q.device)
    worst, largest = 0.0, 1.0
    weighted = weights.to(device=q.device, dtype=torch.float32).view(1, -1, 1)
    chunks = _head_chunks(q, k, v, z, None, causal=causal, scale=scale, chunk_bytes=chunk_bytes, units=12,  # + float64
                          sink=sink)
    for part, row_lse, error, size in chunks:
        worst, largest = max(worst, error), max(largest, size)
        product = transposed_product(q[part], k[part], row_lse, grad_z[part].float() * weighted, causal=causal, scale=scale)
        sums += product.mul_(v[part].double()).sum((0, 2))  # Σ_h v_j · (Aᵀ (w ⊙ G))_j
    return sums, worst / largest
