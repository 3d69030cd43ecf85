"""Integrated Gradients on the token embeddings (Sundararajan et al. 2017), through Captum.

attr_i = (x_i − x'_i) · ∫₀¹ ∂F(x' + α(x − x'))/∂x_i dα   (eq. 1; x the embedding layer's output, x' the
baseline's), approximated by Captum's `LayerIntegratedGradients` on `ctx.embedding_layer()` (Gauss–Legendre
by default), or its `IntegratedGradients` on the embeddings for baseline=zero. F is each example's own
target score (`ctx.score`: the logit of its class or tokens, minus the contrast's).

Arrays (batch first; padding is zero):
    readout [batch, key]  one attribution per token (Σ over the embedding axis, or its L2 norm)
    delta   [batch]       completeness delta Σ attr − (F(x) − F(x')) (Captum's convergence delta; eq. in sec. 3,
                          "completeness": the attributions add up to the difference of the scores)
    gap     [batch]       F(x) − F(x'), what the attributions should add up to
Checks: completeness_delta (warning) — the largest |delta| over examples; above the tolerance, more steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from captum.attr import IntegratedGradients, LayerIntegratedGradients

from interpret.analyze import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.analyze.params import as_dict
from interpret.plugins import _captum
from interpret.trace import Trace

IntegrationMethod = Literal["gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle"]


@dataclass(frozen=True)
class IntegratedGradientsParams(_captum.BaselineParams):
    """Parameters of Integrated Gradients."""

    steps: int = field(default=50, metadata={"help": "points of the path integral (more: smaller completeness delta)"})
    method: IntegrationMethod = field(default="gausslegendre", metadata={"help": "Captum's quadrature rule"})
    internal_batch_size: int = field(
        default=0, metadata={"help": "rows per forward pass over the path (0: as many as memory_mb allows)"}
    )
    memory_mb: int = field(
        default=1024, metadata={"help": "with internal_batch_size=0: the estimated memory one forward pass may use (MiB)"}
    )
    delta_tolerance: float = field(
        default=0.05, metadata={"help": "completeness delta (score units) above which the report warns"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.steps < 2:
            raise ValueError(f"steps={self.steps} is too few for a path integral; use 50 or more")
        if self.memory_mb < 1:
            raise ValueError(f"memory_mb={self.memory_mb} must be 1 or more, e.g. 1024")
        if self.internal_batch_size < 0:
            raise ValueError(f"internal_batch_size={self.internal_batch_size} is negative; use 0 (all at once) or a row count")
        if not self.delta_tolerance > 0:
            raise ValueError(f"delta_tolerance={self.delta_tolerance} must be above 0, e.g. 0.05")


class IntegratedGradientsAnalyzer:
    """Integrated Gradients of each example's target score with respect to its token embeddings."""

    name = "integrated_gradients"
    summary = "Integrated Gradients (Sundararajan et al. 2017) on the token embeddings via Captum, with its completeness delta."
    version = "1.0"
    requires = ()
    needs_model = True
    provides = ("readout",)
    Params = IntegratedGradientsParams

    def run(self, trace: Trace, params: IntegratedGradientsParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-token attributions, completeness deltas and score gaps (module docstring)."""
        batch = _captum.token_batch(trace, ctx, params, self.name)
        rows = batch.input_ids.shape[0] * params.steps
        chunk = params.internal_batch_size or min(rows, _captum.path_rows(ctx, batch, params.memory_mb))
        common = {"n_steps": params.steps, "method": params.method, "internal_batch_size": chunk,
                  "additional_forward_args": (batch.examples,), "return_convergence_delta": True}
        if params.baseline == "zero":
            inputs, _ = _captum.embeddings(ctx, batch)
            baseline = _captum.zero_baseline(inputs, batch)
            method = IntegratedGradients(_captum.forward_on_embeddings(ctx, batch.encoded))
            attr, delta = method.attribute(inputs, baselines=baseline, **common)
            score_of = _captum.forward_on_embeddings(ctx, batch.encoded)
            with torch.no_grad():
                gap = score_of(inputs, batch.examples) - score_of(baseline, batch.examples)
        else:
            method = LayerIntegratedGradients(_captum.forward_on_ids(ctx, batch.encoded), ctx.embedding_layer())
            attr, delta = method.attribute(batch.input_ids, baselines=batch.baseline_ids, **common)
            score_of = _captum.forward_on_ids(ctx, batch.encoded)
            with torch.no_grad():
                gap = score_of(batch.input_ids, batch.examples) - score_of(batch.baseline_ids, batch.examples)
        readout = _captum.per_token(attr, params.reduce, batch)
        delta_values = delta.detach().double().cpu().numpy().reshape(-1)
        worst = float(np.abs(delta_values).max())
        description = (
            f"largest |Σ attributions − (F(x) − F(baseline))| over examples (completeness, Sundararajan et al."
            f" 2017) is {worst:.3g}; above {params.delta_tolerance:g}, raise the steps"
            f" (--set integrated_gradients.steps={params.steps * 4}) or use method=gausslegendre"
        )
        return AnalyzerResult(
            analyzer=self.name,
            version=self.version,
            params=as_dict(params),
            arrays={
                "readout": NamedArray(readout, ("batch", "key")),
                "delta": NamedArray(delta_values, ("batch",)),
                "gap": NamedArray(gap.detach().double().cpu().numpy().reshape(-1), ("batch",)),
                **_captum.word_arrays(trace, readout, params.words),
            },
            scalars={"completeness_delta_max": worst},
            checks={"completeness_delta": Check(worst, params.delta_tolerance, description, severity="warning")},
            views=(View("token_strip", "readout", "Integrated Gradients (signed: red for, blue against the target)"
                        if _captum.signed(params.reduce) else "Integrated Gradients (L2 norm per token)"),),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=_captum.signed(params.reduce)),
        )
