"""Gather each example's `StreamedLayer`s: from a trace (queries, keys and each row's log-sum-exp captured, no
pattern) or by running the model once with autograd for ∂score/∂z.

Nothing here is quadratic in the length: per layer, q and k are [batch, pos, head, d_head], the log-sum-exps
[batch, head, pos] (the kernel's own when a fused SDPA kernel served the call, `interpret.collect.hf.attention`),
and the gradient pass keeps what autograd keeps for a plain backward pass through the model.

∂score/∂z is taken at the output projection's input: for the pass, a scoped hook hands the projection a
fresh view of that input (the same numbers, no copy) whose gradient a tensor hook keeps as the backward pass
reaches it; q, k and v come from the same pass through `ctx.capture`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor

from interpret.errors import AnalyzerError
from interpret.hooks import hook_session
from interpret.streaming.kernel import to_host
from interpret.streaming.pattern import LazyLayers, StreamedLayer
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


def _real(tensor: Tensor, positions: np.ndarray, axis: int) -> Tensor:
    """Return `tensor` over the real `positions` of its position axis (itself, a view, when nothing is padded)."""
    if len(positions) == tensor.shape[axis]:
        return tensor
    return tensor.index_select(axis, torch.as_tensor(positions, device=tensor.device))


def _per_example(tensor: Tensor, b: int, positions: np.ndarray) -> Tensor:
    """Return example b of a [batch, pos, head, d_head] tensor over its real positions as [head, n, d_head]."""
    return _real(tensor[b], positions, 0).transpose(0, 1)


def _heads(tensor: Tensor, n_heads: int) -> Tensor:
    """Return z as [batch, pos, head, d_head] (an output projection's input is [batch, pos, head · d_head])."""
    return tensor if tensor.dim() == 4 else tensor.unflatten(-1, (n_heads, -1))


def layers_from_trace(trace: Trace, what: str, device: torch.device | None = None) -> list[Sequence[StreamedLayer]]:
    """Return, per example, its StreamedLayers (layer order) built from the trace's q, k and lse (no v, no z):
    a lazy sequence whose layers are built when read, each moved to `device` (default: where the trace is) as
    its example's contiguous rows first, so an offloaded trace crosses to the device one layer at a time."""
    _check_kind(trace, what)
    found = [trace.layers(suffix) for suffix in ROWS]
    if not found[0] or any(layers != found[0] for layers in found):
        raise AnalyzerError(
            f"{what} needs blocks.{{i}}.attn.hook_q, hook_k and hook_lse of the same layers;"
            f" collect them with names={list(REQUIRES)}."
        )
    return [_TraceLayers(trace, found[0], b, positions, device) for b, positions in enumerate(real_positions(trace))]


class _TraceLayers(LazyLayers):
    """The captured q, k and lse of one example as `StreamedLayer`s, built one layer at a time when read."""

    def __init__(self, trace: Trace, layers: list[int], example: int, positions: np.ndarray,
                 device: torch.device | None) -> None:
        self.trace, self.layers, self.example, self.positions, self.device = trace, layers, example, positions, device
        self.causal = trace.meta.kind == "decoder"

    def __len__(self) -> int:
        return len(self.layers)

    def layer(self, index: int) -> StreamedLayer:
        """Return layer `index` of this example, its rows moved to the device."""
        i = self.layers[index]
        q, k, lse = (self._rows(self.trace[f"blocks.{i}.{suffix}"].detach()) for suffix in ROWS)  # [pos, head, d], [head, pos]
        q, k = (_real(t, self.positions, 0).transpose(0, 1) for t in (q, k))
        return StreamedLayer(q, k, None, causal=self.causal, lse=_real(lse, self.positions, 1))

    def _rows(self, tensor: Tensor) -> Tensor:
        """Return this example's slice of `tensor` (batch first), on the device."""
        row = tensor[self.example]
        return row if self.device is None else row.to(self.device, non_blocking=True)


OFFLOAD_TOKENS = 4096  # "auto" offloads (CUDA) and recomputes blocks from this many tokens of batch × length


def layers_with_gradients(
    trace: Trace, ctx: Any, what: str, offload: str = "auto", recompute: str = "auto"
) -> list[list[StreamedLayer]]:
    """Run the model once with autograd (ctx.capture of q, k, v) and return, per example, its StreamedLayers
    with z and ∂score/∂z, where score is each example's target score (ctx.targets).

    Memory: the parameters are frozen for the pass and the first layer's z is handed to its output projection as
    a fresh leaf, so autograd records only what flows from there (no input of any weight is saved for a weight
    gradient nobody asks for); every other z's gradient is read by a tensor hook as the backward pass reaches
    it, and no z is held by the graph's caller. offload "on" (or "auto" on a CUDA model from `OFFLOAD_TOKENS`
    tokens of batch × length): every tensor autograd saves goes to pinned host memory
    (`torch.autograd.graph.save_on_cpu`) and q, k, v, z and ∂score/∂z are copied there as they appear, so the
    GPU holds the weights and about one layer's working set (at the cost of the copies); the readouts move each
    layer back to the device as they use it. "off" keeps everything where the model is. recompute "on" (or
    "auto" on the CPU from `OFFLOAD_TOKENS` tokens; on CUDA "auto" leaves that job to the offload): every block
    after the first attention's runs under `torch.utils.checkpoint` (non-reentrant), so autograd keeps each
    block's inputs only and recomputes its inside when the backward pass reaches it: one more forward pass of
    those blocks, and one block's activations at a time instead of every layer's. A z the score does not
    depend on gets ∂score/∂z = 0.
    """
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
    on_cuda = any(param.is_cuda for param in runner.model.parameters())
    tokens = trace.encoded.batch * trace.encoded.pos
    offload = on_cuda and (offload == "on" or (offload == "auto" and tokens >= OFFLOAD_TOKENS))
    first = min(_layer_of(site) for site in sites)
    taps = _Taps(first, offload)
    saved = torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else contextlib.nullcontext()
    long_input = tokens >= OFFLOAD_TOKENS
    blocks = _blocks(runner.capturable, first) if recompute == "on" or (recompute == "auto" and long_input and not on_cuda) else []
    with _frozen(runner.model), saved, _recomputed(blocks):
        with hook_session() as session:
            for site in sites:
                session.add(site.module, taps.keeper(_layer_of(site), site.pre), pre=site.pre, with_kwargs=True)
            capture = ctx.capture(trace.encoded, [f"blocks.*.{suffix}" for suffix in QKV], offload=offload)
        qkv = {name: tensor.detach() for name, tensor in capture.tensors.items()}  # host copies when offloading
        score = capture.score.sum()
        del capture
        if taps.root is None:
            raise AnalyzerError(f"{what}: no attention output projection ran; the model's hook_z sites never fired.")
        torch.autograd.grad(score, [taps.root])  # the tensor hooks keep each ∂score/∂z as the pass reaches it
        del score
        taps.root = None  # its hook holds the taps: without this cycle the captures go when the caller drops them
    if offload:
        torch.cuda.synchronize()  # the host copies are complete
    order = sorted(taps.values)
    grads = {i: taps.grads[i] if i in taps.grads else torch.zeros_like(taps.values[i]) for i in order}
    n_heads = qkv[f"blocks.{order[0]}.attn.hook_q"].shape[2]
    causal = trace.meta.kind == "decoder"
    out = []
    for b, positions in enumerate(real_positions(trace)):
        layers = []
        for i in order:
            q, k, v = (qkv[f"blocks.{i}.{suffix}"] for suffix in QKV)
            layers.append(StreamedLayer(
                *(_per_example(t, b, positions) for t in (q, k, v)), causal=causal,
                z=_per_example(_heads(taps.values[i], n_heads), b, positions),
                grad_z=_per_example(_heads(grads[i], n_heads), b, positions),  # model dtype: blocks cast it
            ))
        out.append(layers)
    return out


def _layer_of(site: Any) -> int:
    if site.layer is None:
        raise AnalyzerError("an attention's hook_z site has no block index; its adapter names it wrongly.")
    return int(site.layer)


def _blocks(capturable: Any, first: int) -> list[torch.nn.Module]:
    """Return the block modules after block `first` (the one holding the pass's leaf: a block recomputed
    without its tap would save other tensors than the first time)."""
    found = [(site.layer, site.module) for site in capturable.sites
             if site.name.startswith("blocks.") and site.name.endswith(".hook_resid_pre") and site.module is not None]
    return [module for layer, module in found if layer is not None and layer > first]


@contextlib.contextmanager
def _recomputed(blocks: list[torch.nn.Module]) -> Iterator[None]:
    """Yield with each block's forward run under non-reentrant activation checkpointing; restore on exit."""
    from torch.utils.checkpoint import checkpoint

    try:
        for block in blocks:
            block.forward = partial(checkpoint, block.forward, use_reentrant=False)
        yield
    finally:
        for block in blocks:
            block.__dict__.pop("forward", None)


@contextlib.contextmanager
def _frozen(model: torch.nn.Module) -> Iterator[None]:
    """Yield with every parameter's requires_grad off; restore each one's own flag on exit, also on errors."""
    trainable = [param for param in model.parameters() if param.requires_grad]
    try:
        for param in trainable:
            param.requires_grad_(False)
        yield
    finally:
        for param in trainable:
            param.requires_grad_(True)


class _Taps:
    """What the gradient pass keeps of each output projection's input z [batch, pos, head · d_head]: its value
    and ∂score/∂z (host copies when offloading), and the first layer's z as the leaf the pass differentiates to."""

    def __init__(self, first: int, offload: bool) -> None:
        self.first = first
        self.offload = offload
        self.values: dict[int, Tensor] = {}
        self.grads: dict[int, Tensor] = {}
        self.root: Tensor | None = None

    def keep(self, tensor: Tensor) -> Tensor:
        """Return `tensor` as kept: a pinned host copy when offloading, else itself."""
        return to_host(tensor) if self.offload else tensor

    def tap(self, layer: int, tensor: Tensor) -> Tensor:
        """Return what the projection reads instead of `tensor` (the same numbers): a fresh leaf for the first
        layer, else a view whose gradient a hook keeps."""
        self.values[layer] = self.keep(tensor.detach())
        if layer == self.first:
            self.root = tensor.detach().requires_grad_(True)
            self.root.register_hook(partial(self._grad, layer))
            return self.root
        view = tensor.view_as(tensor)
        view.register_hook(partial(self._grad, layer))
        return view

    def _grad(self, layer: int, grad: Tensor) -> None:
        self.grads[layer] = self.keep(grad.detach())

    def keeper(self, layer: int, pre: bool) -> Any:
        """Return a module hook that hands the output projection its tapped input (pre) or output."""
        if pre:
            def pre_hook(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
                if args:
                    return (self.tap(layer, args[0]), *args[1:]), kwargs
                name = next(key for key, value in kwargs.items() if isinstance(value, Tensor))
                return args, {**kwargs, name: self.tap(layer, kwargs[name])}
            return pre_hook

        def post_hook(module: Any, args: tuple, kwargs: dict, output: Any) -> Any:
            return self.tap(layer, output) if isinstance(output, Tensor) else (self.tap(layer, output[0]), *output[1:])
        return post_hook
