"""The attention scores a kernel computed, restated in float32 from the very tensors it received.

A fused kernel (SDPA, flash) returns no weights. These functions rebuild `q·kᵀ·scaling (+ position bias)
+ mask` from the query, key, mask and keyword arguments that transformers passed to the kernel, with the
kernel's own conventions: key heads repeated for grouped-query attention, T5's unscaled scores and
position bias, soft-capping, a mask that is a 4D boolean (SDPA), a 4D additive float (eager), a 2D padding
mask (flash) or None (the kernel applies `is_causal` and the sliding window itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interpret.errors import CaptureError

# A masked score: the float32 minimum, not -inf, so a fully masked row gives a uniform row rather than NaN,
# exactly as transformers' eager masks do.
LOWEST = torch.finfo(torch.float32).min


def repeat_heads(states: Float[Tensor, "batch kv_head pos d_head"], n_heads: int) -> Float[Tensor, "batch head pos d_head"]:
    """Return key or value states with each key/value head repeated for the query heads that share it."""
    groups = n_heads // states.shape[1]
    return states if groups == 1 else states.repeat_interleave(groups, dim=1)


def sink_logits(kwargs: Mapping[str, Any]) -> Float[Tensor, " head"] | None:
    """Return the per-head attention-sink logits [head] in float32 the kernel was given (`s_aux`: gpt-oss,
    DeepSeek V4, HunYuan V4, MiMo-V2-Flash, Granite SWA, ...), or None. A sink is one more key in every row's
    softmax denominator that holds no value: a row's probabilities are exp(score − lse'), lse' = log(Σ_key
    exp(score) + exp(sink)), so they sum to less than one."""
    sink = kwargs.get("s_aux")
    return sink.float() if isinstance(sink, Tensor) else None


def with_sink(lse: Float[Tensor, "*batch head rows"], sink: Float[Tensor, " head"] | None) -> Float[Tensor, "*batch head rows"]:
    """Return the row log-normalisers with each head's sink term added, log(exp(lse) + exp(sink)), in `lse`'s
    dtype, or `lse` itself without sinks ([batch, head, query] from a kernel call, [head, rows] streamed)."""
    return lse if sink is None else torch.logaddexp(lse, sink.to(lse)[:, None])


def kernel_scaling(kwargs: Mapping[str, Any], d_head: int) -> float:
    """Return the softmax scale the kernel was given (`scaling`), else its default 1/√d_head."""
    scaling = kwargs.get("scaling")
    return d_head**-0.5 if scaling is None else float(scaling)


def attention_scores(
    module: nn.Module,
    query: Float[Tensor, "batch head query d_head"],
    key: Float[Tensor, "batch kv_head key d_head"],
    attention_mask: Tensor | None,
    kwargs: Mapping[str, Any],
) -> Float[Tensor, "batch head query key"]:
    """Return the masked pre-softmax scores [batch, head, query, key] in float32 (masked keys hold LOWEST)."""
    if hasattr(attention_mask, "mask_mod"):
        raise CaptureError(
            "flex_attention block masks cannot be read back; load the model with attn_implementation='sdpa'"
            " or 'eager'."
        )
    batch, n_heads, q_len, d_head = query.shape
    key32 = repeat_heads(key, n_heads).float()
    k_len = key32.shape[2]
    # One GEMM with the scaling in its epilogue, as (q·kᵀ)·scaling: no extra pass over [query, key]
    # (beta=0: the uninitialised buffer is ignored, NaNs included).
    scores = torch.empty(batch * n_heads, q_len, k_len, dtype=torch.float32, device=query.device)
    scores.baddbmm_(
        query.float().reshape(batch * n_heads, q_len, d_head),
        key32.reshape(batch * n_heads, k_len, d_head).transpose(1, 2),
        beta=0.0,
        alpha=kernel_scaling(kwargs, d_head),
    )
    scores = scores.view(batch, n_heads, q_len, k_len)
    softcap = kwargs.get("softcap")
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    position_bias = kwargs.get("position_bias")
    if position_bias is not None:
        scores.add_(position_bias.float())
    mask_bias = additive_mask(module, attention_mask, scores.shape[-2], scores.shape[-1], kwargs, scores.device)
    if mask_bias is not None:
        scores.add_(mask_bias)
    return scores


def additive_mask(
    module: nn.Module,
    attention_mask: Tensor | None,
    q_len: int,
    k_len: int,
    kwargs: Mapping[str, Any],
    device: torch.device,
) -> Tensor | None:
    """Return the float32 bias (0 or LOWEST) broadcastable to [batch, head, query, key], or None for none.

    A 4D mask already holds causality, padding and any sliding window; with no mask or a 2D padding mask
    the kernel applied `is_causal` and `sliding_window` itself, so they are restated here (queries aligned
    to the last keys, as a kernel does when there are more keys than queries).
    """
    if attention_mask is not None and attention_mask.dim() == 4:
        mask = attention_mask[..., :k_len]
        if mask.dtype == torch.bool:
            return torch.where(mask, 0.0, LOWEST).to(torch.float32)
        return mask.float()
    keep: Tensor | None = None
    if attention_mask is not None:
        keep = attention_mask[:, None, None, :k_len].bool()
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", False)
    window = kwargs.get("sliding_window")
    if (is_causal and q_len > 1) or window:
        query_pos = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)
        key_pos = torch.arange(k_len, device=device)[None, :]
        allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
        if is_causal and q_len > 1:
            allowed &= key_pos <= query_pos
        if window:
            allowed &= key_pos > query_pos - int(window)
        keep = allowed if keep is None else keep & allowed
    return None if keep is None else torch.where(keep, 0.0, LOWEST).to(torch.float32)
