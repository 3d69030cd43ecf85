"""Perturbation attributions by token through Captum: feature ablation (occlusion of one token at a time),
LIME and KernelSHAP over a token mask.

Each attributed token is one feature: the feature mask [1, pos, d_model] gives every embedding coordinate of
attributed position k the feature id k, and all other positions (padding; special tokens unless
include_special) one last feature whose baseline equals the input, so switching it never changes the score
(its value is not reported). A feature "off" takes the baseline's embedding (pad or mask token, text, or
zero). F is each example's own target score (`ctx.score`).
    feature_ablation  F(x) − F(x with token k replaced by the baseline), Captum's `FeatureAblation`
    lime              the coefficients of a Lasso fitted to F over random token subsets weighted by an
                      exponential cosine kernel (Ribeiro et al. 2016, eq. 1), Captum's `Lime` with its
                      default kernel and `SkLearnLasso`, whose penalty is `alpha` × |F(x) − F(x')| per example:
                      Lasso's solution scales with the scores only when its penalty does, so the same alpha
                      selects the same tokens whatever the logit scale (Captum's fixed 0.01 zeroes every
                      coefficient of a model whose scores move by less)
    kernel_shap       Shapley values estimated by the Shapley-kernel weighted linear regression (Lundberg &
                      Lee 2017, theorem 2), Captum's `KernelShap`
LIME and KernelSHAP sample `n_samples` subsets per example, seeded with the run's seed before each example.
Arrays: readout [batch, key], signed, 0 at positions that are not attributed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from captum._utils.models.linear_model import SkLearnLasso
from captum.attr import FeatureAblation, KernelShap, Lime

from interpret.analysis import AnalyzerResult, RunContext
from interpret.plugins import _captum
from interpret.trace import Trace


@dataclass(frozen=True)
class AblationParams(_captum.BaselineParams):
    """Parameters of feature ablation by token."""

    perturbations_per_eval: int = field(default=16, metadata={"help": "ablated copies scored per forward pass"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.perturbations_per_eval < 1:
            raise ValueError(f"perturbations_per_eval={self.perturbations_per_eval} must be 1 or more")


@dataclass(frozen=True)
class SamplingParams(AblationParams):
    """Parameters of LIME and KernelSHAP."""

    n_samples: int = field(default=200, metadata={"help": "random token subsets scored per example"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_samples < 2:
            raise ValueError(f"n_samples={self.n_samples} is too few to fit a model; use 200 or more")


@dataclass(frozen=True)
class LimeParams(SamplingParams):
    """Parameters of LIME."""

    alpha: float = field(default=0.01, metadata={"help": "Lasso penalty, relative to |F(x) − F(baseline)| of the example"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.alpha < float("inf"):
            raise ValueError(f"alpha={self.alpha} must be a finite number above 0, e.g. 0.01")


class _Perturbation:
    """What the perturbation analyzers share: the Captum method `method` per example over the token mask."""

    version = "1.0"
    requires = ()
    needs_model = True
    provides = ("readout",)

    def run(self, trace: Trace, params: AblationParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-token attributions of the analyzer's method (module docstring)."""
        batch = _captum.token_batch(trace, ctx, params, self.name)
        inputs, baselines = _captum.baseline_embeddings(ctx, batch, params)
        masks = _captum.token_masks(batch, inputs.shape[-1])
        forward = _captum.ScoreModule(ctx, batch.encoded)
        with torch.no_grad():
            scores = forward(inputs, batch.examples)  # [batch]
            gaps = (scores - forward(baselines, batch.examples)).abs().tolist()
        sampled = isinstance(params, SamplingParams)  # n_samples random subsets, seeded before each example
        extra = {"n_samples": params.n_samples} if sampled else {}
        rows = []
        for b in range(inputs.shape[0]):
            method = self.make(forward, params, gaps[b])
            if sampled:
                _captum.seed(ctx)
            attr = method.attribute(
                inputs[b:b + 1], baselines=baselines[b:b + 1], feature_mask=masks[b],
                additional_forward_args=(batch.examples[b:b + 1],),
                perturbations_per_eval=params.perturbations_per_eval, **extra,
            )
            rows.append(attr[..., 0])  # every coordinate of a token carries that token's value
        readout = _captum.token_scores(torch.cat(rows), batch)
        return _captum.token_result(self, trace, params, readout, f"{self.title} per token (signed)",
                                    {"score_consistency": _captum.score_check(ctx, trace, batch, inputs, scores)}, signed=True)

    def make(self, forward: _captum.ScoreModule, params: AblationParams, gap: float) -> Any:
        """Return the Captum method over `forward` for one example whose |F(x) − F(x')| is `gap`."""
        return self.method(forward)


class FeatureAblationAnalyzer(_Perturbation):
    """The score's drop when one token at a time is replaced by the baseline."""

    name = "feature_ablation"
    title = "Feature ablation (occlusion)"
    summary = "Occlusion by token: the score's change when each token is replaced by the baseline (Captum FeatureAblation)."
    Params = AblationParams
    method = FeatureAblation


class LimeAnalyzer(_Perturbation):
    """LIME over the tokens: a sparse linear surrogate of the score on random token subsets."""

    name = "lime"
    title = "LIME"
    summary = "LIME (Ribeiro et al. 2016) over a token mask via Captum's Lime, seeded; n_samples a parameter."
    Params = LimeParams
    method = Lime

    def make(self, forward: _captum.ScoreModule, params: LimeParams, gap: float) -> Any:
        """Return Captum's Lime whose Lasso penalty scales with the example's |F(x) − F(x')| (module docstring)."""
        return Lime(forward, interpretable_model=SkLearnLasso(alpha=params.alpha * gap))


class KernelShapAnalyzer(_Perturbation):
    """KernelSHAP over the tokens: Shapley values by the Shapley-kernel regression."""

    name = "kernel_shap"
    title = "KernelSHAP"
    summary = "KernelSHAP (Lundberg & Lee 2017) over a token mask via Captum's KernelShap, seeded; n_samples a parameter."
    Params = SamplingParams
    method = KernelShap
