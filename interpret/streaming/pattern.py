"""One layer's attention kept in O(n·d) and its pattern recomputed in blocks of query rows.

A `StreamedLayer` holds what a layer's attention needs, for one example over its n real positions: the
queries and keys as they entered the kernel (after rotary embeddings, key heads repeated per query head),
the values, and optionally the kernel's output z (the input of the output projection) and ∂score/∂z.
`pattern_rows` rebuilds rows of the pattern

    A[h, i, :] = softmax(q[h, i] · k[h, :]ᵀ · scale + mask[i, :])                      [head, rows, key]

from those tensors, a block of rows at a time, so no [head, n, n] tensor ever exists: the model's dtype is
cast to float32 per block (the products of half-precision numbers are exact in float32, so this is a float32
accumulation of the model's numbers), as the collector recomputes a fused kernel's pattern
(`interpret.capture.hf.recompute`). The mask is the causal one of a decoder (key j ≤ query i), narrowed by
the layer's sliding window where it has one (i − window < j ≤ i, as transformers' `sliding_window_overlay`),
or none; the scale is 1/√d_head (or the kernel's own, when it was kept); soft-capped scores (Gemma 2) are
c·tanh(s/c). An attention with sinks has one more
term in each row's denominator, exp(sink_h), which holds no value: A[h, i, j] = exp(s_ij − lse'_i), lse'_i =
log(Σ_j exp(s_ij) + exp(sink_h)), so the row sums to less than one. Whether that restates the model's
attention is checked, not assumed: `output_error` compares A·V with the kernel's own output z on the blocks it
is given, and `lse_error` the restated rows' log-sum-exps with the ones the kernel kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from interpret.capture.hf.recompute import with_sink
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
    causal: a decoder's mask. window: a decoder's sliding window (key j visible to query i when i − window <
        j ≤ i), 0 for none. softcap: c where the scores are soft-capped to c·tanh(s/c) (Gemma 2), 0.0 for none.
    lse: [head, n] float32, the kernel's own log Σ_j exp(score_ij) of each row (with the sink's term, where the
        attention has sinks) when it was kept (`interpret.capture.kernel`), else None. kernel_scale: the
        kernel's softmax scale, None for 1/√d_head. sink: [head] float32, the sinks' logits, or None.
    """

    q: Float[Tensor, "head n d_head"]
    k: Float[Tensor, "head n d_head"]
    v: Float[Tensor, "head n d_head"] | None
    causal: bool
    z: Float[Tensor, "head n d_head"] | None = None
    grad_z: Float[Tensor, "head n d_head"] | None = None
    lse: Float[Tensor, "head n"] | None = None
    kernel_scale: float | None = None
    window: int = 0
    softcap: float = 0.0
    sink: Float[Tensor, " head"] | None = None

    def to(self, device: torch.device | None) -> StreamedLayer:
        """Return this layer with its tensors on `device` (itself when they are there already, or for None)."""
        if device is None or self.q.device == device:
            return self
        moved = {name: getattr(self, name) for name in ("q", "k", "v", "z", "grad_z", "lse", "sink")}
        moved = {name: None if t is None else t.to(device, non_blocking=True) for name, t in moved.items()}
        return StreamedLayer(**moved, causal=self.causal, kernel_scale=self.kernel_scale, window=self.window,
                             softcap=self.softcap)

    @property
    def windowed(self) -> bool:
        """Whether the sliding window hides some key from some row (a window at least n hides none)."""
        return self.causal and 0 < self.window < self.n

    @property
    def fusable(self) -> bool:
        """Whether a fused kernel (causal mask or none, scale, no transform of the scores) restates this layer:
        not where a sliding window hides keys or the scores are soft-capped (rebuilt in blocks instead)."""
        return not self.windowed and not self.softcap

    def row_lse(self, scores: Float[Tensor, "head rows keys"]) -> Float[Tensor, "head rows"]:
        """Return each row's log-normaliser: log Σ_key exp(score), with the sink's term where there are sinks."""
        return with_sink(torch.logsumexp(scores, dim=-1), self.sink)

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

    def key_span(self, start: int, stop: int) -> tuple[int, int]:
        """Return (first, end) of the keys rows start..stop−1 can see, first..end−1: under a causal mask the keys
        before `stop`, from start − window + 1 on under a sliding window (so a block costs O(rows·(rows + window)),
        not O(rows·n)); else all n."""
        if not self.causal:
            return 0, self.n
        return (max(0, start - self.window + 1) if self.windowed else 0), stop


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
    """Return the masked scores of rows start..stop−1 [head, rows, keys] in float32 over the keys first..end−1 of
    `layer.key_span(start, stop)` (a key hidden by the causal mask or the window holds LOWEST)."""
    first, end = layer.key_span(start, stop)
    query = layer.q[:, start:stop].float()
    key = layer.k[:, first:end].float()
    scores = torch.matmul(query, key.transpose(1, 2)).mul_(layer.scale)  # [head, rows, keys]
    if layer.softcap:  # c·tanh(s/c), before the mask (as the kernels apply it)
        scores = scores.div_(layer.softcap).tanh_().mul_(layer.softcap)
    if layer.causal:  # keys before `start` are visible to every row: only the square start..stop needs masking
        square = torch.ones(stop - start, stop - start, dtype=torch.bool, device=scores.device).triu_(1)
        scores[:, :, start - first : stop - first].masked_fill_(square, LOWEST)
    if layer.windowed and stop - 1 - layer.window >= first:  # the last row's first key lies out of its window
        rows = torch.arange(start, stop, device=scores.device)[:, None]
        hidden = torch.arange(first, end, device=scores.device)[None, :] <= rows - layer.window  # j ≤ i − window
        scores.masked_fill_(hidden, LOWEST)
    return scores


