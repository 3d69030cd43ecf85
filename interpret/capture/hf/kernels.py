"""Scoped wrapping of transformers' attention-kernel lookup, the one place that patches it.

transformers 5 attention modules fetch their kernel with
`ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)` and call it as
`kernel(module, query, key, value, attention_mask, **kwargs)`. `wrapped_kernels(wrap)` makes that lookup return
`wrap(kernel)` while the context lasts (one wrapper per distinct kernel, built on first use) and restores the
original lookup on exit, also when the block raises. The collector's recorder, the probe that discovers a
model's structure and value zeroing all intercept kernels through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from transformers.modeling_utils import AttentionInterface

Kernel = Callable[..., Any]


@contextmanager
def wrapped_kernels(wrap: Callable[[Kernel], Kernel]) -> Iterator[None]:
    """Yield while every kernel fetched through `AttentionInterface.get_interface` is returned as `wrap(kernel)`.

    wrap: builds the replacement of one kernel; it must call the kernel it is given with the arguments it
        received (possibly changed) and return its result. Called once per distinct kernel per context.
    """
    original = AttentionInterface.__dict__["get_interface"]
    wrappers: dict[Kernel, Kernel] = {}

    def get_interface(interface: AttentionInterface, attn_implementation: Any, default: Kernel) -> Kernel:
        kernel = original(interface, attn_implementation, default)
        wrapper = wrappers.get(kernel)
        if wrapper is None:
            wrapper = wrappers[kernel] = wrap(kernel)
        return wrapper

    AttentionInterface.get_interface = get_interface  # type: ignore[method-assign]
    try:
        yield
    finally:
        AttentionInterface.get_interface = original  # type: ignore[method-assign]
