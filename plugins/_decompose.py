"""Shared by the decomposition analyzers (norm-based attention, GlobEnc, ALTI, ALTI-Logit): each block's
attention output split into one vector per source token, from the trace's tensors and the model's weights.

For one example with n real positions, layer l, head h (all float64):

    f^h(x_j)  = v^h_j · W_O^h                                   [head, key, d_model]   (Kobayashi et al. 2020, §3: f(x) = (x W_V + b_V) W_O)
    a_ij      = Σ_h α^h_ij f^h(x_j)                            [query, key, d_model]  (the attention's part)
    y_ij      = a_ij + δ_ij x_i                                [query, key, d_model]  (with the residual)

v^h_j is the value vector the kernel received (`hook_v`, value bias included, so in a pre-norm block it is
the value of LN1(x_j)), W_O^h the rows of the output projection that read head h; the output projection's
bias b_O is no token's and is left out (as in every paper decomposed here). Summed over j with b_O added,
y_ij gives the residual stream after the attention, x_i + attn_out_i: `decomposition_error` checks it.

Post-norm blocks (BERT, DistilBERT: x' = LN(x + attn)) apply the norm's linear part to each y_ij with the
standard deviation of the real sum (Kobayashi et al. 2021, the decomposed LayerNorm; Ferrando et al. 2022, T_i(x_j)):

    T_i(x_j) = γ ⊙ (y_ij − mean(y_ij)) / sqrt(var(x_i + attn_out_i) + ε)

so that Σ_j T_i(x_j) + γ ⊙ (b_O − mean(b_O)) / s_i + β = LN(x_i + attn_out_i), the block's real output.
Pre-norm blocks (GPT-2, ViT) have no norm on the residual path: T_i(x_j) = y_ij and the resultant is
x_i + attn_out_i + (nothing): the norm the next attention applies acts on its own input, which is that
layer's token.

Supported: one stack of self-attention blocks whose attention output is one projection of the
concatenated heads, either post-norm with LayerNorms (BERT, RoBERTa, DistilBERT, ELECTRA; each norm is
checked numerically to be a LayerNorm) or sequential pre-norm (GPT-2, ViT, and RMSNorm decoders such as
Llama, Qwen2, Mistral: the norm acts before the value projection, which hook_v already holds, so its kind
does not matter). Refused, with the reason: encoder-decoders (cross attention mixes two token streams these
papers decompose separately), parallel attention/MLP blocks (Phi, Cohere: no norm feeds the MLP alone, so
no residual stream follows the attention alone; the collector refuses ln2.hook_normalized), and blocks whose
output is not x + attn_out + mlp_out (Gemma 2's sandwich norms inside the branches: found by the structure
check in `_contributions`). ALTI-Logit also needs the final norm to be a LayerNorm or an RMSNorm.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn

from interpret.analysis import RunContext
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.trace import Trace

BYTES_PER_FLOAT = 8
DEFAULT_BUDGET_BYTES = 2 * 1024**3  # the [query, key, d_model] tensors of one layer, per chunk of queries


@dataclass(frozen=True)
class NormParams:
    """A norm's affine parameters: weight γ [d_model], bias β [d_model] (zero for RMSNorm), eps (float64, CPU).

    centred: True for LayerNorm (γ ⊙ (x − mean) / sqrt(var + ε) + β); False for RMSNorm (γ ⊙ x / sqrt(mean(x²) + ε)).
    """

    weight: Float[Tensor, " d_model"]
    bias: Float[Tensor, " d_model"]
    eps: float
    centred: bool = True


@dataclass(frozen=True)
class BlockParts:
    """What one block contributes to the decomposition besides the trace.

    out_weight: W_O per head [head, d_value, d_model]; out_bias: b_O [d_model].
    post_norm: whether the block normalises the residual stream after the attention (BERT) or before it (GPT-2).
    attn_norm: post-norm only, the norm of x + attn_out. closing_norm: post-norm only, the norm of the MLP's
        residual sum (GlobEnc's second norm); None where it is not needed or the block has no such norm.
    """

    layer: int
    out_weight: Float[Tensor, "head d_value d_model"]
    out_bias: Float[Tensor, " d_model"]
    post_norm: bool
    attn_norm: NormParams | None
    closing_norm: NormParams | None


def check_kind(trace: Trace, name: str) -> None:
    """Raise AnalyzerError for a trace whose model kind the decomposition does not cover (see module doc)."""
    if trace.meta.kind not in ("encoder", "decoder", "vision"):
        raise AnalyzerError(
            f"{name} decomposes one stack of self-attention blocks; a {trace.meta.kind} model mixes streams through"
            " cross attention, which these papers do not decompose. Use rollout or a gradient method for it."
        )


def check_layers(trace: Trace, name: str) -> None:
    """Raise AnalyzerError unless the trace holds every layer: an aggregation that skipped one would be silently wrong."""
    captured, every = trace.layers("attn.hook_pattern"), list(range(trace.meta.n_layers))
    if captured != every:
        raise AnalyzerError(
            f"{name} aggregates every layer, but the trace holds layers {captured} of {trace.meta.n_layers};"
            " collect all layers (no layers= selection)."
        )


def _norm_params(module: nn.Module, where: str, rms: bool = False) -> NormParams:
    """Return the parameters of `module`, verified numerically to be a LayerNorm (or, with `rms`, an RMSNorm)."""
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    eps = getattr(module, "eps", getattr(module, "variance_epsilon", None))
    kinds = "a LayerNorm or an RMSNorm" if rms else "a LayerNorm"
    if not isinstance(weight, Tensor) or eps is None or (bias is not None and not isinstance(bias, Tensor)):
        raise AnalyzerError(f"the norm {where} ({type(module).__name__}) is not {kinds} with a weight; this decomposition is stated for {kinds}.")
    weight64 = weight.detach().double().cpu()
    bias64 = bias.detach().double().cpu() if isinstance(bias, Tensor) else torch.zeros_like(weight64)
    probe = torch.linspace(-2.0, 3.0, weight.shape[-1], dtype=weight.dtype, device=weight.device)[None]
    with torch.no_grad():
        got = module(probe).double().cpu()
    for centred in (True, False) if rms else (True,):
        params = NormParams(weight64, bias64, float(eps), centred)
        if torch.allclose(got, layer_norm(probe.double().cpu(), params), rtol=1e-3, atol=1e-3):
            return params
    raise AnalyzerError(
        f"the norm {where} ({type(module).__name__}) is not {kinds} (its output differs from the formula);"
        f" this decomposition is stated for {kinds}."
    )


def _centre(x: Tensor, norm: NormParams) -> Tensor:
    return x - x.mean(-1, keepdim=True) if norm.centred else x


def layer_norm(x: Float[Tensor, "*any d_model"], norm: NormParams) -> Float[Tensor, "*any d_model"]:
    """Return γ ⊙ (x − mean(x)) / sqrt(var(x) + ε) + β over the last axis (biased variance, as LayerNorm), or
    γ ⊙ x / sqrt(mean(x²) + ε) for an RMSNorm (`norm.centred` False)."""
    centred = _centre(x, norm)
    return norm.weight * centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + norm.eps) + norm.bias


def norm_scale(pre: Float[Tensor, "*any d_model"], norm: NormParams) -> Float[Tensor, "*any 1"]:
    """Return sqrt(var(pre) + ε) [*any, 1] (RMSNorm: sqrt(mean(pre²) + ε)): the divisor the norm applies to `pre`."""
    return torch.sqrt(_centre(pre, norm).pow(2).mean(-1, keepdim=True) + norm.eps)


def linear_part(parts: Float[Tensor, "*any d_model"], norm: NormParams, scale: Tensor) -> Float[Tensor, "*any d_model"]:
    """Return γ ⊙ (parts − mean(parts)) / scale (RMSNorm: γ ⊙ parts / scale): the norm's linear part applied to
    summands of its input."""
    return norm.weight * _centre(parts, norm) / scale


def final_norm(ctx: RunContext, name: str) -> NormParams:
    """Return the norm after the last block (ln_final), checked numerically to be a LayerNorm or an RMSNorm."""
    module = ctx.module("ln_final.hook_normalized")
    if module is None:
        raise AnalyzerError(f"{name}: {type(ctx.model).__name__} has no norm after its last block to linearise.")
    return _norm_params(module, "after the last block", rms=True)


def _affine_matrix(module: nn.Module, d_in: int) -> tuple[Tensor, Tensor]:
    """Return (W [d_in, d_out], b [d_out]) of an affine module (Linear, GPT-2's Conv1D) by probing it."""
    param = next(module.parameters(), None)
    if param is None:
        raise AnalyzerError(f"{type(module).__name__} holds no weights: the heads' output projection is not a plain affine module.")
    with torch.no_grad():
        zero = module(torch.zeros(1, d_in, dtype=param.dtype, device=param.device))
        basis = module(torch.eye(d_in, dtype=param.dtype, device=param.device))
    return (basis - zero).double().cpu(), zero[0].double().cpu()


def block_parts(ctx: RunContext, trace: Trace, name: str, *, norms: bool = True, closing: bool = False) -> list[BlockParts]:
    """Return the BlockParts of every captured layer of the context's model's single stack.

    norms: read the block's norms (not needed by norm-based attention); closing: also GlobEnc's second norm.
    """
    model = ctx.model
    if model is None:
        raise AnalyzerError(f"{name} reads the model's output projections and norms; pass model= to analyze.")
    check_kind(trace, name)
    if norms:
        check_layers(trace, name)
    parts = []
    for layer in trace.layers("attn.hook_pattern"):
        out_proj = ctx.module(f"blocks.{layer}.attn.hook_z")
        if out_proj is None:
            raise AnalyzerError(
                f"{name}: block {layer} of {type(model).__name__} has no single output projection of the heads"
                " (no hook_z), so its attention cannot be split per head."
            )
        sizes = ctx.sizes(f"blocks.{layer}.attn.hook_z")
        heads, d_value = int(sizes["head"]), int(sizes["d_head"])
        weight, bias = _affine_matrix(out_proj, heads * d_value)
        ln1, ln2 = ctx.module(f"blocks.{layer}.ln1.hook_normalized"), ctx.module(f"blocks.{layer}.ln2.hook_normalized")
        post_norm = ln1 is None
        if norms and ln2 is None:
            raise AnalyzerError(
                f"{name}: block {layer} of {type(model).__name__} has no norm before its MLP (parallel attention and"
                " MLP, or no norm), so no residual stream follows the attention alone; it is not supported."
            )
        attn_norm = _norm_params(ln2, f"of block {layer}") if norms and post_norm else None
        closing_norm = _closing_norm(ctx, layer, name) if norms and closing and post_norm else None
        parts.append(BlockParts(layer, weight.view(heads, d_value, -1), bias, post_norm, attn_norm, closing_norm))
    return parts


def _closing_norm(ctx: RunContext, layer: int, name: str) -> NormParams:
    """Return the post-norm block's second norm: the one LayerNorm of the block other than the attention's."""
    others = other_norms(ctx, layer)
    if len(others) != 1:
        raise AnalyzerError(
            f"{name}: block {layer} holds {len(others)} LayerNorms besides the attention's, so its closing norm is"
            " ambiguous; this family is not supported."
        )
    return _norm_params(others[0], f"closing block {layer}")


def other_norms(ctx: RunContext, layer: int) -> list[nn.Module]:
    """Return the LayerNorms of block `layer` other than the attention's (ln2): a post-norm block's closing norm."""
    attn_norm = ctx.module(f"blocks.{layer}.ln2.hook_normalized")
    block = ctx.module(f"blocks.{layer}.hook_resid_post")
    return [m for m in block.modules() if m is not attn_norm and isinstance(m, nn.LayerNorm)]


@dataclass(frozen=True)
class ExampleLayer:
    """One example's tensors of one layer over its n real positions (float64, CPU).

    pattern [head, query, key], value [key, head, d_value], resid_pre [pos, d_model] (x), attn_out
    [pos, d_model] (the attention's output, b_O included), normalized [pos, d_model] (post-norm: the norm's
    real output; pre-norm: None), mlp_out [pos, d_model] and resid_post [pos, d_model] (the block's output, to
    check the block is the sequential residual structure the decomposition assumes). The stream tensors are
    None when not read (norm-based attention needs only the pattern and the values).
    """

    pattern: Tensor
    value: Tensor
    resid_pre: Tensor | None
    attn_out: Tensor | None
    normalized: Tensor | None
    mlp_out: Tensor | None
    resid_post: Tensor | None


def example_layers(
    trace: Trace, parts: list[BlockParts], *, stream: bool = True
) -> Iterator[tuple[int, np.ndarray, list[ExampleLayer]]]:
    """Yield (example index, real positions [n], one ExampleLayer per part) for every example of the trace.

    stream: also read the residual stream (resid_pre, attn_out, the attention's norm, mlp_out, resid_post).
    """
    mask = trace.encoded.attention_mask.bool().cpu()
    for b in range(mask.shape[0]):
        real = torch.nonzero(mask[b]).flatten()
        layers = []
        for part in parts:
            prefix = f"blocks.{part.layer}."

            def take(suffix: str, pos_axis: int = 0) -> Tensor:
                return trace[prefix + suffix][b].detach().double().cpu().index_select(pos_axis, real)

            pattern = take("attn.hook_pattern", 1).index_select(2, real)
            layers.append(
                ExampleLayer(
                    pattern=pattern,
                    value=take("attn.hook_v"),
                    resid_pre=take("hook_resid_pre") if stream else None,
                    attn_out=take("hook_attn_out") if stream else None,
                    normalized=take("ln2.hook_normalized") if stream and part.post_norm else None,
                    mlp_out=take("hook_mlp_out") if stream else None,
                    resid_post=take("hook_resid_post") if stream else None,
                )
            )
        yield b, to_numpy(real), layers


def transformed_values(layer: ExampleLayer, part: BlockParts) -> Float[Tensor, "head key d_model"]:
    """Return f^h(x_j) = v^h_j · W_O^h [head, key, d_model] (Kobayashi et al. 2020, §3: f(x) = (x W_V + b_V) W_O)."""
    return torch.einsum("jhv,hvd->hjd", layer.value, part.out_weight)


def query_chunks(n: int, d_model: int) -> list[slice]:
    """Return slices of the n queries such that a [chunk, n, d_model] float64 tensor (and a few alike) fits."""
    per_query = 4 * n * d_model * BYTES_PER_FLOAT  # y, T and two temporaries of the distance
    size = max(1, DEFAULT_BUDGET_BYTES // max(per_query, 1))
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def estimate_bytes(n: int, d_model: int, layers: int) -> int:
    """Return the peak bytes of one example's decomposition: a chunk of [query, key, d_model] plus L·n² maps."""
    chunk = min(n, max(1, DEFAULT_BUDGET_BYTES // max(4 * n * d_model * BYTES_PER_FLOAT, 1)))
    return 4 * chunk * n * d_model * BYTES_PER_FLOAT + 2 * layers * n * n * BYTES_PER_FLOAT


def decomposed(
    layer: ExampleLayer, part: BlockParts, rows: slice
) -> tuple[Float[Tensor, "query key d_model"], Float[Tensor, "query d_model"]]:
    """Return (T_i(x_j) [query, key, d_model], resultant [query, d_model]) for the query rows `rows`.

    T as the module docstring states; the resultant is the block's real output of the attention part: the
    norm's output (post-norm) or x + attn_out (pre-norm), read from the trace.
    """
    values = transformed_values(layer, part)
    mixed = torch.einsum("hij,hjd->ijd", layer.pattern[:, rows], values)  # a_ij [chunk, key, d_model]
    index = torch.arange(rows.start, rows.stop)
    mixed[torch.arange(len(index)), index] += layer.resid_pre[rows]  # + δ_ij x_i
    pre = layer.resid_pre[rows] + layer.attn_out[rows]
    if not part.post_norm:
        return mixed, pre
    assert part.attn_norm is not None and layer.normalized is not None
    scale = norm_scale(pre, part.attn_norm)  # [chunk, 1]
    return linear_part(mixed, part.attn_norm, scale[:, None]), layer.normalized[rows]


def relative(got: Tensor, want: Tensor) -> float:
    """Return max |got − want| / max |want|: how far a restated tensor is from the model's own."""
    return float((got - want).abs().max() / want.abs().max().clamp(min=1e-30))


def row_normalised(matrix: Float[np.ndarray, "query key"]) -> Float[np.ndarray, "query key"]:
    """Return `matrix` with each row divided by its sum (a row of zeros raises: nothing would flow)."""
    sums = matrix.sum(-1, keepdims=True)
    if np.any(sums <= 0.0):
        raise AnalyzerError("a row of the contribution matrix sums to zero, so it cannot be normalised; the input is degenerate.")
    return matrix / sums
