"""Record what enters the attention kernel of chosen modules, whatever the kernel (eager, SDPA, flash).

transformers 5 attention modules fetch their kernel with
`ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)` and call it as
`kernel(module, query, key, value, attention_mask, scaling=..., dropout=..., **kwargs)`, with query and key
after rotary embeddings and before the key/value heads are repeated. Inside `AttentionRecorder.recording()`
that lookup returns the original kernel wrapped: the wrapper calls the kernel unchanged (so the model's
outputs are bit-identical) and then, only for modules with listeners, hands the exact query, key and value
to them, and the pattern: the kernel's own weights when it is the eager kernel, otherwise recomputed in
float32 from the same tensors. The model's config is never touched; the lookup is restored on exit, also
when the forward pass raises. The interception is process-wide while it lasts, but calls from modules that
nobody listens to pass straight through. (The few transformers models that index ALL_ATTENTION_FUNCTIONS
directly instead of calling get_interface are not seen; their attention sites report that they never fired.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

import torch
from torch import Tensor, nn
from transformers.modeling_utils import AttentionInterface

from interpret.collect.hf.recompute import attention_scores, repeat_heads
from interpret.collect.sites import Sink
from interpret.errors import CaptureError

Field = Literal["q", "k", "v", "scores", "pattern"]
Kernel = Callable[..., Any]


class _Listener:
    """The sinks of one attention module, fed from one kernel call."""

    def __init__(self, use_kernel_weights: bool) -> None:
        self.sinks: dict[str, Sink] = {}
        self.use_kernel_weights = use_kernel_weights

    def record(
        self,
        module: nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        result: Any,
        kwargs: Mapping[str, Any],
    ) -> None:
        """Pass q, k, v as [batch, pos, head, d_head] (views of the kernel's inputs) and scores, pattern as
        [batch, head, query, key] (float32 tensors of their own, which the collector keeps without copying)."""
        n_heads = query.shape[1]
        sinks = self.sinks
        if "q" in sinks:
            sinks["q"](query.transpose(1, 2))
        if "k" in sinks:
            sinks["k"](repeat_heads(key, n_heads).transpose(1, 2))
        if "v" in sinks:
            sinks["v"](repeat_heads(value, n_heads).transpose(1, 2))
        if "scores" not in sinks and "pattern" not in sinks:
            return
        weights = self._kernel_weights(query, key, result)
        scores = None
        if "scores" in sinks or weights is None:
            scores = attention_scores(module, query, key, attention_mask, kwargs)
        if "scores" in sinks and scores is not None:
            sinks["scores"](scores)
        if "pattern" in sinks:
            if weights is None and "scores" not in sinks:
                # Nobody else holds the scores: normalise them in place, sparing a [query, key] allocation
                # (softmax reads each element of a row before writing it, so aliasing is safe).
                weights = torch.softmax(scores, dim=-1, out=scores)
            elif weights is None:
                weights = torch.softmax(scores, dim=-1)
            sinks["pattern"](weights)

    def _kernel_weights(self, query: Tensor, key: Tensor, result: Any) -> Tensor | None:
        """Return the eager kernel's own weights as float32 [batch, head, query, key], or None."""
        if not self.use_kernel_weights or not isinstance(result, tuple) or len(result) < 2:
            return None
        weights = result[1]
        expected = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        if not isinstance(weights, Tensor) or tuple(weights.shape) != expected:
            return None
        return weights.float()  # the model drops these weights after the call, so they need no copy


class AttentionRecorder:
    """Listeners keyed by attention module, and the scoped interception of the kernel lookup.

    use_kernel_weights: take the pattern from the kernel's returned weights (true for the eager kernel);
    otherwise it is recomputed from the kernel's inputs.
    """

    def __init__(self, use_kernel_weights: bool) -> None:
        self.use_kernel_weights = use_kernel_weights
        self._listeners: dict[int, _Listener] = {}

    def listen(self, module: nn.Module, field: Field, sink: Sink) -> None:
        """Send `field` of every kernel call made by `module` to `sink` until `recording()` ends."""
        listener = self._listeners.setdefault(id(module), _Listener(self.use_kernel_weights))
        listener.sinks[field] = sink

    def listener(self, module: nn.Module) -> _Listener | None:
        """Return the listener of `module`, or None when nothing listens to it."""
        return self._listeners.get(id(module))

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Yield while kernel lookups return recording wrappers; restore the lookup and drop listeners after."""
        original = AttentionInterface.__dict__["get_interface"]
        wrappers: dict[Kernel, Kernel] = {}

        def get_interface(interface: AttentionInterface, attn_implementation: Any, default: Kernel) -> Kernel:
            kernel = original(interface, attn_implementation, default)
            wrapper = wrappers.get(kernel)
            if wrapper is None:
                wrapper = wrappers[kernel] = _recording_kernel(kernel, self)
            return wrapper

        AttentionInterface.get_interface = get_interface  # type: ignore[method-assign]
        try:
            yield
        finally:
            AttentionInterface.get_interface = original  # type: ignore[method-assign]
            self._listeners.clear()


def _recording_kernel(kernel: Kernel, recorder: AttentionRecorder) -> Kernel:
    """Return a kernel that calls `kernel` unchanged, then feeds the recorder's listener of the module."""

    def recording_kernel(module, query, key, value, attention_mask, *args, **kwargs):  # noqa: ANN001, ANN202
        result = kernel(module, query, key, value, attention_mask, *args, **kwargs)
        listener = recorder.listener(module)
        if listener is not None:
            if args:
                _raise_positional(module, len(args))
            with torch.no_grad():
                listener.record(module, query, key, value, attention_mask, result, kwargs)
        return result

    recording_kernel.__wrapped__ = kernel  # type: ignore[attr-defined]
    return recording_kernel


def _raise_positional(module: nn.Module, count: int) -> None:
    """Raise: extra positional kernel arguments cannot be read safely (kernels order them differently)."""
    raise CaptureError(
        f"{type(module).__name__} passed {count} extra positional argument(s) to its attention kernel, so"
        " scaling and dropout cannot be read; its adapter needs updating for this transformers version."
    )
