"""DeepLIFT (Shrikumar, Greenside & Kundaje 2017, "Learning Important Features Through Propagating Activation
Differences", ICML) on the token embeddings, through Captum — returned only where it is DeepLIFT.

attr_i = (x_i − x'_i) · m_i, with the multipliers m of the rescale rule (Δoutput / Δinput of each nonlinearity
between the input x and its baseline x') chained back from the score F (`ctx.score`: the target's logit, minus
the contrast's); x is the embedding layer's output: Captum's `LayerDeepLift` on `ctx.embedding_layer()`, or its
`DeepLift` on the embeddings for baseline=zero. Its defining property is summation-to-delta (the paper's
eq. 1): Σ_i attr_i = F(x) − F(x'). That holds only when every nonlinearity on the way has a rule: Captum's
cover nonlinearity *modules* (ReLU, ELU, LeakyReLU, Sigmoid, Tanh, Softplus, Softmax, max pooling), while a
transformer applies GELU, its norms and the attention softmax as functions and multiplies queries by keys and
patterns by values, where Captum silently takes plain gradients. So every example is checked against the model
itself (F(x) and F(x') from two forward passes of their own):

    |Σ_i attr_i − (F(x) − F(x'))| ≤ 1e-3 · max(|F(x) − F(x')|, 1e-4 · (|F(x)| + |F(x')|))

(the second term only lets float32 rounding pass where F barely moves), and a model where it fails is refused
in one line, without numbers. On the transformer families the project
covers (BERT, RoBERTa, DistilBERT, ELECTRA, GPT-2, Llama, the default MiniLM) it fails: use
integrated_gradients (the same attributions by a path integral, which needs no rules) or decompx.

Arrays (batch first; padding zero): readout [batch, key] (Σ_d, signed, or the L2 norm), delta [batch]
(Σ attr − (F(x) − F(x'))), gap [batch] (F(x) − F(x')). Check: summation_to_delta (invariant).
"""

from __future__ import annotations

import numpy as np
import torch
from captum.attr import DeepLift, LayerDeepLift

from interpret.analysis import AnalyzerResult, Check, RunContext
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.plugins import _captum
from interpret.trace import Trace

TOLERANCE = 1e-3  # relative (module docstring); float32 rounding of a true DeepLIFT is ~1e-6


def summation_error(total: np.ndarray, scores: np.ndarray, baseline_scores: np.ndarray) -> float:
    """Return max_b |Σ attr − (F(x) − F(x'))| / max(|F(x) − F(x')|, 1e-4 · (|F(x)| + |F(x')|)) over the
    examples [batch]: how far summation-to-delta is from holding, relatively (`total` = Σ attr per example)."""
    gap = scores - baseline_scores
    scale = np.maximum(np.abs(gap), 1e-4 * (np.abs(scores) + np.abs(baseline_scores)))
    return float(np.max(np.abs(total - gap) / np.maximum(scale, 1e-30)))


class DeepLiftAnalyzer:
    """DeepLIFT's rescale rule on the token embeddings, where Captum's rules reach every nonlinearity."""

    name = "deeplift"
    summary = "DeepLIFT (Shrikumar et al. 2017) on the token embeddings via Captum; refused where it does not sum to the score."
    version = "1.0"
    requires = ()
    needs_model = True
    provides = ("readout",)
    Params = _captum.BaselineParams

    def run(self, trace: Trace, params: _captum.BaselineParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-token DeepLIFT attributions (module docstring), or refuse a model they do not sum on."""
        batch = _captum.token_batch(trace, ctx, params, self.name)
        if params.baseline == "zero":
            inputs, baseline = _captum.baseline_embeddings(ctx, batch, params)
            forward = _captum.ScoreModule(ctx, batch.encoded, "inputs_embeds")
            method = DeepLift(forward)
        else:
            inputs, baseline = batch.input_ids, batch.baseline_ids
            forward = _captum.ScoreModule(ctx, batch.encoded, "input_ids")
            method = LayerDeepLift(forward, ctx.embedding_layer())
        attr = method.attribute(inputs, baselines=baseline, additional_forward_args=(batch.examples,))
        with torch.no_grad():
            at_input, at_baseline = (to_numpy(forward(x, batch.examples).detach().double()) for x in (inputs, baseline))
        gaps = at_input - at_baseline
        total = to_numpy(attr.detach().double().sum((1, 2)))
        delta = total - gaps
        error = summation_error(total, at_input, at_baseline)
        if not error <= TOLERANCE:
            raise AnalyzerError(
                f"{self.name}: on {type(ctx.model).__name__} Captum's DeepLIFT does not add up to F(x) − F(baseline)"
                f" (off by {error:.2g} times the difference): its rules cover nonlinearity modules, and this model's functional"
                " activations, norms, softmax and attention products fall back to gradients; use integrated_gradients or decompx."
            )
        readout = _captum.per_token(attr, params.reduce, batch)
        check = Check(error, TOLERANCE, "max |Σ attr − (F(x) − F(x'))| / |F(x) − F(x')| (module docstring)")
        return _captum.token_result(self, trace, params, readout, "DeepLIFT per token", {"summation_to_delta": check},
                                    delta=delta, gap=gaps)
