"""One forward pass that keeps, per attention call, what the fused rollout step needs and nothing else: the
queries and keys exactly as the model's SDPA kernel received them (key heads not repeated), that kernel's own
log-sum-exp of every query row, its scale and whether it was causal.

Inside `kernel_records()`, `torch.nn.functional.scaled_dot_product_attention` calls that a fused kernel
returning its log-sum-exp can serve (no mask tensor, no dropout) keep that lse, so the rollout needs no pass of
its own for the row normalisers. On the CPU that kernel is the flash kernel SDPA itself dispatches to (it also
takes grouped-query heads), so it serves the call and its output is the model's, bit for bit. On CUDA, SDPA
picks among cuDNN, flash, memory-efficient and math kernels by shape, dtype and hardware, so the call is
served by SDPA as always and the fused kernel (flash for half precision, memory-efficient for float32) runs
beside it for the lse alone: one more attention forward per layer, and the model's output untouched. Any other call (a mask tensor,
dropout, another device) makes the records unusable: `KernelRecords.fallback` names why, and the caller
collects q, k, v and z the usual way instead. The patch is process-wide while it lasts and restored on exit,
also when the forward raises.

With `offload=True` each record's q and k are copied to pinned host memory as soon as the kernel returns (on
CUDA), so the device holds one layer's at a time; `StreamedLayer`s are rebuilt on the device layer by layer
by the streamed reader (`interpret.streaming.kernel.KernelLayers`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from jaxtyping import Float
from torch import Tensor

_FUSED_DEVICES = ("cpu", "cuda")
_FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass
class KernelCall:
    """One attention kernel call of one batch.

    q: [batch, head, query, d_head], k: [batch, kv_head, key, d_head] as the kernel received them (model dtype;
    on the host when offloaded; query = key = n for self-attention). lse: [batch, head, query] float32, the
    kernel's log Σ_j exp(score_ij). scale: the softmax scale used. causal: whether the kernel applied its
    causal mask.
    """

    q: Float[Tensor, "batch head query d_head"]
    k: Float[Tensor, "batch kv_head key d_head"]
    lse: Float[Tensor, "batch head query"]
    scale: float
    causal: bool


@dataclass
class KernelRecords:
    """The kernel calls of one forward pass in call order (one per attention layer), or why they are unusable."""

    calls: list[KernelCall] = field(default_factory=list)
    fallback: str | None = None
    offload: bool = False


def _fused_sdpa(query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    """Return (output [batch, head, n, d_v], lse [batch, head, n] float32) from a fused kernel that returns its
    lse: on the CPU the flash kernel SDPA dispatches to; on CUDA memory-efficient (float32) or flash."""
    if query.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, is_causal, scale=scale)
    if key.shape[1] != query.shape[1]:  # the CUDA kernels below take one head count for q, k and v
        repeats = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeats, 1), value.repeat_interleave(repeats, 1)
    if query.dtype == torch.float32:
        out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, None, True, 0.0, is_causal, scale=scale
        )
        return out, lse[..., : query.shape[2]]
    out, lse, *_ = torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, is_causal, False, scale=scale)
    return out, lse


@contextmanager
def kernel_records(offload: bool = False) -> Iterator[KernelRecords]:
    """Yield the records that SDPA calls made inside the block fill (module docstring)."""
    records = KernelRecords(offload=offload)
    original = torch.nn.functional.scaled_dot_product_attention

    def recording_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,  # noqa: ANN001, ANN202
                       enable_gqa=False):
        why = _unfused_reason(query, key, value, attn_mask, dropout_p)
        if why is not None:
            records.fallback = records.fallback or why
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        used_scale = float(scale) if scale is not None else query.shape[-1] ** -0.5
        if query.device.type == "cuda":  # SDPA's own kernel choice serves the model; the lse comes from beside it
            out = original(query, key, value, dropout_p=0.0, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
            _, lse = _fused_sdpa(query, key, value, bool(is_causal), used_scale)
        else:
            out, lse = _fused_sdpa(query, key, value, bool(is_causal), used_scale)
        q, k = query.detach(), key.detach()
        if offload and q.device.type == "cuda":
            q, k = to_host(q), to_host(k)
        records.calls.append(KernelCall(q, k, lse.detach(), used_scale, bool(is_causal)))
        return out

    torch.nn.functional.scaled_dot_product_attention = recording_sdpa
    try:
        yield records
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


def _unfused_reason(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None, dropout_p: float) -> str | None:
    """Return why this SDPA call cannot go to a fused kernel that returns lse, or None when it can."""
    if attn_mask is not None:
        return "an attention mask tensor (padding or a custom mask)"
    if dropout_p:
        return "attention dropout"
    if query.dim() != 4 or query.device.type not in _FUSED_DEVICES or query.dtype not in _FUSED_DTYPES:
        return f"{query.dtype} attention on {query.device.type}"
    if key.shape[-1] != query.shape[-1] or value.shape[-1] != query.shape[-1] or query.shape[1] % key.shape[1]:
        return "head sizes or head counts the fused kernel does not take"
    return None


def to_host(tensor: Tensor) -> Tensor:
    """Return a pinned host copy of a CUDA `tensor`, asynchronous: the stream orders it before the next kernel, so
    later in-place writes on the device do not reach it; synchronise before reading it on the host."""
    host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    return host
