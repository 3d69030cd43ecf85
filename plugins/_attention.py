"""Shared by the attention analyzers: per-example patterns over real positions, readouts, scattering back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from jaxtyping import Float

from interpret.errors import AnalyzerError
from interpret.trace import Trace

Readout = Literal["auto"] | tuple[int, ...]


@dataclass(frozen=True)
class Example:
    """One example's attention over its real positions only.

    layers: per layer, the heads [head, n, n] in the trace's dtype (views into the trace when nothing is
        padded), n = number of real positions.
    positions: [n] indices of the real positions in the padded sequence.
    """

    index: int
    layers: list[np.ndarray]
    positions: np.ndarray

    @property
    def pattern(self) -> Float[np.ndarray, "layer head query key"]:
        """Return the heads of every layer stacked [layer, head, n, n] (a copy)."""
        return np.stack(self.layers)


def examples(trace: Trace, prefix: str = "", suffix: str = "attn.hook_pattern") -> Iterator[Example]:
    """Yield each example's per-layer heads [head, n, n] restricted to its real (unpadded) positions."""
    layers = trace.layers(suffix, prefix)
    if not layers:
        trace.stack(suffix, prefix)  # raises the one-line error that names what was captured
    # Per-layer arrays, never one stacked copy of every head: at 512 tokens that copy costs as much as rollout.
    arrays = [trace[f"{prefix}blocks.{i}.{suffix}"].detach().cpu().numpy() for i in layers]  # [batch, head, q, k]
    side = trace.encoded.decoder if prefix == "decoder." and trace.encoded.decoder is not None else trace.encoded
    mask = side.attention_mask.bool().cpu().numpy()
    for b in range(mask.shape[0]):
        positions = np.flatnonzero(mask[b])
        if positions.size == mask.shape[1]:  # nothing padded: views, no copy
            yield Example(b, [array[b] for array in arrays], positions)
        else:
            real = np.ix_(positions, positions)
            yield Example(b, [np.ascontiguousarray(array[b][:, real[0], real[1]]) for array in arrays], positions)


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
