"""GlobEnc (Modarressi, Fayyaz, Yaghoobzadeh & Pilehvar 2022, "GlobEnc: Quantifying Global Token Attribution
by Incorporating the Whole Encoder Layer in Transformers", NAACL).

Norm-based attention extended with the residual and both layer norms of an encoder block, aggregated by
rollout: per layer

    g_ij = ‖γ₂ ⊙ (T_i(x_j) − mean(T_i(x_j))) / s₂(z_i)‖₂, each row over its sum     (the paper's N_Enc)

with T_i(x_j) the attention-residual-LN₁ split of `_decompose` and γ₂, s₂ the block's second norm and the
standard deviation of its real input (the MLP, which mixes no tokens, is not decomposed); a pre-norm block
(GPT-2) has no norm on its residual path, so g_ij = ‖T_i(x_j)‖₂. Then R = G_{L−1} · … · G_0, and the
readout is w · R for the decision's pooling w (the paper reads the [CLS] row of a [CLS]-pooled classifier).

Arrays as ALTI's (`alti`): rollout [batch, query, key], readout [batch, key], per_layer [batch, layer, query,
key] with per_layer=True. Reads ALTI's hook points.
"""

from __future__ import annotations

from interpret.analysis import AnalyzerResult, RunContext
from interpret.plugins.alti import STREAM, ContributionParams, contribution_result
from interpret.trace import Trace


class GlobEnc:
    """GlobEnc: norm-based attention with residual and both layer norms, rolled out."""

    name = "globenc"
    summary = "GlobEnc (Modarressi et al. 2022): norms through attention, residual and both layer norms, rolled out."
    version = "1.0"
    requires = STREAM
    needs_model = True
    provides = ("readout",)
    Params = ContributionParams

    def run(self, trace: Trace, params: ContributionParams, ctx: RunContext) -> AnalyzerResult:
        """Return GlobEnc's rollout and readout (arrays as ALTI's)."""
        return contribution_result(type(self), trace, params, ctx, "globenc", "GlobEnc")
