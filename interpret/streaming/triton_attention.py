"""The two attention calls of the streamed readouts as Triton kernels for CUDA: float32 arithmetic on the model's
own queries and keys, on tensor cores as the model's half-precision attention (`interpret.streaming.transposed`
says what the calls compute and when they run; it dispatches here).

With s_ij = scale·q_i·k_j (+ the causal mask, key j ≤ query i) and A_ij = exp(s_ij − lse_i):

    rows:        out_i = Σ_j A_ij·v_j and lse_i = log Σ_j exp(s_ij)   a program per block of queries, an online
                                                                       softmax over blocks of keys (as flash)
    transposed:  out_j = Σ_i A_ij·r_i, lse given                      a program per block of keys, a loop over
                                                                       blocks of queries (as flash's dV)

Each program recomputes one block of scores at a time from q and k in their own dtype (bfloat16, float16 or
float32) with float32 accumulation (`tl.dot`: tensor cores for the half types, IEEE float32 for float32),
exponentiates in float32 (against lse: the exponent is at most 0, nothing overflows), and accumulates the
weighted sums in float32: one column (a rollout row) by plain float32 products and sums, wider values by a dot
product that keeps float32 precision on tensor cores ("tf32x3": three TF32 products of each operand split into a
high and a low part). The probabilities are never rounded to a half type
(flash's bfloat16 kernel does that before its product: 1e-3 off). Nothing [n, n] exists, not even a block in
memory. Key heads may be shared by groups of query heads (grouped-query attention: key head = head // group),
value heads likewise (one for all heads, or one per head); values of any width (1 for a rollout row, d_head + 1
for entropy's [K | 1_S], d_head for attention × gradient), wider ones padded within a program to a power of two
≥ 16.

Triton's interpreter (TRITON_INTERPRET=1 while this module is imported: Triton reads it when a kernel is
decorated) runs the same kernels on the CPU with NumPy; that is how the tests run them without a GPU. Its dot
product reads bfloat16 blocks as integers, so there, and only there, bfloat16 blocks are cast to float32 before
the product: exact, and the same float32 accumulation.
"""

from __future__ import annotations

import contextlib
from typing import no_type_check

import torch
import triton
import triton.language as tl
from jaxtyping import Float
from torch import Tensor

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MAX_WIDTH = 256  # head sizes and value widths the kernels take (one block of each in registers)
BLOCK = 64  # queries and keys per block


