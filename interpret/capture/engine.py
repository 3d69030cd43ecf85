"""The capture engine: select sites, estimate memory, hook, run once, and return the captured tensors.

Reduction over heads and head selection happen inside the hook, so a full tensor never leaves its layer.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from interpret.capture.kernel import to_host
from interpret.capture.sites import Capturable, Site, Sink, on_its_call
from interpret.errors import CaptureError, HookNameError, MemoryBudgetError, suggest
from interpret.estimate.memory import CAPTURE_BUDGET, human_bytes
from interpret.hooks import hook_session
from interpret.inputs import Encoded
from interpret.trace import summarize_names

log = logging.getLogger("interpret")

Reduce = Literal["mean", "max"] | None
DEFAULT_NAMES = ("*hook_pattern",)


def select_sites(
    capturable: Capturable, names: Sequence[str] | str | None, layers: Sequence[int] | None
) -> list[Site]:
    """Return the sites whose names match the globs and lie in `layers` (names without a layer are kept).

    Raises HookNameError for a glob that matches nothing or a layer that does not exist.
    """
    globs = list(DEFAULT_NAMES) if names is None else [names] if isinstance(names, str) else list(names)
    available = [site.name for site in capturable.sites]
    for glob in globs:
        if not any(fnmatch.fnmatchcase(name, glob) for name in available):
            refused = [name for name in capturable.unsupported if fnmatch.fnmatchcase(name, glob)]
            if refused:
                raise HookNameError(
                    f"{refused[0]} cannot be captured from this model: {capturable.unsupported[refused[0]]};"
                    f" pick hook points it has: {summarize_names(available)}."
                )
            raise HookNameError(
                f"no hook matches {glob!r};{suggest(glob, available)} this model has:"
                f" {summarize_names(available)} (layers 0..{capturable.n_layers - 1})."
            )
    wanted = normalize_indices(layers, capturable.n_layers, "layer")
    return [
        site
        for site in capturable.sites
        if any(fnmatch.fnmatchcase(site.name, glob) for glob in globs)
        and (wanted is None or site.layer is None or site.layer in wanted)
    ]


def normalize_indices(indices: Sequence[int] | None, count: int, what: str) -> list[int] | None:
    """Return indices made non-negative (Python-style negatives allowed), or raise for one out of range."""
    if indices is None:
        return None
    out: list[int] = []
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
            raise HookNameError(f"{what} {index!r} does not exist; this model has {what}s 0..{count - 1}.")
        out.append(index % count)
    if not out:
        raise HookNameError(f"an empty list of {what}s selects nothing; pass None for all {count}.")
    return out


def _side_lengths(encoded: Encoded, side: str) -> tuple[int, int]:
    decoder = encoded.decoder
    if side == "main":
        return encoded.pos, encoded.pos
    if side == "image":
        if encoded.image is None:
            raise CaptureError("an image site needs image inputs; pass images with the text.")
        return encoded.image.pos, encoded.image.pos
    if decoder is None:
        raise CaptureError(f"a {side} site needs decoder inputs; pass decoder text or ids.")
    return (decoder.pos, decoder.pos) if side == "decoder" else (decoder.pos, encoded.pos)


def site_shape(site: Site, encoded: Encoded, n_heads_kept: int | None) -> tuple[int, ...]:
    """Return the shape a site will be captured with, after head selection or reduction."""
    query, key = _side_lengths(encoded, site.side)
    dims = {"batch": encoded.batch, "pos": query, "query": query, "key": key, **site.sizes}
    if n_heads_kept is not None:
        dims["head"] = n_heads_kept
    return tuple(dims[axis] for axis in site.axes)


def estimate_bytes(
    sites: Sequence[Site], encoded: Encoded, heads_kept: int | None, itemsize: int
) -> int:
    """Return the bytes the captured tensors will hold for the whole batch (`itemsize` unless a site says)."""
    return sum(math.prod(site_shape(site, encoded, heads_kept)) * (site.itemsize or itemsize) for site in sites)


def _side_masks(encoded: Encoded, side: str) -> tuple[Tensor, Tensor]:
    main = encoded.attention_mask.bool()
    if side == "main":
        return main, main
    if side == "image":
        assert encoded.image is not None
        image = encoded.image.attention_mask.bool()
        return image, image
    assert encoded.decoder is not None
    dec = encoded.decoder.attention_mask.bool()
    return (dec, dec) if side == "decoder" else (dec, main)


def _has_padding(encoded: Encoded, side: str) -> bool:
    """Return whether any query or key position of `side` is padding."""
    return any(not bool(mask.all()) for mask in _side_masks(encoded, side))


def _pattern_keep(site: Site, encoded: Encoded) -> Tensor:
    """Return a bool mask broadcastable to the site's tensor: True where query and key are both real."""
    query_mask, key_mask = _side_masks(encoded, site.side)
    batch_axis = site.axes.index("batch")

    def place(mask: Tensor, axis: int) -> Tensor:
        shape = [1] * len(site.axes)
        shape[batch_axis], shape[axis] = mask.shape
        return mask.view(shape)

    return place(query_mask, site.axes.index("query")) & place(key_mask, site.axes.index("key"))


