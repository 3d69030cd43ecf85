"""`Trace`: the captured tensors of one forward pass, keyed by canonical hook name. Views only."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from interpret.errors import HookNameError, listing
from interpret.inputs import Encoded

ModelKind = Literal["encoder", "decoder", "encoder-decoder", "vision"]
AttentionSource = Literal["eager", "recomputed", "none"]

_LAYER = re.compile(r"blocks\.(\d+)\.")


@dataclass(frozen=True)
class TraceMeta:
    """What produced a trace.

    `attention` says how the patterns were obtained: `eager` (the model's own softmax output, read by a
    hook) or `recomputed` (softmax(q·kᵀ·scale + mask) from the exact query and key that entered the
    attention kernel, while the kernel itself still produced the model's outputs).
    adapter / implementation / model_class: the adapter that captured it (empty for reference models), the
    attention implementation the model was loaded with, and the model's class name.
    sinks: the model's attention has sinks, so each pattern row sums to less than one (the sink takes the rest).
    windows: per layer of a decoder's stack, the sliding window of its attention (key j visible to query i when
    i − window < j ≤ i), 0 for none; empty when no layer has one. sink_logits: per layer, its sinks' logits
    [head] (empty for a layer without; empty when no layer has sinks). scales: per layer, the softmax scale of
    its attention, 0.0 for 1/√d_head (empty: 1/√d_head everywhere). softcaps: per layer, the soft-capping of its
    scores (c·tanh(s/c)), 0.0 for none (empty: none anywhere). What the streamed computations restate.
    """

    model_id: str
    kind: ModelKind
    n_layers: int
    n_heads: int
    attention: AttentionSource = "eager"
    layers: tuple[int, ...] = ()
    heads: tuple[int, ...] | None = None
    reduce: str | None = None
    capture_bytes: int = 0
    versions: Mapping[str, str] = field(default_factory=dict)
    adapter: str = ""
    implementation: str = ""
    model_class: str = ""
    sinks: bool = False
    windows: tuple[int, ...] = ()
    scales: tuple[float, ...] = ()
    softcaps: tuple[float, ...] = ()
    sink_logits: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class Trace:
    """Captured tensors by hook name (shapes as each hook point documents), the Encoded input and meta.

    With `heads=` the head axis holds only the selected heads (in the order asked); with `reduce=` it has
    size 1. `output` is the model's own output of the captured forward pass.
    """

    tensors: Mapping[str, Tensor]
    encoded: Encoded
    meta: TraceMeta
    output: Any = None

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise HookNameError(
                f"{name!r} was not captured; captured: {summarize_names(self.tensors)}."
                " Pass it in names= when collecting."
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def names(self, glob: str = "*") -> list[str]:
        """Return the captured names that match the glob, in capture order."""
        return [name for name in self.tensors if fnmatch.fnmatchcase(name, glob)]

    def layers(self, suffix: str, prefix: str = "") -> list[int]:
        """Return the layer indices captured for `{prefix}blocks.{i}.{suffix}`, ascending."""
        pattern = re.compile(rf"^{re.escape(prefix)}blocks\.(\d+)\.{re.escape(suffix)}$")
        found = (pattern.match(name) for name in self.tensors)
        return sorted(int(m.group(1)) for m in found if m)

    def stack(self, suffix: str, prefix: str = "") -> Tensor:
        """Return `{prefix}blocks.{i}.{suffix}` over the captured layers stacked on axis 1.

        `trace.stack("attn.hook_pattern")` is [batch, layer, head, query, key]; for encoder-decoder
        models pass `prefix="encoder."` or `prefix="decoder."`.
        """
        layers = self.layers(suffix, prefix)
        if not layers:
            raise HookNameError(
                f"no {prefix}blocks.{{i}}.{suffix} in this trace; captured: {summarize_names(self.tensors)}."
                " Pass it in names= when collecting."
            )
        return torch.stack([self.tensors[f"{prefix}blocks.{i}.{suffix}"] for i in layers], dim=1)


def summarize_names(names: Mapping[str, Any] | list[str]) -> str:
    """Return names with layer indices folded (`blocks.{i}.attn.hook_pattern`), as a short list."""
    folded = {_LAYER.sub("blocks.{i}.", name) for name in names}
    return listing(folded) if folded else "nothing"
