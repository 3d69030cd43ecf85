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

from interpret.analysis import Check, NamedArray, RunContext, View
from interpret.errors import AnalyzerError
from interpret.trace import Trace

StepReadout = Callable[[torch.Tensor, int], Float[np.ndarray, "rows key"]]
Parts = tuple[dict[str, NamedArray], dict[str, Check], tuple[View, ...]]  # what a result adds: arrays, checks, views


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


def per_step(
    trace: Trace, ctx: RunContext, readout: Float[np.ndarray, "batch key"], step_readout: StepReadout, method: str,
    linear: bool,
) -> Parts:
    """Return what a multi-token target adds to `method`'s result (empty when no example has more than one target
    step): the arrays {per_step: the token × token matrix [batch, query, key] (module docstring)}, for an
    analyzer `linear` in the score the check that the steps' rows add up to `readout` [batch, key] (the whole
    target's score is the sum of its steps' scores), and the heatmap view. `step_readout(rows, step)` gives the readout
    [rows, key] of the examples `rows` (a long tensor) for the score of target step `step` alone."""
    counts = step_counts(ctx)
    if max(counts) < 2:
        return {}, {}, ()
    side = trace.encoded.decoder if trace.encoded.decoder is not None else trace.encoded
    out = np.zeros((len(counts), side.pos, readout.shape[1]))
    for step in range(max(counts)):
        rows = torch.tensor([b for b, count in enumerate(counts) if count > step])
        scores = step_readout(rows, step)
        for i, b in enumerate(rows.tolist()):
            out[b, ctx.targets[b].positions[step]] += scores[i]
    checks = {}
    if linear:
        error = float(np.abs(out.sum(1) - readout).max() / max(np.abs(readout).max(), 1e-12))
        checks["per_step_sum_error"] = Check(error, 1e-4, "largest |Σ_steps per_step − readout| / max |readout|")
    view = View("heatmap", "per_step", f"{method} per target token [row: the position scoring it × input token]")
    return {"per_step": NamedArray(out, ("batch", "query", "key"))}, checks, (view,)
