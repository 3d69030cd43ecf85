"""The SDPA kernel records of one forward pass (`interpret.capture.kernel.kernel_records`) read as streamed
layers: q, k and the kernel's log-sum-exp of each call, moved to the device one layer at a time."""

from __future__ import annotations

import torch

from interpret.capture.kernel import KernelRecords
from interpret.streaming.pattern import LazyLayers, StreamedLayer


class KernelLayers(LazyLayers):
    """The kernel calls of one example as `StreamedLayer`s (q, k, lse, scale; no v or z), built one at a time
    when read: k's heads repeated per query head and everything moved to `device` only for the layer in use.
    """

    def __init__(self, records: KernelRecords, example: int, device: torch.device) -> None:
        if records.fallback is not None:
            raise ValueError(f"these kernel records are unusable ({records.fallback}); collect q, k, v and z instead")
        self.calls = records.calls
        self.example = example
        self.device = device

    def __len__(self) -> int:
        return len(self.calls)

    def layer(self, index: int) -> StreamedLayer:
        """Return call `index` as a StreamedLayer on the device."""
        call = self.calls[index]
        q = call.q[self.example].to(self.device, non_blocking=True)  # [head, n, d_head]
        k = call.k[self.example].to(self.device, non_blocking=True)  # [kv_head, n, d_head]
        k = k.repeat_interleave(q.shape[0] // k.shape[0], 0) if k.shape[0] != q.shape[0] else k
        lse = call.lse[self.example].to(self.device, non_blocking=True)
        return StreamedLayer(q, k, None, causal=call.causal, lse=lse, kernel_scale=call.scale)
