"""The attention kernel an audit runs its model with: the eager kernel, whose weights are the patterns.

An audit that reads every layer's attention pattern (one whose analyzers are all streaming ones reads none,
and keeps the kernel it was loaded with). Under a fused kernel (SDPA) the collector recomputes each
pattern from the kernel's query, key and mask (q·kᵀ·scale + mask, softmax, in float32: a second attention
computation per layer); the eager kernel computes the weights itself and the collector takes them as they are
(`AttentionRecorder(use_kernel_weights=True)`). So an audit of a float32 Hugging Face model loaded with SDPA
runs it with the eager kernel for the duration of the audit (`model.set_attn_implementation`, switched back
after, also when the audit fails). Both kernels state softmax(q·kᵀ·scale + mask)·V in float32, so the logits
and patterns agree to float rounding, not bit for bit: the fingerprint records the implementation the model
ran with (`describe`), so a resume never mixes parts computed under one kernel with parts of the other.

Models in other dtypes keep their kernel: the eager kernel of a half-precision model rounds its weights to
that precision, where the recomputed pattern is float32. Models that cannot switch (no transformers config, a
kernel not chosen through transformers' attention interface) keep theirs too.

While an audit runs, the model object it was given runs eager attention: a forward pass of the same object
on another thread meanwhile would run it too (with the same results to float rounding).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

EAGER = "eager"
_SWITCHED_FROM = ("sdpa",)  # fused kernels whose patterns the collector would recompute


def loaded_implementation(model: nn.Module) -> str | None:
    """Return the attention implementation the model was loaded with ("sdpa", "eager", ...), or None when it
    is not a transformers model that names one."""
    config = getattr(model, "config", None)
    implementation = getattr(config, "_attn_implementation", None) if config is not None else None
    return str(implementation) if implementation else None


def audit_implementation(model: nn.Module, patterns: bool = True) -> str | None:
    """Return the implementation an audit runs `model` with: "eager" for a float32 transformers model loaded
    with SDPA that can switch its kernel, when the audit captures patterns, else None (the model runs as
    loaded: an audit of streamed analyzers only keeps the fused kernel, which never holds an [n, n] score)."""
    if not patterns or loaded_implementation(model) not in _SWITCHED_FROM:
        return None
    can_switch = getattr(model, "_can_set_attn_implementation", None)
    if not callable(getattr(model, "set_attn_implementation", None)) or not callable(can_switch) or not can_switch():
        return None
    floating = [tensor.dtype for tensor in [*model.parameters(), *model.buffers()] if tensor.is_floating_point()]
    if not floating or any(dtype != torch.float32 for dtype in floating):
        return None
    return EAGER


def describe(model: nn.Module, patterns: bool = True) -> str:
    """Return the fingerprint's text for the attention kernel an audit runs `model` with (`patterns`: whether
    the audit captures patterns): "eager" (loaded so, or switched from SDPA: the same computation), "sdpa", ...
    or "none" for a model that names none."""
    return audit_implementation(model, patterns) or loaded_implementation(model) or "none"


@contextmanager
def audit_kernel(model: nn.Module, implementation: str | None) -> Iterator[None]:
    """Yield while `model` runs attention with `implementation` (None or its current one: nothing changes);
    the implementation it had is restored on exit, also when the block raises."""
    before = loaded_implementation(model)
    if implementation is None or implementation == before:
        yield
        return
    model.set_attn_implementation(implementation)  # type: ignore[operator]
    try:
        yield
    finally:
        model.set_attn_implementation(before)  # type: ignore[operator]