def pattern_rows(layer: StreamedLayer, start: int, stop: int) -> Float[Tensor, "head rows keys"]:
    """Return the pattern rows start..stop−1 [head, rows, keys] in float32 over the keys of
    `layer.key_span(start, stop)`; with sinks, each row's share on its sink left out (the row sums to less than
    one)."""
    if layer.sink is None:
        scores = score_rows(layer, start, stop)
        return torch.softmax(scores, dim=-1, out=scores)
    return normalised_rows(layer, start, stop)[0]


def normalised_rows(layer: StreamedLayer, start: int, stop: int) -> tuple[Float[Tensor, "head rows keys"], Float[Tensor, "head rows"]]:
    """Return (the pattern rows start..stop−1 [head, rows, keys] over the keys of `layer.key_span(start, stop)`,
    each row's log-normaliser [head, rows], with the sink's term where there are sinks), float32."""
    scores = score_rows(layer, start, stop)
    lse = layer.row_lse(scores)
    return scores.sub_(lse[..., None]).exp_(), lse


def row_blocks(layer: StreamedLayer, block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[tuple[int, int]]:
    """Yield (start, stop) of consecutive blocks of query rows covering 0..n−1."""
    size = block_rows(layer.heads, layer.n, block_bytes)
    for start in range(0, layer.n, size):
        yield start, min(start + size, layer.n)


def pattern_grad_rows(layer: StreamedLayer, start: int, stop: int) -> Float[Tensor, "head rows keys"]:
    """Return ∂score/∂A for rows start..stop−1 [head, rows, keys] in float32 over the keys of `layer.key_span`:
    z_i = Σ_j A[i, j]·v_j, so ∂score/∂A[h, i, j] = ∂score/∂z[h, i] · v[h, j]."""
    if layer.grad_z is None or layer.v is None:
        raise ValueError("this layer was streamed without gradients; capture ∂score/∂z first")
    first, end = layer.key_span(start, stop)
    return torch.matmul(layer.grad_z[:, start:stop].float(), layer.v[:, first:end].float().transpose(1, 2))


def lse_error(layer: StreamedLayer, start: int, stop: int) -> float:
    """Return max |log Σ_key exp(score) − lse| / max(1, max |lse|) over rows start..stop−1, the restated scores'
    row normalisers against the ones the kernel kept (`layer.lse`; 0 when none was kept): 0 up to float32
    rounding when the scale, mask and sinks restate the model's; a position bias, another scale or a mask that
    is neither causal (with the layer's window) nor none moves it by far more."""
    if layer.lse is None:
        return 0.0
    restated = layer.row_lse(score_rows(layer, start, stop))  # [head, rows]
    kept = layer.lse[:, start:stop].float()
    return float((restated - kept).abs().max() / max(1.0, float(kept.abs().max())))


def output_error(layer: StreamedLayer, start: int, stop: int, pattern: Float[Tensor, "head rows keys"]) -> float:
    """Return max |A·V − z| / max(1, max |z|) over rows start..stop−1 (`pattern`: theirs, over the keys of
    `layer.key_span`): how far the recomputed pattern is from the one the kernel used (0 up to rounding when
    mask and scale restate the model's)."""
    if layer.z is None or layer.v is None:
        return 0.0
    first, end = layer.key_span(start, stop)
    mixed = torch.matmul(pattern, layer.v[:, first:end].float())  # [head, rows, d_head]
    kernel = layer.z[:, start:stop].float()
    return float((mixed - kernel).abs().max() / max(1.0, float(kernel.abs().max())))
