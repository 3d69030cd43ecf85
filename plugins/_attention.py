"""Shared by the attention analyzers: per-example patterns over real positions, the decision's readout
weights, scattering back onto the padded axes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from jaxtyping import Float

from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.target import Target
from interpret.trace import Trace

ReadoutRows = Literal["auto"] | tuple[int, ...]
READOUT_HELP = "rows read out: auto (the rows the decision reads, weighted as it pools) or positions, e.g. 0,5"


def residual_field() -> Any:
    """Return the Params field of the residual weight w of rollout and flow (checked by `check_residual`)."""
    return field(default=0.5, metadata={"help": "weight w of the identity: w·I + (1−w)·A, rows renormalised; in [0, 1)"})


def check_residual(residual: float, result: str) -> None:
    """Raise ValueError unless 0 ≤ residual < 1; `result` names what w = 1 would turn into the identity."""
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual={residual} is outside [0, 1]; use a weight in [0, 1) (the paper's 0.5)")
    if residual == 1.0:
        raise ValueError(f"residual=1 ignores the attention (every layer becomes the identity, so {result} is too);"
                         " use a weight below 1 (the paper's 0.5)")


@dataclass(frozen=True)
class ExampleHeads:
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


def examples(trace: Trace, prefix: str = "") -> Iterator[ExampleHeads]:
    """Yield each example's per-layer heads [head, n, n] restricted to its real (unpadded) positions."""
    layers = trace.layers("attn.hook_pattern", prefix)
    if not layers:
        trace.stack("attn.hook_pattern", prefix)  # raises the one-line error that names what was captured
    # Per-layer arrays, never one stacked copy of every head: at 512 tokens that copy costs as much as rollout.
    arrays = [to_numpy(trace[f"{prefix}blocks.{i}.attn.hook_pattern"]) for i in layers]  # [batch, head, q, k]
    side = trace.encoded.decoder if prefix == "decoder." and trace.encoded.decoder is not None else trace.encoded
    mask = to_numpy(side.attention_mask.bool())
    for b in range(mask.shape[0]):
        positions = np.flatnonzero(mask[b])
        if positions.size == mask.shape[1]:  # nothing padded: views, no copy
            yield ExampleHeads(b, [array[b] for array in arrays], positions)
        else:
            real = np.ix_(positions, positions)
            yield ExampleHeads(b, [np.ascontiguousarray(array[b][:, real[0], real[1]]) for array in arrays], positions)


def readout_weights(readout: ReadoutRows, target: Target | None, positions: np.ndarray) -> Float[np.ndarray, " n"]:
    """Return the readout's weights over the example's n real positions (summing to one).

    readout "auto": the rows the decision reads, weighted as it weighs them (`target.pooling`); a tuple of
    positions (negatives count back from the last real token): those rows, equally weighted.
    """
    weights = np.zeros(len(positions))
    if readout == "auto":
        if target is None or not target.pooling:
            raise AnalyzerError(
                "no decision says which rows to read; pass the model to analyze (model=) or name readout positions."
            )
        row_of = {int(position): row for row, position in enumerate(positions)}  # positions are distinct
        for position, weight in target.pooling:
            row = row_of.get(int(position))
            if row is None:
                raise AnalyzerError(
                    f"the decision reads position {position}, which is padding in this example; attention analyzers"
                    " read real positions only (SigLIP's text tower reads its row's last position: pass its texts as"
                    " text, which interpret pads on the left, not as a right-padded Encoded)."
                )
            weights[row] += weight
        return weights
    for position in readout:
        if position < 0:  # counts back from the last real token
            row = len(positions) + position
        else:
            hits = np.flatnonzero(positions == position)
            row = int(hits[0]) if hits.size else -1
        if not 0 <= row < len(positions):
            raise AnalyzerError(
                f"readout position {position} is not a real token of this example (its real positions are"
                f" {positions.min()}..{positions.max()}); pick one of those, a negative index, or 'auto'."
            )
        weights[row] += 1.0 / len(readout)
    return weights


def target_of(targets: Sequence[Target], index: int) -> Target | None:
    """Return example `index`'s target, or None when the caller resolved no targets."""
    return targets[index] if index < len(targets) else None


def scatter(values: Float[np.ndarray, "n n"], positions: np.ndarray, pos: int) -> Float[np.ndarray, "pos pos"]:
    """Return a matrix over the n real positions placed back on the padded axes [pos, pos] (padding 0)."""
    out = np.zeros((pos, pos))
    out[np.ix_(positions, positions)] = values
    return out


def scatter_row(values: Float[np.ndarray, "*any n"], positions: np.ndarray, pos: int) -> Float[np.ndarray, "*any pos"]:
    """Return values over the n real positions [..., n] placed back on the padded axis [..., pos] (padding 0)."""
    out = np.zeros((*values.shape[:-1], pos))
    out[..., positions] = values
    return out


def row_sum_error(matrix: np.ndarray) -> float:
    """Return the largest |row sum − 1| over the rows of `matrix` [..., row, key] that are not all zero."""
    sums = matrix.sum(axis=-1)
    present = np.abs(matrix).sum(axis=-1) > 0
    return float(np.abs(sums[present] - 1.0).max(initial=0.0))
