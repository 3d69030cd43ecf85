"""Gather each example's `StreamedLayer`s: from a trace (queries, keys and each row's log-sum-exp captured, no
pattern) or by running the model once with autograd for ∂score/∂z.

Nothing here is quadratic in the length: per layer, q and k are [batch, pos, head, d_head], the log-sum-exps
[batch, head, pos] (the kernel's own when a fused SDPA kernel served the call, `interpret.collect.hf.attention`),
and the gradient pass keeps what autograd keeps for a plain backward pass through the model.

∂score/∂z is taken at the output projection's input: for the pass, a scoped hook hands the projection a
fresh view of that input (the same numbers, no copy) and keeps it, so the gradient reaches it
(`torch.autograd.grad(score, kept)`); q, k and v come from the same pass through `ctx.capture`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from interpret.errors import AnalyzerError
from interpret.hooks import hook_session
from interpret.streaming.pattern import StreamedLayer
from interpret.trace import Trace

QKV = ("attn.hook_q", "attn.hook_k", "attn.hook_v")
ROWS = ("attn.hook_q", "attn.hook_k", "attn.hook_lse")  # what a rollout row needs: q, k and each row's normaliser
REQUIRES = tuple(f"*{suffix}" for suffix in ROWS)


def real_positions(trace: Trace) -> list[np.ndarray]:
    """Return each example's real (unpadded) positions [n_b]."""
    mask = trace.encoded.attention_mask.bool().cpu().numpy()
    return [np.flatnonzero(row) for row in mask]


def _check_kind(trace: Trace, what: str) -> None:
    if trace.meta.kind == "encoder-decoder":
        raise AnalyzerError(
            f"{what} streams one stack of self-attention; this trace is encoder-decoder: use rollout instead."
        )


def _per_example(tensor: Tensor, b: int, positions: np.ndarray) -> Tensor:
    """Return example b of a [batch, pos, head, d_head] tensor over its real positions as [head, n, d_head]."""
    if len(positions) == tensor.shape[1]:  # nothing padded: a view, no copy
        return tensor[b].transpose(0, 1)
    index = torch.as_tensor(positions, device=tensor.device)
    return tensor[b].index_select(0, index).transpose(0, 1)


def _heads(tensor: Tensor, n_heads: int) -> Tensor:
    """Return z as [batch, pos, head, d_head] (an output projection's input is [batch, pos, head · d_head])."""
    return tensor if tensor.dim() == 4 else tensor.unflatten(-1, (n_heads, -1))


def layers_from_trace(trace: Trace, what: str) -> list[list[StreamedLayer]]:
    """Return, per example, its StreamedLayers (layer order) built from the trace's q, k and lse (no v, no z)."""
    _check_kind(trace, what)
    found = [trace.layers(suffix) for suffix in ROWS]
    if not found[0] or any(layers != found[0] for layers in found):
        raise AnalyzerError(
            f"{what} needs blocks.{{i}}.attn.hook_q, hook_k and hook_lse of the same layers;"
            f" collect them with names={list(REQUIRES)}."
        )
    causal = trace.meta.kind == "decoder"
    out = []
    for b, positions in enumerate(real_positions(trace)):
        layers = []
        for i in found[0]:
            q, k, lse = (trace[f"blocks.{i}.{suffix}"].detach() for suffix in ROWS)
            rows = lse[b] if len(positions) == lse.shape[-1] else lse[b].index_select(-1, torch.as_tensor(positions, device=lse.device))
            layers.append(StreamedLayer(
                *(_per_example(t, b, positions) for t in (q, k)), None, causal=causal, lse=rows,
            ))
        out.append(layers)
    return out


def layers_with_gradients(trace: Trace, ctx: Any, what: str) -> list[list[StreamedLayer]]:
    """Run the model once with autograd (ctx.capture of q, k, v) and return, per example, its StreamedLayers
    with z and ∂score/∂z, where score is each example's target score (ctx.targets)."""
    _check_kind(trace, what)
    runner = getattr(ctx, "runner", None)
    if runner is None:
        raise AnalyzerError(f"{what} runs the model for gradients; pass model= (and tokenizer=) to analyze.")
    sites = [site for site in runner.capturable.sites if site.name.startswith("blocks.") and site.name.endswith(".attn.hook_z")]
    if not sites or any(site.module is None for site in sites):
        raise AnalyzerError(
            f"{what} needs the output projection of every attention (hook_z), which this model does not"
            " expose; use rollout with attention patterns instead."
        )
    kept: dict[int, Tensor] = {}
    with hook_session() as session:
        for site in sites:
            session.add(site.module, _keeper(site.layer, site.pre, kept), pre=site.pre, with_kwargs=True)
        capture = ctx.capture(trace.encoded, [f"blocks.*.{suffix}" for suffix in QKV])
    order = sorted(kept)
    grads = torch.autograd.grad(capture.score.sum(), [kept[i] for i in order])
    n_heads = capture[f"blocks.{order[0]}.attn.hook_q"].shape[2]
    causal = trace.meta.kind == "decoder"
    out = []
    for b, positions in enumerate(real_positions(trace)):
        layers = []
        for i, grad in zip(order, grads):
            q, k, v = (capture[f"blocks.{i}.{suffix}"].detach() for suffix in QKV)
            layers.append(StreamedLayer(
                *(_per_example(t, b, positions) for t in (q, k, v)), causal=causal,
                z=_per_example(_heads(kept[i].detach(), n_heads), b, positions),
                grad_z=_per_example(_heads(grad, n_heads), b, positions),  # model dtype: blocks cast it
            ))
        out.append(layers)
    return out


def _keeper(layer: int | None, pre: bool, kept: dict[int, Tensor]) -> Any:
    """Return a hook that hands the module a fresh view of its input (pre) or output and keeps it."""
    if layer is None:
        raise AnalyzerError("an attention's hook_z site has no block index; its adapter names it wrongly.")

    def substitute(tensor: Tensor) -> Tensor:
        view = tensor.view_as(tensor)
        kept[layer] = view
        return view

    if pre:
        def pre_hook(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            if args:
                return (substitute(args[0]), *args[1:]), kwargs
            name = next(key for key, value in kwargs.items() if isinstance(value, Tensor))
            return args, {**kwargs, name: substitute(kwargs[name])}
        return pre_hook

    def post_hook(module: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        return substitute(output) if isinstance(output, Tensor) else (substitute(output[0]), *output[1:])
    return post_hook

