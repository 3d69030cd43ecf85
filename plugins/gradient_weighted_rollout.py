"""Gradient-weighted attention rollout (Chefer, Gur & Wolf 2021, ICCV, eqs. 5–6 and 8–11).

Ā = E_h[(∇A ⊙ A)⁺] per layer, ∇A = ∂score/∂A of each example's own target score; R = I, then
R ← R + Ā · R per self-attention layer (encoder-decoder: the paper's cross-attention rules,
`gradient_math.gradient_weighted_rollout_encoder_decoder`).

Arrays (batch first; padding is zero):
    rollout [batch, query, key]  R of the main stack (an encoder-decoder: `cross` [batch, dec, enc], R_de)
    readout [batch, key]         w · R, w the decision's pooling (its rows and weights); for an encoder-decoder
                                 the R_de rows of the decoder positions the decision reads
    per_step [batch, query, key] for a target of several tokens (a continuation, --generate N): per token, R of
                                 that token's own score, read at the row whose logits score it (`_per_step`)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float

from interpret.analyze import AnalyzerResult, NamedArray, Readout, RunContext, View
from interpret.analyze.params import as_dict
from interpret.arrays import to_numpy
from interpret.inputs import Encoded
from interpret.plugins import gradient_math
from interpret.plugins._pattern_grad import PatternGradients, pattern_gradients
from interpret.plugins._per_step import per_step
from interpret.trace import Trace


@dataclass(frozen=True)
class GradientRolloutParams:
    """Gradient-weighted rollout has no parameter: the paper's rule is used as stated."""


class GradientWeightedRollout:
    """Chefer et al. 2021's relevance propagation through gradient-weighted attention."""

    name = "gradient_weighted_rollout"
    summary = "Gradient-weighted rollout (Chefer et al. 2021): R ← R + E_h[(∇A ⊙ A)⁺]·R, class-specific."
    version = "1.0"
    requires = ()
    needs_model = True
    provides = ("readout",)
    Params = GradientRolloutParams

    def run(self, trace: Trace, params: GradientRolloutParams, ctx: RunContext) -> AnalyzerResult:
        """Return the relevance map and the decision's readout, and per_step for a target of several tokens
        (module docstring)."""
        grads = pattern_gradients(trace, ctx, self.name)
        relevance = _relevance(trace, grads, torch.arange(trace.encoded.batch))
        readout = np.stack([ctx.targets[b].readout_weights(relevance.shape[1]) @ relevance[b] for b in range(len(relevance))])
        name, title = ("cross", "Decoder → encoder relevance (gradient-weighted, Chefer et al. 2021)") \
            if _encoder_decoder(grads) else ("rollout", "Gradient-weighted rollout [query × key]")
        arrays = {name: NamedArray(relevance, ("batch", "query", "key")), "readout": NamedArray(readout, ("batch", "key"))}
        views = [View("heatmap", name, title), View("token_strip", "readout", "Gradient-weighted rollout from the decision's rows")]

        def step_readout(rows: torch.Tensor, step: int) -> np.ndarray:
            # the relevance of step `step`'s own score, read at the one row whose logits score that token
            mine = _relevance(trace, pattern_gradients(trace, ctx, self.name, rows, step), rows)
            return np.stack([mine[i, ctx.targets[b].positions[step]] for i, b in enumerate(rows.tolist())])

        steps = per_step(trace, ctx, readout.shape[1], step_readout)
        if steps is not None:
            arrays["per_step"] = NamedArray(steps, ("batch", "query", "key"))
            views.append(View("heatmap", "per_step", "Gradient-weighted rollout per target token [row: the position scoring it × input token]"))
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params),
            checks={"capture_score_error": grads.score_check()}, arrays=arrays, views=tuple(views),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens), readout_of=Readout("readout", signed=False),
        )


def _relevance(trace: Trace, grads: PatternGradients, rows: torch.Tensor) -> Float[np.ndarray, "rows query key"]:
    """Return R [rows, query, key] of the examples `rows` (the cross relevance R_de of an encoder-decoder), zero
    at padded queries and keys."""
    main = gradient_math.attention_times_gradient(*grads.main)
    decoder = _encoder_decoder(grads)
    if grads.decoder is not None and grads.cross is not None:
        _, _, relevance = gradient_math.gradient_weighted_rollout_encoder_decoder(
            main, gradient_math.attention_times_gradient(*grads.decoder), gradient_math.attention_times_gradient(*grads.cross)
        )
    else:
        relevance = gradient_math.gradient_weighted_rollout(main)
    side = trace.encoded.decoder if decoder and trace.encoded.decoder is not None else trace.encoded
    queries, keys = (_mask(encoded)[to_numpy(rows)] for encoded in (side, trace.encoded))
    return relevance * queries[:, :, None] * keys[:, None, :]


def _encoder_decoder(grads: PatternGradients) -> bool:
    return grads.decoder is not None and grads.cross is not None


def _mask(encoded: Encoded) -> np.ndarray:
    return to_numpy(encoded.attention_mask).astype(np.float64)
