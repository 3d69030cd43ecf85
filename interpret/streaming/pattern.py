"""One layer's attention kept in O(n·d) and its pattern recomputed in blocks of query rows.

A `StreamedLayer` holds what a layer's attention needs, for one example over its n real positions: the
queries and keys as they entered the kernel (after rotary embeddings, key heads repeated per query head),
the values, and optionally the kernel's output z (the input of the output projection) and ∂score/∂z.
`pattern_rows` rebuilds rows of the pattern

    A[h, i, :] = softmax(q[h, i] · k[h, :]ᵀ · scale + mask[i, :])                      [head, rows, key]

from those tensors, a block of rows at a time, so no [head, n, n] tensor ever exists: the model's dtype is
cast to float32 per block (the products of half-precision numbers are exact in float32, so this is a float32
accumulation of the model's numbers), as the collector recomputes a fused kernel's pattern
(`interpret.capture.hf.recompute`). The mask is the causal one of a decoder (key j ≤ query i) or none; the
scale is 1/√d_head (or the kernel's own, when it was kept). Whether that restates the model's attention is
checked, not assumed: `output_error` compares A·V with the kernel's own output z on the blocks it is given,
and `lse_error` the restated rows' log-sum-exps with the ones the kernel kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from interpret.estimate.memory import BLOCK_BYTES

# A masked score: the float32 minimum (as transformers' eager masks and the collector's recompute use).
LOWEST = torch.finfo(torch.float32).min
DEFAULT_BLOCK_BYTES = BLOCK_BYTES  # working memory of one block of rows (`interpret.estimate.memory`, torch-free)


@dataclass(frozen=True)
class StreamedLayer:
    """One layer of one example, over its n real positions.

    q, k, v: [head, n, d_head] in the model's dtype (k and v repeated per query head under grouped-query
        attention; v None when only the kernel's lse was kept). z: [head, n, d_head] the kernel's output (the
        output projection's input), or None.
    grad_z: [head, n, d_head] ∂score/∂z in the model's dtype (cast to float32 per block), or None.
    causal: a decoder's mask.
    lse: [head, n] float32, the kernel's own log Σ_j exp(score_ij) of each row when it was kept
        (`interpret.capture.kernel`), else None. kernel_scale: the kernel's softmax scale, None for 1/√d_head.
    """

    q: Float[Tensor, "head n d_head"]
    k: Float[Tensor, "head n d_head"]
    v: Float[Tensor, "head n d_head"] | None
    causal: bool
    z: Float[Tensor, "head n d_head"] | None = None
    grad_z: Float[Tensor, "head n d_head"] | None = None
    lse: Float[Tensor, "head n"] | None = None
    kernel_scale: float | None = None

    def to(self, device: torch.device | None) -> StreamedLayer:
        """Return this layer with its tensors on `device` (itself when they are there already, or for None)."""
        if device is None or self.q.device == device:
            return self
        moved = {name: getattr(self, name) for name in ("q", "k", "v", "z", "grad_z", "lse")}
        moved = {name: None if t is None else t.to(device, non_blocking=True) for name, t in moved.items()}
        return StreamedLayer(**moved, causal=self.causal, kernel_scale=self.kernel_scale)

    @property
    def n(self) -> int:
        """Number of positions."""
        return int(self.q.shape[1])

    @property
    def heads(self) -> int:
        """Number of query heads."""
        return int(self.q.shape[0])

    @property
    def scale(self) -> float:
        """The softmax scale: the kernel's when it was kept, else 1/√d_head."""
        return self.kernel_scale if self.kernel_scale is not None else float(self.q.shape[-1]) ** -0.5

    def keys_for(self, stop: int) -> int:
        """Return how many keys rows before `stop` can see: `stop` under a causal mask, else all n."""
        return stop if self.causal else self.n


class LazyLayers(Sequence[StreamedLayer]):
    """A sequence of `StreamedLayer`s built one at a time when read (`layer(index)`), so only the layer in use is
    materialised (e.g. moved to the device); a slice is lazy too (`_LazySlice`): a list of built layers would
    hold every layer on the device at once."""

    def __len__(self) -> int:
        raise NotImplementedError

    def layer(self, index: int) -> StreamedLayer:
        """Return layer `index` (0..len − 1), built now."""
        raise NotImplementedError

    def __getitem__(self, index):  # noqa: ANN001, ANN204 (Sequence's int | slice overloads)
        if isinstance(index, slice):
            return _LazySlice(self, range(len(self))[index])
        return self.layer(range(len(self))[index])


class _LazySlice(LazyLayers):
    """The layers of `source` at `indices`, each built when read."""

    def __init__(self, source: LazyLayers, indices: range) -> None:
        self.source, self.indices = source, indices

    def __len__(self) -> int:
        return len(self.indices)

    def layer(self, index: int) -> StreamedLayer:
        """Return the source's layer at position `index` of this slice, built now."""
        return self.source.layer(self.indices[index])


def block_rows(heads: int, n: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> int:
    """Return how many query rows one block holds so that its float32 [head, rows, n] buffers (scores, the
    pattern and one product of the same size) stay within `block_bytes`; at least 1, at most n."""
    per_row = 3 * heads * max(n, 1) * 4
    return max(1, min(n, block_bytes // per_row))


def score_rows(layer: StreamedLayer, start: int, stop: int) -> Float[Tensor, "head rows keys"]:
    """Return the masked scores of rows start..stop−1 [head, rows, keys] in float32, keys = layer.keys_for(stop)
    (a key hidden by the causal mask holds LOWEST)."""
    keys = layer.keys_for(stop)
    query = layer.q[:, start:stop].float()
    key = layer.k[:, :keys].float()
    scores = torch.matmul(query, key.transpose(1, 2)).mul_(layer.scale)  # [head, rows, keys]
    if layer.causal:  # keys before `start` are visible to every row: only the square start..stop needs masking
        square = torch.ones(stop - start, stop - start, dtype=torch.bool, device=scores.device).triu_(1)
        scores[:, :, start:stop].masked_fill_(square, LOWEST)
    return scores


def pattern_rows(layer: StreamedLayer, start: int, stop: int) -> Float[Tensor, "head rows keys"]:
    """Return the pattern rows start..stop−1 [head, rows, keys] in float32, keys = layer.keys_for(stop)."""
    scores = score_rows(layer, start, stop)
    return torch.softmax(scores, dim=-1, out=scores)


def row_blocks(layer: StreamedLayer, block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[tuple[int, int]]:
    """Yield (start, stop) of consecutive blocks of query rows covering 0..n−1."""
    size = block_rows(layer.heads, layer.n, block_bytes)
    for start in range(0, layer.n, size):
        yield start, min(start + size, layer.n)


def pattern_grad_rows(layer: StreamedLayer, start: int, stop: int) -> Float[Tensor, "head rows keys"]:
    """Return ∂score/∂A for rows start..stop−1 [head, rows, keys] in float32: z_i = Σ_j A[i, j]·v_j, so
    ∂score/∂A[h, i, j] = ∂score/∂z[h, i] · v[h, j]."""
    if layer.grad_z is None or layer.v is None:
        raise ValueError("this layer was streamed without gradients; capture ∂score/∂z first")
    keys = layer.keys_for(stop)
    return torch.matmul(layer.grad_z[:, start:stop].float(), layer.v[:, :keys].float().transpose(1, 2))


def lse_error(layer: StreamedLayer, start: int, stop: int) -> float:
    """Return max |log Σ_key exp(score) − lse| / max(1, max |lse|) over rows start..stop−1, the restated scores'
    row normalisers against the ones the kernel kept (`layer.lse`; 0 when none was kept): 0 up to float32
    rounding when the scale and mask restate the model's; a position bias, another scale or a mask that is
    neither causal nor none (a sliding window) moves it by far more."""
    if layer.lse is None:
        return 0.0
    restated = torch.logsumexp(score_rows(layer, start, stop), dim=-1)  # [head, rows]
    kept = layer.lse[:, start:stop].float()
    return float((restated - kept).abs().max() / max(1.0, float(kept.abs().max())))


def output_error(layer: StreamedLayer, start: int, stop: int, pattern: Float[Tensor, "head rows keys"]) -> float:
    """Return max |A·V − z| / max(1, max |z|) over rows start..stop−1: how far the recomputed pattern is from
    the one the kernel used (0 up to rounding when mask and scale restate the model's)."""
    if layer.z is None or layer.v is None:
        return 0.0
    keys = pattern.shape[-1]
    mixed = torch.matmul(pattern, layer.v[:, :keys].float())  # [head, rows, d_head]
    kernel = layer.z[:, start:stop].float()
    return float((mixed - kernel).abs().max() / max(1.0, float(kernel.abs().max())))
