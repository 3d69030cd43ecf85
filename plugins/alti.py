"""ALTI, Aggregation of Layer-wise Token-to-token Interactions (Ferrando, Gállego & Costa-jussà 2022,
"Measuring the Mixing of Contextual Information in the Transformer", EMNLP).

Each block's attention output (attention, residual and, in post-norm blocks, the layer norm) is split into
one vector T_i(x_j) per source token (`_decompose`); the contribution of token j to token i is how much closer
T_i(x_j) brings the output to itself than to nothing, in Manhattan distance,

    c_ij = max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁) / Σ_k max(0, ‖y_i‖₁ − ‖y_i − T_i(x_k)‖₁)

and the layers are aggregated by rollout, R = C_{L−1} · … · C_0 (the paper's aggregation; see `_contributions`).

Arrays (batch first; padding zero):
    rollout   [batch, query, key]        R: how much each input token contributes to each top-layer token.
    readout   [batch, key]               w · R, w the decision's pooling (its rows and weights).
    per_layer [batch, layer, query, key] each layer's C (per_layer=True).
Reads the trace's hook_pattern, hook_v, hook_resid_pre, hook_attn_out, ln2.hook_normalized (the attention's
norm in a post-norm block), hook_mlp_out and hook_resid_post (to check the block's structure) and the model's output projections and norms; memory O(chunk · n · d_model) per layer, chunked over
queries. Models and kinds covered: see `interpret.plugins._decompose`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from interpret.analysis import AnalyzerResult, Check, RunContext
from interpret.estimate.memory import check_memory
from interpret.plugins import _contributions, _decompose
from interpret.plugins._attention import target_of
from interpret.trace import Trace

STREAM = (
    "*attn.hook_pattern", "*attn.hook_v", "*hook_resid_pre", "*hook_attn_out", "*ln2.hook_normalized", "*hook_mlp_out",
    "*hook_resid_post",
)


@dataclass(frozen=True)
class ContributionParams:
    """Parameters of a layer-wise contribution method aggregated by rollout."""

    per_layer: bool = field(default=False, metadata={"help": "also return each layer's contribution matrix"})


def contribution_result(
    analyzer: type, trace: Trace, params: ContributionParams, ctx: RunContext, method: _contributions.Method, title: str
) -> AnalyzerResult:
    """Return the AnalyzerResult of ALTI or GlobEnc (arrays as `alti`'s module docstring lists)."""
    parts = _decompose.block_parts(ctx, trace, analyzer.name, closing=method == "globenc")
    batch, pos, layers = trace.encoded.batch, trace.encoded.pos, len(parts)
    d_model = int(parts[0].out_weight.shape[-1])
    stored = batch * (2 + (layers if params.per_layer else 0)) * pos * pos * _decompose.BYTES_PER_FLOAT
    check_memory(
        analyzer.name, _decompose.estimate_bytes(pos, d_model, layers) + stored,
        f"[query, key, d_model] per chunk of queries and {batch}×{'L×' if params.per_layer else ''}n² maps at n={pos}",
    )
    out, error = _contributions.new_maps(batch, pos, layers if params.per_layer else None), 0.0
    for b, positions, example in _decompose.example_layers(trace, parts):
        matrices, errors = _contributions.layer_matrices(example, parts, method)
        error = max(error, *errors)
        _contributions.roll_out(out, b, positions, matrices, target_of(ctx.targets, b))
    return _contributions.result(analyzer, trace, params, out, (f"{title} [query × key]", f"{title} from the decision's rows"), {
        "decomposition_error": Check(
            error, _contributions.DECOMPOSITION_TOLERANCE,
            "largest relative |Σ_j T_i(x_j) + biases − the block's real output| (the split adds up to the model)",
        ),
    })


class Alti:
    """ALTI: token-to-token contributions through attention, residual and layer norm, rolled out."""

    name = "alti"
    summary = "ALTI (Ferrando et al. 2022): token-to-token contributions through attention, residual and norm, rolled out."
    version = "1.0"
    requires = STREAM
    needs_model = True
    provides = ("readout",)
    Params = ContributionParams

    def run(self, trace: Trace, params: ContributionParams, ctx: RunContext) -> AnalyzerResult:
        """Return ALTI's rollout and readout (arrays as the module docstring lists)."""
        return contribution_result(type(self), trace, params, ctx, "alti", "ALTI")
