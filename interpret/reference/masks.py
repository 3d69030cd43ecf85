"""Attention masks as bool "allowed" tensors: True where a query may attend to a key.

Every mask here is built from three independent rules, combined with AND: padding (the key is a real
position), causality (key j <= query i) and a local window (|i - j| <= window). The combined mask has the
shape [batch, 1, query, key] (the 1 broadcasts over heads; batch is 1 when no padding mask was given).
"""

from __future__ import annotations

import torch
from jaxtyping import Bool
from torch import Tensor

from interpret.errors import InputError

AllowedMask = Bool[Tensor, "#batch 1 #query key"]
PairMask = Bool[Tensor, "query key"]


def padding_allowed(attention_mask: Tensor, batch: int, n_key: int) -> Bool[Tensor, "batch 1 1 key"]:
    """Return [batch, 1, 1, key]: True at real keys, from an attention_mask [batch, key] (1 real, 0 pad).

    Raises InputError when the mask is not [batch, key] for the given sizes.
    """
    if tuple(attention_mask.shape) != (batch, n_key):
        raise InputError(
            f"attention_mask has shape {tuple(attention_mask.shape)}; expected [batch, key] ="
            f" {(batch, n_key)}, with 1 at real positions and 0 at padding."
        )
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise InputError(
            f"attention_mask has dtype {attention_mask.dtype}; give an integer or bool mask (1 real, 0 pad)."
        )
    return (attention_mask != 0)[:, None, None, :]


def causal_allowed(n_query: int, n_key: int, device: torch.device | None = None) -> PairMask:
    """Return [query, key]: True where key j <= query i (the upper triangle is False)."""
    return torch.ones(n_query, n_key, dtype=torch.bool, device=device).tril()


def window_allowed(
    n_query: int, n_key: int, window: int, *, causal: bool = False, device: torch.device | None = None
) -> PairMask:
    """Return [query, key]: True where |i - j| <= window (with causal, where i - window <= j <= i)."""
    if window < 0:
        raise InputError(f"window={window} is negative; use an integer >= 0.")
    query = torch.arange(n_query, device=device)[:, None]
    key = torch.arange(n_key, device=device)[None, :]
    band = (query - key).abs() <= window
    return band.tril() if causal else band


def attention_allowed(
    attention_mask: Tensor | None,
    *,
    batch: int,
    n_query: int,
    n_key: int,
    causal: bool = False,
    window: int | None = None,
    device: torch.device | None = None,
) -> AllowedMask:
    """Return the combined [batch or 1, 1, query, key] bool mask of padding, causality and window.

    attention_mask: [batch, key] with 1 at real keys and 0 at padding, or None when every key is real.
    causal and window apply to positions, so they need query and key to index the same sequence.
    """
    if (causal or window is not None) and n_query != n_key:
        raise InputError(
            "causal or windowed attention needs as many queries as keys;"
            f" got {n_query} queries and {n_key} keys."
        )
    allowed = torch.ones(n_query, n_key, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed & causal_allowed(n_query, n_key, device=device)
    if window is not None:
        allowed = allowed & window_allowed(n_query, n_key, window, causal=causal, device=device)
    combined = allowed[None, None, :, :]
    if attention_mask is not None:
        mask = attention_mask if device is None else attention_mask.to(device)
        combined = combined & padding_allowed(mask, batch, n_key)
    return combined
