"""Shared by the attention analyzers: per-example patterns over real positions, readouts, scattering back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from jaxtyping import Float

from interpret.errors import AnalyzerError, ConfigError
from interpret.plugins import rollout_math
from interpret.trace import Trace

Readout = Literal["auto"] | tuple[int, ...]


@dataclass(frozen=True)
class Example:
    """One example's attention over its real positions only.

    pattern: [layer, head, n, n] in the trace's dtype, or [layer, 1, n, n] float64 when the heads were
        fused on reading; n = number of real positions.
    positions: [n] indices of the real positions in the padded sequence.
    """

    index: int
    pattern: Float[np.ndarray, "layer head query key"]
    positions: np.ndarray


def examples(
    trace: Trace, prefix: str = "", suffix: str = "attn.hook_pattern", head_fusion: str | None = None
) -> Iterator[Example]:
    """Yield each example's [layer, head, n, n] pattern restricted to its real (unpadded) positions.

    With `head_fusion` ("mean", "max" or "min") the heads are fused layer by layer as they are read (mean
    accumulated in float64), so the pattern is [layer, 1, n, n] float64 and no stacked copy of every head is
    ever made: at 512 tokens that copy costs more than the whole rollout.
    """
    layers = trace.layers(suffix, prefix)
    if not layers:
        trace.stack(suffix, prefix)  # raises the one-line error that names what was captured
    tensors = [trace[f"{prefix}blocks.{i}.{suffix}"].detach() for i in layers]  # each [batch, head, q, k]
    if head_fusion is not None:
        stacked = np.stack([_fuse(tensor, head_fusion) for tensor in tensors], axis=1)  # [batch, layer, 1, q, k]
    else:
        stacked = torch.stack(tensors, dim=1).cpu().numpy()  # [batch, layer, head, q, k]
    side = trace.encoded.decoder if prefix == "decoder." and trace.encoded.decoder is not None else trace.encoded
    mask = side.attention_mask.bool().cpu().numpy()
    for b in range(stacked.shape[0]):
        positions = np.flatnonzero(mask[b])
        if positions.size == mask.shape[1]:  # nothing padded: no gather, no copy
            yield Example(b, stacked[b], positions)
        else:
            yield Example(b, np.ascontiguousarray(stacked[b][:, :, positions][:, :, :, positions]), positions)


def _fuse(pattern: torch.Tensor, how: str) -> np.ndarray:
    """Return [batch, 1, q, k] float64: the heads of `pattern` [batch, head, q, k] fused by mean, max or min."""
    try:
        fused = rollout_math.fuse_heads(pattern.cpu().numpy(), how)  # the head axis is -3 here too
    except ConfigError as err:
        raise AnalyzerError(str(err)) from None
    return fused[:, None]


def readout_rows(readout: Readout, kind: str, positions: np.ndarray) -> list[int]:
    """Return readout rows as indices into `positions` (auto: first real token, or last for decoders)."""
    if readout == "auto":
        return [len(positions) - 1] if kind == "decoder" else [0]
    rows = []
    for position in readout:
        if position < 0:  # counts back from the last real token
            row = len(positions) + position
        else:
            hits = np.flatnonzero(positions == position)
            row = int(hits[0]) if hits.size else -1
        if row < 0:
            raise AnalyzerError(
                f"readout position {position} is not a real token of this example (its real positions are"
                f" {positions.min()}..{positions.max()}); pick one of those, a negative index, or 'auto'."
            )
        rows.append(row)
    return rows


def scatter(
    values: Float[np.ndarray, "row key"], positions: np.ndarray, rows: Sequence[int] | None, pos: int
) -> Float[np.ndarray, "out pos"]:
    """Return `values` [row, n] placed back on the padded axes: [len(rows), pos], or [pos, pos] when rows is None."""
    if rows is None:
        out = np.zeros((pos, pos))
        out[np.ix_(positions, positions)] = values
        return out
    out = np.zeros((len(rows), pos))
    out[:, positions] = values
    return out


def row_sum_error(matrix: np.ndarray) -> float:
    """Return the largest |row sum − 1| over the rows of `matrix` [..., row, key] that are not all zero."""
    sums = matrix.sum(axis=-1)
    present = np.abs(matrix).sum(axis=-1) > 0
    return float(np.abs(sums[present] - 1.0).max(initial=0.0))
