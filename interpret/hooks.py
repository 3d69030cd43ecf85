"""Named hook points and a hook session that always removes what it added.

A `HookPoint` is an identity module placed at every intermediate of the reference model; its name is its
module path (`blocks.3.attn.hook_pattern`), stamped once by `stamp_names`. A `HookSession` is the only way
the toolkit adds hooks to a model: every handle it creates is removed when the `with` block ends, also
when the forward pass raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle


class HookPoint(nn.Module):
    """Identity module that marks a named intermediate; `axes` documents the tensor it passes on."""

    def __init__(self, axes: str) -> None:
        super().__init__()
        self.axes = axes
        self.name = ""

    def forward(self, x: Tensor) -> Tensor:
        """Return `x` unchanged, shaped as `self.axes` says."""
        return x

    def extra_repr(self) -> str:
        return f"{self.name or '?'}: [{self.axes}]"


def stamp_names(root: nn.Module, prefix: str = "") -> dict[str, HookPoint]:
    """Name every HookPoint under `root` by its module path; return them by name in forward order."""
    points: dict[str, HookPoint] = {}
    for path, module in root.named_modules():
        if isinstance(module, HookPoint):
            module.name = prefix + path
            points[module.name] = module
    return points


ForwardHook = Callable[..., Any]


class HookSession:
    """Collects hook handles and removes all of them on exit, whatever happened inside."""

    def __init__(self) -> None:
        self._handles: list[RemovableHandle] = []

    def add(
        self, module: nn.Module, fn: ForwardHook, *, pre: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Register a forward (or forward-pre) hook on `module` and return its handle."""
        if pre:
            handle = module.register_forward_pre_hook(fn, with_kwargs=with_kwargs)
        else:
            handle = module.register_forward_hook(fn, with_kwargs=with_kwargs)
        self._handles.append(handle)
        return handle

    def remove(self) -> None:
        """Remove every hook this session added (idempotent)."""
        while self._handles:
            self._handles.pop().remove()

    def __enter__(self) -> HookSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


@contextmanager
def hook_session() -> Iterator[HookSession]:
    """Yield a HookSession whose hooks are removed in `finally`, also when the block raises."""
    session = HookSession()
    try:
        yield session
    finally:
        session.remove()


def count_hooks(model: nn.Module) -> int:
    """Return how many forward, forward-pre and backward hooks are registered anywhere under `model`."""
    total = 0
    for module in model.modules():
        total += len(module._forward_hooks) + len(module._forward_pre_hooks)
        total += len(module._backward_hooks) + len(getattr(module, "_backward_pre_hooks", {}))
    return total
