"""Gather each example's `StreamedLayer`s: from a trace (queries, keys and each row's log-sum-exp captured, no
pattern) or by running the model once with autograd for ∂score/∂z.

Nothing here is quadratic in the length: per layer, q and k are [batch, pos, head, d_head], the log-sum-exps
[batch, head, pos] (the kernel's own when a fused SDPA kernel served the call, `interpret.capture.hf.attention`),
and the gradient pass keeps what autograd keeps for a plain backward pass through the model, and hands each
layer to its consumer as the backward pass reaches it (`gradient_pass`).

∂score/∂z is taken at the output projection's input: for the pass, a scoped hook hands the projection a
fresh view of that input (the same numbers, no copy) whose gradient a tensor hook keeps as the backward pass
reaches it; q, k and v come from the same pass (`ModelRunner.live_pass`, whose hooks also fire where the
backward pass recomputes a block).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor

from interpret.arrays import to_numpy
from interpret.capture.kernel import to_host
from interpret.capture.sites import on_its_call
from interpret.errors import AnalyzerError
from interpret.estimate.memory import gradient_policy
from interpret.hooks import hook_session
from interpret.streaming.pattern import LazyLayers, StreamedLayer
from interpret.trace import Trace

QKV = ("attn.hook_q", "attn.hook_k", "attn.hook_v")
ROWS = ("attn.hook_q", "attn.hook_k", "attn.hook_lse")  # what a rollout row needs: q, k and each row's normaliser
REQUIRES = tuple(f"*{suffix}" for suffix in ROWS)


def real_positions(trace: Trace) -> list[np.ndarray]:
    """Return each example's real (unpadded) positions [n_b]."""
    mask = to_numpy(trace.encoded.attention_mask.bool())
    return [np.flatnonzero(row) for row in mask]


def _check_kind(trace: Trace, what: str) -> None:
    """Refuse a trace the streamed computation cannot restate, before anything runs: an encoder-decoder's, or one
    whose attention has sinks (a per-head logit in every row's softmax denominator, which q and k do not hold)."""
    if trace.meta.kind == "encoder-decoder":
        raise AnalyzerError(
            f"{what} streams one stack of self-attention; this trace is encoder-decoder: use rollout instead."
        )
    if trace.meta.sinks and not trace.meta.sink_logits:
        raise AnalyzerError(
            f"{what} restates attention from q and k and this model's sinks, whose logits this trace does not"
            " hold (it was saved by an earlier version): collect it again."
        )


def masking(trace: Trace, layer: int) -> dict[str, Any]:
    """Return what the streamed computation restates of layer `layer`'s attention beyond q and k, as
    StreamedLayer's keywords: causal (a decoder's), its sliding window (0: none), its softmax scale (None:
    1/√d_head), the soft-capping of its scores (0.0: none) and its sinks' logits [head] float32 (None: no sinks;
    the heads the trace kept)."""
    meta = trace.meta
    window = meta.windows[layer] if layer < len(meta.windows) else 0
    scale = meta.scales[layer] if layer < len(meta.scales) else 0.0
    softcap = meta.softcaps[layer] if layer < len(meta.softcaps) else 0.0
    logits = meta.sink_logits[layer] if layer < len(meta.sink_logits) else ()
    sink = torch.tensor(logits, dtype=torch.float32) if logits else None
    if sink is not None and meta.heads is not None:
        sink = sink[list(meta.heads)]
    return {"causal": meta.kind == "decoder", "window": window, "kernel_scale": scale or None, "softcap": softcap,
            "sink": sink}


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

    def __len__(self) -> int:
        return len(self.layers)

    def layer(self, index: int) -> StreamedLayer:
        """Return layer `index` of this example, its rows moved to the device."""
        i = self.layers[index]
        q, k, lse = (self._rows(self.trace[f"blocks.{i}.{suffix}"].detach()) for suffix in ROWS)  # [pos, head, d], [head, pos]
        q, k = (_real(t, self.positions, 0).transpose(0, 1) for t in (q, k))
        return StreamedLayer(q, k, None, lse=_real(lse, self.positions, 1), **masking(self.trace, i))

    def _rows(self, tensor: Tensor) -> Tensor:
        """Return this example's slice of `tensor` (batch first), on the device."""
        row = tensor[self.example]
        return row if self.device is None else row.to(self.device, non_blocking=True)


KEPT = ("attn.hook_q", "attn.hook_k", "attn.hook_v", "z", "grad")  # what one layer's StreamedLayers are built from

