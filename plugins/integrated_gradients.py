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
    per_step [batch, query, key]  for targets of several tokens (a continuation, --generate N): each token's own
                          attribution in the row of the position whose logits score it (`_per_step`);
                          with reduce=sum its rows add up to the readout (IG is linear in the score: an invariant)
Checks: completeness_delta (warning) — the largest |delta| over examples; above the tolerance, more steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from captum.attr import IntegratedGradients, LayerIntegratedGradients

from interpret.analysis import AnalyzerResult, Check, RunContext
from interpret.arrays import to_numpy
from interpret.plugins import _captum, _per_step
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
        default=0, metadata={"help": "with internal_batch_size=0: the estimated memory one forward pass may use (MiB;"
                                     " 0: half the GPU's free memory on CUDA, 1024 on the CPU)"}
    )
    delta_tolerance: float = field(
        default=0.05, metadata={"help": "completeness delta (score units) above which the report warns"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.steps < 2:
            raise ValueError(f"steps={self.steps} is too few for a path integral; use 50 or more")
        if self.memory_mb < 0:
            raise ValueError(f"memory_mb={self.memory_mb} is negative; use 0 (sized from the device) or e.g. 1024")
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
        attr, delta, gap = _integrate(ctx, batch, params, torch.arange(batch.input_ids.shape[0]), None)
        readout = _captum.per_token(attr, params.reduce, batch)
        delta_values = to_numpy(delta.detach().double()).reshape(-1)
        worst = float(np.abs(delta_values).max())
        description = (
            f"largest |Σ attributions − (F(x) − F(baseline))| over examples (completeness, Sundararajan et al."
            f" 2017) is {worst:.3g}; above {params.delta_tolerance:g}, raise the steps"
            f" (--set integrated_gradients.steps={params.steps * 4}) or use method=gausslegendre"
        )
        checks = {"completeness_delta": Check(worst, params.delta_tolerance, description, severity="warning")}
        title = ("Integrated Gradients (signed: red for, blue against the target)" if params.reduce == "sum"
                 else "Integrated Gradients (L2 norm per token)")
        steps, step_checks, views = _per_step.per_step(
            trace, ctx, readout, lambda rows, step: _captum.per_token(
                _integrate(ctx, batch, params, rows, step)[0], params.reduce, batch.rows(rows)),
            "Integrated Gradients", linear=params.reduce == "sum",  # IG is linear in the score, and so is Σ_d
        )
        return _captum.token_result(
            self, trace, params, readout, title, {**checks, **step_checks}, scalars={"completeness_delta_max": worst},
            views=views, **steps, delta=delta_values, gap=to_numpy(gap.detach().double()).reshape(-1),
        )


def _integrate(
    ctx: RunContext, batch: _captum.TokenBatch, params: IntegratedGradientsParams, rows: torch.Tensor, step: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (attributions [rows, pos, d_model], completeness deltas [rows], F(x) − F(x') [rows]) of the
    examples `rows`, for the score of target step `step` (None: every step summed)."""
    sub = batch.rows(rows)
    path = len(rows) * params.steps
    chunk = params.internal_batch_size or _even_chunk(path, _captum.path_rows(ctx, sub, params.memory_mb))
    if params.baseline == "zero":
        inputs, baseline = _captum.baseline_embeddings(ctx, sub, params)
        method = IntegratedGradients(_captum.ScoreModule(ctx, batch.encoded, step=step))
    else:
        inputs, baseline = sub.input_ids, sub.baseline_ids
        forward = _captum.ScoreModule(ctx, batch.encoded, "input_ids", step)
        method = LayerIntegratedGradients(forward, ctx.embedding_layer())
    attr, delta = method.attribute(
        inputs, baselines=baseline, n_steps=params.steps, method=params.method, internal_batch_size=chunk,
        additional_forward_args=(sub.examples,), return_convergence_delta=True,
    )
    return attr, delta, _gap(attr, delta)


def _even_chunk(path: int, most: int) -> int:
    """Return the rows per pass that cover `path` rows in as few passes as `most` rows per pass allow, split
    evenly (50 rows under a budget of 37 run as 25 + 25, not 37 + 13: the same passes, a lower peak)."""
    passes = -(-path // max(most, 1))
    return -(-path // passes)


def _gap(attr: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """Return F(x) − F(x') [rows] from Captum's own convergence delta, delta = Σ attr − (F(x) − F(x')), so the
    gap costs no forward pass of its own (Captum already ran the input and the baseline to compute delta);
    Σ attr is summed as Captum sums it (rows flattened, in the attribution dtype), so the gap is exact up to one
    rounding of that sum (float32: about 1e-7 of |Σ attr|)."""
    total = attr.detach().reshape(attr.shape[0], -1).sum(1)
    return total.double() - delta.detach().double().reshape(-1)
