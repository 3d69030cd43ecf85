"""One attribution row per target token of a multi-token target (a continuation, given or generated), as inseq
gives for generation: the analyzers that explain a target score (Integrated Gradients, attention × gradient,
gradient-weighted rollout) run once more per step with the score of that token alone (`RunContext.score(step=)`).

Row q of `per_step` [batch, query, key] holds the attribution of the target token scored by the logits at
position q (the token that follows q: for a language model, the row of the token before each continuation or
generated token); every other row is 0. The query axis runs over the decision's side (the decoder of an
encoder-decoder), the key axis over the analyzer's readout.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from jaxtyping import Float

from interpret.analysis import Check, RunContext
from interpret.errors import AnalyzerError
from interpret.trace import Trace

StepReadout = Callable[[torch.Tensor, int], Float[np.ndarray, "rows key"]]


def step_counts(ctx: RunContext) -> list[int]:
    """Return each example's number of target steps (1 for a class or a single token)."""
    return [len(target.ids) if target.kind == "token" else 1 for target in ctx.targets]


def refuse_steps(ctx: RunContext, analyzer: str) -> None:
    """Raise AnalyzerError when a target has several tokens: `analyzer`'s streamed computation explains only the
    whole target, and one row for a generated continuation would pass for what its full one gives per token."""
    counts = step_counts(ctx)
    if max(counts) > 1:
        raise AnalyzerError(
            f"{analyzer}, streamed, cannot give one row per target token ({max(counts)} target tokens), only one for"
            f" all of them; for per-token rows run {analyzer} on the full capture (streaming off, or shorter inputs)."
        )


def per_step(trace: Trace, ctx: RunContext, keys: int, readout: StepReadout) -> Float[np.ndarray, "batch query key"] | None:
    """Return the token × token matrix of a multi-token target (module docstring), or None when no example has
    more than one target step. `readout(rows, step)` gives the readout [rows, keys] of the examples `rows`
    (a long tensor) for the score of target step `step` alone."""
    counts = step_counts(ctx)
    if max(counts) < 2:
        return None
    side = trace.encoded.decoder if trace.encoded.decoder is not None else trace.encoded
    out = np.zeros((len(counts), side.pos, keys))
    for step in range(max(counts)):
        rows = torch.tensor([b for b, count in enumerate(counts) if count > step])
        scores = readout(rows, step)
        for i, b in enumerate(rows.tolist()):
            out[b, ctx.targets[b].positions[step]] += scores[i]
    return out


def sum_check(steps: Float[np.ndarray, "batch query key"], readout: Float[np.ndarray, "batch key"]) -> Check:
    """Return the check that the steps' rows add up to the readout, for an analyzer linear in the score (the
    whole target's score is the sum of its steps' scores)."""
    error = float(np.abs(steps.sum(1) - readout).max() / max(np.abs(readout).max(), 1e-12))
    return Check(error, 1e-4, "largest |Σ_steps per_step − readout| / max |readout|")