# consume(index, layers): index into the pass's layer order (ascending layer numbers); layers: one StreamedLayer
# per example, or None for a layer the score does not reach and whose tensors were never kept.
Consumer = Callable[[int, "list[StreamedLayer] | None"], None]


def gradient_pass(
    trace: Trace, ctx: Any, what: str, consume: Consumer, offload: str = "auto", recompute: str = "auto"
) -> list[int]:
    """Run the model once with autograd and hand each layer to `consume` as the backward pass reaches it, from
    the last layer down; return the layer order (ascending layer numbers; consume's index points into it).

    Each layer comes as one StreamedLayer per example: q, k, v as they entered the attention, z and ∂score/∂z,
    where score is each example's target score (ctx.targets). The consumer runs inside the backward pass, and
    what it was handed is dropped when it returns, so at any time the pass holds the tensors of the layers the
    backward pass has not reached yet — and, where blocks are recomputed, not even those: a recomputed block's
    q, k, v and z are kept when the backward pass recomputes it, not in the forward pass, so the pass holds
    about one layer's tensors at a time. A z the score does not reach gets ∂score/∂z = 0 after the pass (None
    when its block was never recomputed, so nothing was kept).

    Memory: the parameters are frozen for the pass and the first layer's z is handed to its output projection as
    a fresh leaf, so autograd records only what flows from there (no input of any weight is saved for a weight
    gradient nobody asks for); every other z's gradient is read by a tensor hook as the backward pass reaches
    it. offload "on" (or "auto" on a CUDA model from `OFFLOAD_TOKENS` tokens of batch × length): every tensor
    autograd saves goes to pinned host memory (`torch.autograd.graph.save_on_cpu`) and q, k, v, z and
    ∂score/∂z are copied there as they appear (the readouts move each layer back to the device as they use it).
    "off" keeps everything where the model is. recompute "on" (or "auto" on the CPU from `OFFLOAD_TOKENS`
    tokens; on CUDA "auto" leaves that job to the offload): every block from the first attention's on runs under
    `torch.utils.checkpoint` (non-reentrant), so autograd keeps each block's inputs only and recomputes its
    inside when the backward pass reaches it: one more forward pass of those blocks, and one block's
    activations at a time instead of every layer's. Where one block module runs for several layers (ALBERT),
    each layer's hooks act on its own call (`on_its_call`), and no block is recomputed ("on" is refused): a
    recomputation's calls could not be told apart.
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
    offloads, recomputes = gradient_policy(on_cuda, tokens, offload, recompute)
    order = sorted(_layer_of(site) for site in sites)
    shared = any(site.calls > 1 for site in sites)  # one module runs for several layers (ALBERT)
    if shared and recompute == "on":
        raise AnalyzerError(
            f"{what}: this model runs one block module for several layers, whose calls a recomputation in the"
            " backward pass cannot tell apart; use recompute='off'."
        )
    blocks = _blocks(runner.capturable, order[0]) if recomputes and not shared else {}
    stream = _Stream(order, set(blocks), offloads, partial(_example_layers, trace), consume)
    saved = torch.autograd.graph.save_on_cpu(pin_memory=True) if offloads else contextlib.nullcontext()
    try:
        with _frozen(runner.model), saved, _recomputed(list(blocks.values())), hook_session() as session:
            for site in sites:
                keeper = on_its_call(site, stream.keeper(_layer_of(site), site.pre))
                session.add(site.module, keeper, pre=site.pre, with_kwargs=True)
            names = [f"blocks.*.{suffix}" for suffix in QKV]
            with runner.live_pass(trace.encoded, names, stream.sink_for) as score:
                if stream.root is None:
                    raise AnalyzerError(f"{what}: no attention output projection ran; the model's hook_z sites never fired.")
                stream.backward = True  # from here on, hooks fire only where a block is recomputed
                torch.autograd.grad(score.sum(), [stream.root])  # the consumer runs as the pass reaches each layer
                del score
        if offloads:
            torch.cuda.synchronize()  # the host copies are complete
        stream.finish()
    finally:
        stream.root = None  # its hook holds the stream: without this cycle what it kept goes with the caller's refs
    return order


def _example_layers(trace: Trace, layer: int, tensors: dict[str, Tensor]) -> list[StreamedLayer]:
    """Return layer `layer`'s StreamedLayer per example, over its real positions, from the pass's tensors (`KEPT`)."""
    q, k, v = (tensors[suffix] for suffix in QKV)
    n_heads = q.shape[2]
    z, grad = (_heads(tensors[name], n_heads) for name in ("z", "grad"))
    restated = masking(trace, layer)
    return [
        StreamedLayer(
            *(_per_example(t, b, positions) for t in (q, k, v)), z=_per_example(z, b, positions),
            grad_z=_per_example(grad, b, positions), **restated,  # grad_z in the model's dtype: blocks cast it
        )
        for b, positions in enumerate(real_positions(trace))
    ]


def _layer_of(site: Any) -> int:
    if site.layer is None:
        raise AnalyzerError("an attention's hook_z site has no block index; its adapter names it wrongly.")
    return int(site.layer)


def _blocks(capturable: Any, first: int) -> dict[int, torch.nn.Module]:
    """Return the block modules from block `first` on (the one holding the pass's leaf: its recomputation hands
    the projection the same leaf, so it saves what the first pass saved), by layer."""
    found = [(site.layer, site.module) for site in capturable.sites
             if site.name.startswith("blocks.") and site.name.endswith(".hook_resid_pre") and site.module is not None]
    return {layer: module for layer, module in found if layer is not None and layer >= first}


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


class _Stream:
    """What the gradient pass keeps of each layer until the consumer has it: q, k, v (from the capture hooks), z
    (from a hook on the output projection's input, [batch, pos, head · d_head]) and ∂score/∂z (from a tensor hook),
    host copies when offloading. A layer goes to the consumer, from the last layer down, once all five are
    there, and is dropped then. A block in `recomputed` keeps nothing in the forward pass: its hooks fire again
    when the backward pass recomputes it, and that is when its tensors are kept. The first layer's z is the leaf
    the pass differentiates to (`root`)."""

    def __init__(self, order: list[int], recomputed: set[int], offload: bool,
                 build: Callable[[int, dict[str, Tensor]], list[StreamedLayer]], consume: Consumer) -> None:
        self.order, self.recomputed, self.offload = order, recomputed, offload
        self.build, self.consume = build, consume
        self.held: dict[int, dict[str, Tensor]] = {}
        self.next = len(order) - 1  # the backward pass reaches the last layer first
        self.backward = False
        self.root: Tensor | None = None

    def _keeps(self, layer: int) -> bool:
        """Whether a hook firing now keeps its tensor: not in the forward pass of a block recomputed later."""
        return self.backward or layer not in self.recomputed

    def _keep(self, layer: int, name: str, tensor: Tensor) -> None:
        self.held.setdefault(layer, {})[name] = to_host(tensor.detach()) if self.offload else tensor.detach()
        while self.next >= 0 and len(self.held.get(self.order[self.next], ())) == len(KEPT):
            if self.offload:  # the layer's host copies are complete before the host reads them (padding, .cpu())
                torch.cuda.synchronize()
            self.consume(self.next, self.build(self.order[self.next], self.held.pop(self.order[self.next])))
            self.next -= 1

    def sink_for(self, site: Any) -> Any:
        """Return the sink of a q, k or v capture site (`ModelRunner.live_pass`)."""
        layer, name = int(site.layer), site.name.split(".", 2)[2]

        def sink(tensor: Tensor) -> None:
            if self._keeps(layer):
                self._keep(layer, name, tensor)
        return sink

    def tap(self, layer: int, tensor: Tensor) -> Tensor:
        """Return what the projection reads instead of `tensor` (the same numbers): a fresh leaf for the first
        layer, else a view whose gradient a hook keeps. In a recomputation: the same leaf for the first layer (so
        the recomputed block saves what the first pass saved), else `tensor` itself (the first pass's view
        already carries the hook)."""
        if self._keeps(layer):
            self._keep(layer, "z", tensor)
        if self.backward:
            return self.root if layer == self.order[0] and self.root is not None else tensor
        if layer == self.order[0]:
            self.root = tensor.detach().requires_grad_(True)
            self.root.register_hook(partial(self._keep, layer, "grad"))
            return self.root
        view = tensor.view_as(tensor)
        view.register_hook(partial(self._keep, layer, "grad"))
        return view

    def finish(self) -> None:
        """Hand the consumer the layers the backward pass never completed (∂score/∂z = 0 where z was kept, None
        where nothing was), from the last down."""
        while self.next >= 0:
            kept = self.held.pop(self.order[self.next], {})
            if all(name in kept for name in KEPT[:-1]):
                kept.setdefault("grad", torch.zeros_like(kept["z"]))
                self.consume(self.next, self.build(self.order[self.next], kept))
            else:
                self.consume(self.next, None)
            self.next -= 1

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
