"""Gradient attributions on the token embeddings through Captum: saliency, input × gradient, GradientSHAP.

x [batch, pos, d_model] is the embedding layer's output for each example's tokens and F each example's own
target score (`ctx.score`, minus the contrast's when asked):
    saliency          ∂F/∂x (Simonyan et al. 2014, eq. 1), Captum's `Saliency`; per token ‖∂F/∂x_pos‖₂ by
                      default (unsigned; abs=false with reduce=sum gives the signed Σ_d ∂F/∂x)
    input_x_gradient  x ⊙ ∂F/∂x (Shrikumar et al. 2016), Captum's `InputXGradient`; per token Σ_d (signed)
    gradient_shap     E_{α, ε}[(x − x') ⊙ ∂F/∂x(x' + α(x + ε − x'))] (Lundberg & Lee 2017, sec. 4; expected
                      gradients), Captum's `GradientShap` with the chosen baseline, `n_samples` draws of α
                      and noise ε ~ N(0, stdev²), seeded with the run's seed, one example at a time (each has
                      its own baseline)
Arrays: readout [batch, key] (0 at padding and, unless include_special, special tokens); gradient_shap also
delta [batch], Captum's completeness delta averaged over its samples.
DeepLIFT is `deeplift` (plugins/deeplift.py), returned only where it sums to F(x) − F(baseline).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from captum.attr import GradientShap, InputXGradient, Saliency

from interpret.analysis import AnalyzerResult, RunContext
from interpret.plugins import _captum
from interpret.trace import Trace


@dataclass(frozen=True)
class SaliencyParams(_captum.TokenParams):
    """Parameters of saliency."""

    reduce: _captum.Reduction = field(
        default="l2", metadata={"help": "embedding axis to one score per token: l2 (gradient norm) or sum"}
    )
    abs: bool = field(default=True, metadata={"help": "absolute gradients (Captum's abs); false with reduce=sum is signed"})


@dataclass(frozen=True)
class GradientShapParams(_captum.BaselineParams):
    """Parameters of GradientSHAP."""

    n_samples: int = field(default=20, metadata={"help": "random draws of α and noise per example"})
    stdev: float = field(default=0.0, metadata={"help": "standard deviation of the Gaussian noise added to the input"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_samples < 1:
            raise ValueError(f"n_samples={self.n_samples} must be 1 or more, e.g. 20")
        if not self.stdev >= 0 or self.stdev == float("inf"):
            raise ValueError(f"stdev={self.stdev} must be a finite number ≥ 0, e.g. 0.0")


class _Gradient:
    """What the gradient analyzers share: they run the model and read out one score per token."""

    version = "1.0"
    requires = ()
    needs_model = True
    provides = ("readout",)


def _gradient(analyzer: _Gradient, trace: Trace, params: _captum.TokenParams, ctx: RunContext, method: type, title: str,
              signed: bool | None = None, **options: bool) -> AnalyzerResult:
    """Return the per-token attributions of the Captum gradient `method` on the embeddings (module docstring)."""
    batch = _captum.token_batch(trace, ctx, params, analyzer.name)
    inputs = _captum.embeddings(ctx, batch)
    forward = _captum.ScoreModule(ctx, batch.encoded)
    attr = method(forward).attribute(inputs, additional_forward_args=(batch.examples,), **options)
    return _captum.token_result(analyzer, trace, params, _captum.per_token(attr, params.reduce, batch), title,
                                {"score_consistency": _captum.score_check(ctx, trace, batch, inputs)}, signed=signed)


class SaliencyAnalyzer(_Gradient):
    """The gradient of each example's score with respect to its token embeddings."""

    name = "saliency"
    summary = "Saliency (Simonyan et al. 2014): the gradient norm of the score per token embedding, via Captum."
    Params = SaliencyParams

    def run(self, trace: Trace, params: SaliencyParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-token saliency (module docstring)."""
        return _gradient(self, trace, params, ctx, Saliency, "Saliency (gradient per token)",
                         params.reduce == "sum" and not params.abs, abs=params.abs)


class InputXGradientAnalyzer(_Gradient):
    """Embedding × gradient of each example's score, per token."""

    name = "input_x_gradient"
    summary = "Input × gradient (Shrikumar et al. 2016) on the token embeddings, via Captum (signed)."
    Params = _captum.TokenParams

    def run(self, trace: Trace, params: _captum.TokenParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-token input × gradient (module docstring)."""
        return _gradient(self, trace, params, ctx, InputXGradient, "Input × gradient per token")


class GradientShapAnalyzer(_Gradient):
    """Expected gradients between each example and its baseline, with noise, via Captum's GradientShap."""

    name = "gradient_shap"
    summary = "GradientSHAP (Lundberg & Lee 2017) on the token embeddings via Captum, seeded."
    Params = GradientShapParams

    def run(self, trace: Trace, params: GradientShapParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-token GradientSHAP values and the mean completeness delta (module docstring)."""
        batch = _captum.token_batch(trace, ctx, params, self.name)
        inputs, baselines = _captum.baseline_embeddings(ctx, batch, params)
        method = GradientShap(_captum.ScoreModule(ctx, batch.encoded))
        rows, deltas = [], []
        for b in range(inputs.shape[0]):
            _captum.seed(ctx)
            attr, delta = method.attribute(
                inputs[b:b + 1], baselines=baselines[b:b + 1], n_samples=params.n_samples, stdevs=params.stdev,
                additional_forward_args=(batch.examples[b:b + 1],), return_convergence_delta=True,
            )
            rows.append(attr)
            deltas.append(float(delta.detach().double().mean()))
        readout = _captum.per_token(torch.cat(rows), params.reduce, batch)
        checks = {"score_consistency": _captum.score_check(ctx, trace, batch, inputs)}
        return _captum.token_result(self, trace, params, readout, "GradientSHAP per token", checks,
                                    delta=np.asarray(deltas))
