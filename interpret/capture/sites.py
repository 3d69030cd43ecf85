"""What can be captured from a model: `Site`s (one per canonical hook name) and the `Capturable` that
holds them with the facts the collector needs (layers, heads, how to run the model)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ContextManager, Literal

import torch
from torch import Tensor, nn

from interpret.hooks import HookSession
from interpret.inputs import Encoded
from interpret.trace import AttentionSource, ModelKind

Side = Literal["main", "decoder", "cross", "image"]
Sink = Callable[[Tensor], None]
Reader = Callable[[tuple[Any, ...], Mapping[str, Any], Any], Tensor]

_LAYER = re.compile(r"blocks\.(\d+)\.")


def _read_output(args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any) -> Tensor:
    return output


@dataclass(frozen=True)
class Site:
    """One capturable tensor.

    name: canonical hook name (`blocks.{i}.attn.hook_pattern`).
    axes: the tensor's axes in the shared vocabulary, batch first.
    sizes: sizes of the static axes (head, d_head, d_model, d_mlp); batch, pos, query and key come from
        the input, read from the side: `main` (encoder or only stack), `decoder`, `cross` (query =
        decoder position, key = main position), or `image` (the image tower of a text-image dual encoder).
    module / read / pre: by default a forward hook on `module` passes `read(args, kwargs, output)` to the
        collector (or a forward-pre hook with `pre=True`, called with output=None).
    attach: overrides the module hook for sites recorded another way (an attention-function wrapper); it
        registers what it needs on the session and calls the sink with the canonical tensor.
    itemsize: bytes per element when the captured tensor's dtype differs from the model's (a pattern
        recomputed in float32 from a half-precision model); None means the model's.
    fresh: the tensor handed to the sink is newly computed and held by nothing else (a recomputed pattern),
        so the collector keeps it as is instead of copying it away from the model's storage.
    call / calls: the site reads call `call` of the `calls` calls its module makes in one forward pass, where
        several layers run one module (ALBERT's shared layer: layer i is call i); calls == 1: every call.
        Whoever hooks `module` for this site wraps the hook in `on_its_call`.
    packed: the module's tensor packs every example's positions into its leading axes, example after example
        ([batch × pos, ...] or [1, batch × pos, ...]: a vision tower that packs a batch into one sequence); the
        site's read unpacks it, and per-example head gates are spread over each example's rows.
    """

    name: str
    axes: tuple[str, ...]
    sizes: Mapping[str, int]
    module: nn.Module | None = None
    read: Reader = _read_output
    pre: bool = False
    side: Side = "main"
    attach: Callable[[HookSession, Sink], None] | None = None
    itemsize: int | None = None
    fresh: bool = False
    call: int = 0
    calls: int = 1
    packed: bool = False

    @property
    def layer(self) -> int | None:
        """The block index in the name, or None for names outside the blocks."""
        match = _LAYER.search(self.name)
        return int(match.group(1)) if match else None

    @property
    def is_pattern(self) -> bool:
        """Whether this is an attention pattern (probabilities over `key`)."""
        return self.name.endswith("hook_pattern")


def on_its_call(site: Site, hook: Callable[..., Any]) -> Callable[..., Any]:
    """Return `hook` (a forward or forward-pre hook) made to act on the site's own call of its module only:
    `hook` itself when the module runs once per pass, else a hook that counts the module's calls (modulo
    `site.calls`, so a hook session may span whole forward passes) and passes the others by unchanged."""
    if site.calls == 1:
        return hook
    count = [0]

    def its_call(*args: Any) -> Any:
        index = count[0] % site.calls
        count[0] += 1
        return hook(*args) if index == site.call else None

    return its_call


def model_device(model: nn.Module) -> torch.device:
    """Return the device of the model's first parameter (CPU for a parameterless model)."""
    for param in model.parameters():
        return param.device
    return torch.device("cpu")


@dataclass
class Capturable:
    """A model made ready for capture by an adapter (or by the reference model itself).

    run: calls the model on an Encoded (already on the model's device) and returns its output.
    scope: given the selected sites and whether the capture keeps gradients, a context manager entered around
        the forward pass (e.g. the scoped interception of the attention kernel); restored on exit.
    prepare: turns what a user passes to `collect` into an Encoded, for models whose inputs are not text
        (a vision model's images); None: the text path (`interpret.inputs.as_encoded`).
    embedding: the token-embedding module of a side ("main" or "decoder"), what Captum's layer methods
        attribute to; None when the model has none.
    adapter / implementation / model_class: which adapter built this, the attention implementation the
        model was loaded with (eager, sdpa, ...) and the model's class name (recorded in the trace's meta).
    unsupported: {hook name: why} for the canonical hook points this model does not offer (no norm before
        the attention, no single MLP hidden layer in a Mixture-of-Experts block, ...); asking for one of
        them is an error that names it and gives the reason.
    sinks: the attention has sinks (a per-head logit in each row's softmax denominator that holds no value:
        gpt-oss, Granite SWA, ...), so a pattern's rows sum to less than one.
    windows: per layer of the main stack of a decoder, the sliding window its attention module applies (a key j
        is visible to query i when i − window < j ≤ i), 0 for none; empty when no layer has one. What the
        streamed computations restate (`interpret.streaming`), whose checks against the kernel's own
        log-sum-exps confirm it.
    sink_logits: returns, per layer of the main stack, its sinks' logits now [head] (empty when it has none).
    skipped: the paths under the model of the blocks of a block list that did not run on the probe's input (Mllama's
        cross-attention blocks on text alone): none of the layers, which are the blocks that ran; a capture that
        runs one is refused.
    scales: per layer of the main stack, the softmax scale its attention module gives its kernel (`scaling`:
        Granite's attention multiplier, Gemma's query_pre_attn_scalar^−½), 0.0 where it keeps none (1/√d_head);
        empty when every layer's is 1/√d_head or unknown. softcaps: per layer of the main stack, the
        soft-capping of its scores (c·tanh(s/c): Gemma 2's `attn_logit_softcapping`), 0.0 for none; empty when
        no layer has one.
    """

    model: nn.Module
    model_id: str
    kind: ModelKind
    n_layers: int
    n_heads: int
    sites: Sequence[Site]
    run: Callable[[Encoded], Any]
    max_positions: int | None = None
    attention: AttentionSource = "eager"
    scope: Callable[[Sequence[Site], bool], ContextManager[Any]] = field(
        default=lambda sites, grad: contextlib.nullcontext()
    )
    prepare: Callable[..., Encoded] | None = None
    embedding: Callable[[str], nn.Module | None] = field(default=lambda side: None)
    adapter: str = ""
    implementation: str = "eager"
    model_class: str = ""
    unsupported: Mapping[str, str] = field(default_factory=dict)
    sinks: bool = False
    windows: tuple[int, ...] = ()
    scales: tuple[float, ...] = ()
    softcaps: tuple[float, ...] = ()
    sink_logits: Callable[[], tuple[tuple[float, ...], ...]] = field(default=lambda: ())
    skipped: tuple[str, ...] = ()

    @property
    def device(self) -> torch.device:
        """Return the device the model runs on (its first parameter's; CPU for a parameterless model)."""
        return model_device(self.model)
