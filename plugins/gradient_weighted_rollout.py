"""Gradient-weighted attention rollout (Chefer, Gur & Wolf 2021, ICCV, eqs. 5–6 and 8–11).

Ā = E_h[(∇A ⊙ A)⁺] per layer, ∇A = ∂score/∂A of each example's own target score; R = I, then
R ← R + Ā · R per self-attention layer (encoder-decoder: the paper's cross-attention rules,
`gradient_math.gradient_weighted_rollout_encoder_decoder`).

Arrays (batch first; padding is zero):
    rollout [batch, query, key]  R of the main stack (an encoder-decoder: `cross` [batch, dec, enc], R_de)
    readout [batch, key]         w · R, w the decision's pooling (its rows and weights); for an encoder-decoder
                                 the R_de rows of the decoder positions the decision reads
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interpret.analyze import AnalyzerResult, NamedArray, Readout, RunContext, View
from interpret.analyze.params import as_dict
from interpret.plugins import gradient_math
from interpret.plugins._pattern_grad import pattern_gradients
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
        """Return the relevance map and the decision's readout (module docstring)."""
        grads = pattern_gradients(trace, ctx, self.name)
        main = gradient_math.attention_times_gradient(*grads.main)
        batch = main.shape[0]
        if grads.decoder is not None and grads.cross is not None:
            decoder = gradient_math.attention_times_gradient(*grads.decoder)
            cross = gradient_math.attention_times_gradient(*grads.cross)
            _, _, relevance = gradient_math.gradient_weighted_rollout_encoder_decoder(main, decoder, cross)
            name, title = "cross", "Decoder → encoder relevance (gradient-weighted, Chefer et al. 2021)"
        else:
            relevance = gradient_math.gradient_weighted_rollout(main)
            name, title = "rollout", "Gradient-weighted rollout [query × key]"
        query_mask = _query_mask(trace, grads.decoder is not None)
        relevance = relevance * query_mask[:, :, None] * _key_mask(trace)[:, None, :]
        readout = np.stack([ctx.targets[b].readout_weights(relevance.shape[1]) @ relevance[b] for b in range(batch)])
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params),
            checks={"capture_score_error": grads.score_check()},
            arrays={name: NamedArray(relevance, ("batch", "query", "key")), "readout": NamedArray(readout, ("batch", "key"))},
            views=(View("heatmap", name, title), View("token_strip", "readout", "Gradient-weighted rollout from the decision's rows")),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )


def _query_mask(trace: Trace, decoder: bool) -> np.ndarray:
    side = trace.encoded.decoder if decoder and trace.encoded.decoder is not None else trace.encoded
    return side.attention_mask.detach().cpu().numpy().astype(np.float64)


def _key_mask(trace: Trace) -> np.ndarray:
    return trace.encoded.attention_mask.detach().cpu().numpy().astype(np.float64)