# The axes whose sizes the inputs fix: a captured tensor must have them as the Encoded says, or its positions
# would be named wrongly.
_POSITION_AXES = frozenset({"batch", "pos", "query", "key"})


class _Sink:
    """Receives one site's tensor inside its hook: selects or reduces heads, masks padding, stores it.

    With `grad` the tensor is stored as the model holds it, in the autograd graph: no head selection, no
    reduction, no masking of padding, no copy. With `offload` a CUDA tensor is stored as a pinned host copy
    (asynchronous; `capture` synchronises before returning), so the device never holds more than the layer in use.
    """

    def __init__(
        self,
        site: Site,
        store: dict[str, Tensor],
        encoded: Encoded,
        heads: list[int] | None,
        reduce: Reduce,
        grad: bool = False,
        offload: bool = False,
    ) -> None:
        self.site = site
        self.offload = offload
        self.store = store
        self.heads = heads
        self.reduce = reduce
        self.grad = grad
        self.head_axis = site.axes.index("head") if "head" in site.axes else None
        # Without padding every position is real: skip a pass over each pattern.
        masked = site.is_pattern and not grad and _has_padding(encoded, site.side)
        self.keep = _pattern_keep(site, encoded) if masked else None
        expected = site_shape(site, encoded, None)
        self.positions = {axis: expected[axis] for axis, name in enumerate(site.axes) if name in _POSITION_AXES}

    def __call__(self, tensor: Tensor) -> None:
        site, axis = self.site, self.head_axis
        if site.name in self.store:
            raise CaptureError(
                f"{site.name} fired twice in one forward pass; collect runs a single forward, so call the"
                " model once per collect."
            )
        if tensor.dim() != len(site.axes) or any(tensor.shape[at] != size for at, size in self.positions.items()):
            named = ", ".join(f"{site.axes[at]} {size}" for at, size in self.positions.items())
            raise CaptureError(
                f"{site.name} came out of the model as {list(tensor.shape)}, not [{', '.join(site.axes)}] with"
                f" {named}: the model packs or reorders its positions (a vision tower that packs a batch of"
                " images into one sequence), so they cannot be named; capture one example at a time, or register"
                " an adapter for it under the entry-point group 'interpret.adapters'."
            )
        if self.grad:
            self.store[site.name] = tensor
            return
        source = tensor
        tensor = tensor.detach()
        if axis is not None and self.heads is not None:
            tensor = tensor.index_select(axis, torch.tensor(self.heads, device=tensor.device))
        if axis is not None and self.reduce == "mean":
            tensor = tensor.mean(dim=axis, keepdim=True)
        elif axis is not None and self.reduce == "max":
            tensor = tensor.amax(dim=axis, keepdim=True)
        if self.keep is not None:
            tensor = tensor.masked_fill(~self.keep.to(tensor.device), 0)
        if self.offload and tensor.device.type == "cuda":
            tensor = to_host(tensor)  # a copy: the model's later in-place writes come after it on the stream
        elif not site.fresh and tensor.data_ptr() == source.data_ptr():
            tensor = tensor.clone()  # the model may reuse this storage in place later in the forward
        self.store[site.name] = tensor