# Both kernels are left to Triton unchecked (`no_type_check`: the tests' jaxtyping hook would wrap them).
@triton.jit
@no_type_check
def _rows_kernel(Q, K, V, OUT, LSE, n, d, e, group, v_group, scale,  # noqa: ANN001, N803 (Triton's pointer style)
                 sq_h, sq_n, sq_d, sk_h, sk_n, sk_d, sv_h, sv_n, sv_e, so_h, so_n, sl_h,
                 CAUSAL: tl.constexpr, UPCAST: tl.constexpr, QK_PRECISION: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims, cols = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_E)
    q = tl.load(Q + head * sq_h + rows[:, None] * sq_n + dims[None, :] * sq_d,
                mask=(rows[:, None] < n) & (dims[None, :] < d), other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    top = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running row maximum
    total = tl.zeros([BLOCK_M], tl.float32)  # running Σ_j exp(s_ij − top_i)
    acc = tl.zeros([BLOCK_M, BLOCK_E], tl.float32)
    stop = tl.minimum(n, (block + 1) * BLOCK_M) if CAUSAL else n
    for first in range(0, stop, BLOCK_N):
        keys = first + tl.arange(0, BLOCK_N)
        kt = tl.load(K + (head // group) * sk_h + keys[None, :] * sk_n + dims[:, None] * sk_d,
                     mask=(keys[None, :] < n) & (dims[:, None] < d), other=0.0)  # [BLOCK_D, BLOCK_N]
        if UPCAST:
            kt = kt.to(tl.float32)
        s = tl.dot(q, kt, out_dtype=tl.float32, input_precision=QK_PRECISION) * scale
        valid = keys[None, :] < n
        if CAUSAL:
            valid = valid & (keys[None, :] <= rows[:, None])
        s = tl.where(valid, s, float("-inf"))  # key 0 is valid for every row: the maximum is finite
        new_top = tl.maximum(top, tl.max(s, 1))
        alpha = tl.exp(top - new_top)
        p = tl.exp(s - new_top[:, None])
        total = total * alpha + tl.sum(p, 1)
        v = tl.load(V + (head // v_group) * sv_h + keys[:, None] * sv_n + cols[None, :] * sv_e,
                    mask=(keys[:, None] < n) & (cols[None, :] < e), other=0.0).to(tl.float32)
        if BLOCK_E == 1:  # one column: plain float32 products and sums
            acc = acc * alpha[:, None] + tl.expand_dims(tl.sum(p * tl.reshape(v, [1, BLOCK_N]), 1), 1)
        else:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="tf32x3")
        top = new_top
    tl.store(OUT + head * so_h + rows[:, None] * so_n + cols[None, :], acc / total[:, None],
             mask=(rows[:, None] < n) & (cols[None, :] < e))
    tl.store(LSE + head * sl_h + rows, top + tl.log(total), mask=rows < n)


@triton.jit
@no_type_check
def _transposed_kernel(Q, K, LSE, R, OUT, n, d, e, group, r_group, scale,  # noqa: ANN001, N803
                       sq_h, sq_n, sq_d, sk_h, sk_n, sk_d, sl_h, sl_n, sr_h, sr_n, sr_e, so_h, so_n,
                       CAUSAL: tl.constexpr, UPCAST: tl.constexpr, QK_PRECISION: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    keys = block * BLOCK_N + tl.arange(0, BLOCK_N)
    dims, cols = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_E)
    k = tl.load(K + (head // group) * sk_h + keys[:, None] * sk_n + dims[None, :] * sk_d,
                mask=(keys[:, None] < n) & (dims[None, :] < d), other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
    acc = tl.zeros([BLOCK_N, BLOCK_E], tl.float32)
    for first in range(block * BLOCK_N if CAUSAL else 0, n, BLOCK_M):  # causal: rows i ≥ j only
        rows = first + tl.arange(0, BLOCK_M)
        qt = tl.load(Q + head * sq_h + rows[None, :] * sq_n + dims[:, None] * sq_d,
                     mask=(rows[None, :] < n) & (dims[:, None] < d), other=0.0)  # [BLOCK_D, BLOCK_M]
        if UPCAST:
            qt = qt.to(tl.float32)
        s = tl.dot(k, qt, out_dtype=tl.float32, input_precision=QK_PRECISION) * scale  # s_ij as [key j, row i]
        lse = tl.load(LSE + head * sl_h + rows * sl_n, mask=rows < n, other=0.0)
        valid = (rows[None, :] < n) & (keys[:, None] < n)
        if CAUSAL:
            valid = valid & (keys[:, None] <= rows[None, :])
        p = tl.exp(tl.where(valid, s - lse[None, :], float("-inf")))  # A_ij [key, row]
        r = tl.load(R + (head // r_group) * sr_h + rows[:, None] * sr_n + cols[None, :] * sr_e,
                    mask=(rows[:, None] < n) & (cols[None, :] < e), other=0.0).to(tl.float32)
        if BLOCK_E == 1:  # one column (a rollout row): plain float32 products and sums
            acc += tl.expand_dims(tl.sum(p * tl.reshape(r, [1, BLOCK_M]), 1), 1)
        else:
            acc += tl.dot(p, r, input_precision="tf32x3")
    tl.store(OUT + head * so_h + keys[:, None] * so_n + cols[None, :], acc,
             mask=(keys[:, None] < n) & (cols[None, :] < e))


INTERPRETED = type(_rows_kernel).__name__ == "InterpretedFunction"  # decorated under TRITON_INTERPRET=1


def qualifies(q: Tensor, k: Tensor, values: Tensor) -> bool:
    """Return whether the kernels take these [head, n, d] queries, [key_head, n, d] keys and [value_head, n, e]
    values: CUDA (or the interpreter), one half or float dtype for q and k, n keys for n queries, heads in whole
    groups, sizes up to `MAX_WIDTH`, and every offset within int32 (the kernels' index arithmetic)."""
    if not (q.device.type == "cuda" or INTERPRETED) or q.dtype not in DTYPES or k.dtype != q.dtype:
        return False
    if values.dtype not in DTYPES or k.shape[1:] != q.shape[1:] or values.shape[1] != q.shape[1]:
        return False
    if q.shape[0] % k.shape[0] or q.shape[0] % values.shape[0] or max(q.shape[-1], values.shape[-1]) > MAX_WIDTH:
        return False
    return all(sum((size - 1) * abs(step) for size, step in zip(t.shape, t.stride())) < 2**31 for t in (q, k, values))


def _launch(kernel, q: Tensor, k: Tensor, width: int, causal: bool, *args) -> None:  # noqa: ANN001 (a Triton kernel)
    """Launch `kernel` over (blocks of n, heads) with the block sizes and constants of these inputs. Blocks over
    128 wide load in one stage, not two: compiled for sm_90, the transposed kernel with 129 → 256 columns took 208
    KiB of shared memory in two stages with bfloat16 q, k and 288 KiB with float32 (a block may have 227 KiB on
    an H100), 144 and 192 KiB in one."""
    heads, n, d = q.shape
    block_d = max(16, triton.next_power_of_2(d))
    block_e = 1 if width == 1 else max(16, triton.next_power_of_2(width))
    widest = max(block_d, block_e)
    grid = (triton.cdiv(n, BLOCK), heads)
    with torch.cuda.device(q.device) if q.device.type == "cuda" else contextlib.nullcontext():
        kernel[grid](*args, CAUSAL=causal, UPCAST=INTERPRETED and q.dtype == torch.bfloat16,
                     QK_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", BLOCK_M=BLOCK, BLOCK_N=BLOCK,
                     BLOCK_D=block_d, BLOCK_E=block_e, num_warps=4 if widest <= 64 else 8, num_stages=2 if widest <= 128 else 1)


def attention_rows(
    q: Float[Tensor, "head n d"], k: Float[Tensor, "key_head n d"], values: Float[Tensor, "value_head n e"],
    causal: bool, scale: float,
) -> tuple[Float[Tensor, "head n e"], Float[Tensor, "head n"]]:
    """Return (softmax(q·kᵀ·scale + mask)·values [head, n, e], log-sum-exp of each row [head, n]), float32."""
    heads, n, d = q.shape
    width = values.shape[-1]
    out = torch.empty(heads, n, width, dtype=torch.float32, device=q.device)
    lse = torch.empty(heads, n, dtype=torch.float32, device=q.device)
    _launch(_rows_kernel, q, k, width, causal, q, k, values, out, lse, n, d, width, heads // k.shape[0],
            heads // values.shape[0], scale, *q.stride(), *k.stride(), *values.stride(), *out.stride()[:2], lse.stride(0))
    return out, lse


def transposed(
    q: Float[Tensor, "head n d"], k: Float[Tensor, "key_head n d"], lse: Float[Tensor, "head n"],
    values: Float[Tensor, "value_head n e"], causal: bool, scale: float,
) -> Float[Tensor, "head n e"]:
    """Return A_hᵀ·values_h [head, n, e] float32, A_h = softmax(q·kᵀ·scale + mask) given each row's lse [head, n]
    (float32): out[h, j] = Σ_i exp(s_ij − lse_i)·values[h, i]."""
    heads, n, d = q.shape
    width = values.shape[-1]
    out = torch.empty(heads, n, width, dtype=torch.float32, device=q.device)
    _launch(_transposed_kernel, q, k, width, causal, q, k, lse, values, out, n, d, width, heads // k.shape[0],
            heads // values.shape[0], scale, *q.stride(), *k.stride(), *lse.stride(), *values.stride(), *out.stride()[:2])
    return out