def capture(
    capturable: Capturable,
    encoded: Encoded,
    sites: Sequence[Site],
    *,
    heads: Sequence[int] | None = None,
    reduce: Reduce = None,
    budget_bytes: int | None = CAPTURE_BUDGET,
    grad: bool = False,
    offload: bool = False,
) -> tuple[dict[str, Tensor], Any, int]:
    """Run the model once with hooks on `sites`; return (tensors by name in site order, output, bytes).

    `budget_bytes` bounds the estimated capture per example; above it MemoryBudgetError says what to cut.
    grad: run with autograd on and keep every captured tensor in the graph (whole: no head selection or
        reduction, padding not zeroed), so an analyzer can differentiate the output with respect to them.
    offload: keep each captured tensor of a CUDA model in pinned host memory as soon as its hook fires (the
        budget then bounds host memory); not with `grad`, whose tensors stay in the graph.
    """
    if reduce not in (None, "mean", "max"):
        raise CaptureError(f"reduce={reduce!r} is not known; use None, 'mean' or 'max'.")
    if grad and (reduce is not None or heads is not None):
        raise CaptureError("a capture with gradients keeps every head; drop heads= and reduce=.")
    if grad and offload:
        raise CaptureError("a capture with gradients keeps its tensors in the autograd graph; drop offload=.")
    head_list = normalize_indices(heads, capturable.n_heads, "head")
    heads_kept = 1 if reduce else (len(head_list) if head_list is not None else None)
    itemsize = _itemsize(capturable.model)
    total = estimate_bytes(sites, encoded, heads_kept, itemsize)
    per_example = total / max(encoded.batch, 1)
    total_text, example_text = human_bytes(total, binary=True), human_bytes(per_example, binary=True)
    log.info("capture will hold %s (%s per example) in %d tensors", total_text, example_text, len(sites),
             extra={"capture_bytes": total})  # the CLI shows a run's line once per new peak (cli/common.py)
    if budget_bytes is not None and per_example > budget_bytes:
        hints = ["fewer layers (layers=[...])", "fewer names"]
        if reduce is None:
            hints.insert(0, "reduce='mean' or 'max' over heads")
        raise MemoryBudgetError(
            f"capture needs {example_text} per example, over the budget of {human_bytes(budget_bytes, binary=True)};"
            f" try {', '.join(hints)}, or shorter inputs, or raise budget_bytes."
        )
    store: dict[str, Tensor] = {}
    with hooked(capturable, sites, lambda site: _Sink(site, store, encoded, head_list, reduce, grad, offload), grad=grad):
        with torch.set_grad_enabled(grad):
            output = capturable.run(encoded)
    if offload and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # the host copies are complete before anyone reads them
    missing = [site.name for site in sites if site.name not in store]
    if missing:
        raise CaptureError(
            f"{len(missing)} hook(s) never fired, e.g. {missing[0]}; the model's forward did not pass"
            " through them (report this model to the adapter's author)."
        )
    return {site.name: store[site.name] for site in sites}, output, total


@contextlib.contextmanager
def hooked(capturable: Capturable, sites: Sequence[Site], sink_for: Callable[[Site], Sink], *, grad: bool) -> Iterator[None]:
    """Yield with every site hooked to its sink (`sink_for(site)`, called once per site) and the model's scope
    for those sites entered (`capturable.scope`); everything is removed on exit, also on errors. A sink is
    called each time its site fires: in a forward pass run inside, and in any recomputation of a block that a
    backward pass run inside triggers (`torch.utils.checkpoint`)."""
    with hook_session() as session, capturable.scope(sites, grad):
        for site in sites:
            sink = sink_for(site)
            if site.attach is not None:
                site.attach(session, sink)
            elif site.module is not None:
                session.add(site.module, on_its_call(site, _module_hook(site, sink)), pre=site.pre, with_kwargs=True)
            else:
                raise CaptureError(f"site {site.name} has neither a module nor an attach function.")
        yield


def _module_hook(site: Site, sink: Sink) -> Any:
    if site.pre:
        return lambda module, args, kwargs: sink(site.read(args, kwargs, None))
    return lambda module, args, kwargs, output: sink(site.read(args, kwargs, output))


def _itemsize(model: torch.nn.Module) -> int:
    for param in model.parameters():
        if param.is_floating_point():
            return param.element_size()
    return 4
