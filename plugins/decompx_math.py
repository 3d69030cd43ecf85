"""DecompX's propagation of token decompositions (Modarressi, Fayyaz, Aghazadeh, Yaghoobzadeh & Pilehvar 2023,
"DecompX: Explaining Transformers Decisions by Propagating Token Decomposition", ACL) as tensor maths: the
analyzer (`decompx`) feeds it the forward pass's fixed quantities and the model's weights.

A decomposition of representations over the n input tokens is a tensor X [pos, token, d] with
Σ_k X[i, k] = x_i (the paper's x_{i⇐k}, Eq. 1); every bias is split over the tokens (below), so the sum is
exact and nothing is left over. Through one block:

    attention (Eqs. 2–6)  first block: z_{i⇐k} = Σ_h α^h_ik v^h_k W_O^h (the value v_k = x_k W_V + b_V, its
                          bias travelling with the attention weights), b_O split; later blocks:
                          z_{i⇐k} = Σ_h Σ_j α^h_ij (x_{j⇐k} W_V^h) W_O^h, and b_Att = Σ_h b_V^h W_O^h + b_O
                          (the rows of α sum to one) split as one bias
    norm (Eq. 8)          γ ⊙ (X[i, k] − mean(X[i, k])) / s_i with s_i the deviation of the real input
                          (RMSNorm: γ ⊙ X[i, k] / rms_i), then β split
    feed-forward (Eqs. 9–11)  ζ_{i⇐k} = Y[i, k] W_1 (b_1 split), θ_i = f(ζ_i)/ζ_i per neuron from the real
                          pre-activation ζ_i (the zero-origin line through the activation point, Eq. 10),
                          F_{i⇐k} = (θ_i ⊙ ζ_{i⇐k}) W_2 (b_2 split). A gated MLP f(g) ⊙ u (Llama) is not in
                          the paper: there each factor carries the decomposition in turn with the other held at
                          its real value, ½(f(g_i) ⊙ u_{i⇐k} + θ_i ⊙ g_{i⇐k} ⊙ u_i), which adds up to f(g_i) ⊙ u_i.

Biases (AbsDot, Eq. 5): a bias b added to a bias-free term T [..., token, d] goes to token k in proportion to
|b · T_k| over the tokens of that output position. Where no token's term is aligned with b (all dot products
zero, a measure-zero case) it goes by the size of each token's term, and equally where every term is zero.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Float
from torch import Tensor

from interpret.plugins._decompose import NormParams, linear_part

GUARD = 1e-12  # |pre-activation| at or below which the slope is the activation's slope at 0 (0 / 0 otherwise)


def split_bias(
    term: Float[Tensor, "*rows token d"], bias: Float[Tensor, " d"], valid: Tensor
) -> Float[Tensor, "*rows token d"]:
    """Return term + ω ⊗ bias, ω [*rows, token] the AbsDot shares (module docstring), summing to one per row.
    `term` is updated in place (callers pass a term they have just computed). valid [*rows, token] (bool,
    broadcast): the (row, token) pairs that exist in a padded batch. A row with none (a padding
    row, its term zero) gets no bias, and the fallbacks give a padding token nothing, so a padded example's
    shares are its shares alone."""
    weights = (term @ bias).abs()
    total = weights.sum(-1, keepdim=True)
    if not bool(((total > 0) | ~valid.any(-1, keepdim=True)).all()):  # the measure-zero fallbacks, only where needed
        ones = valid.expand_as(weights).to(weights.dtype)
        weights = torch.where(total > 0, weights, term.abs().sum(-1))
        weights = torch.where(weights.sum(-1, keepdim=True) > 0, weights, ones)
        total = weights.sum(-1, keepdim=True)
    return term.addcmul_((weights / torch.where(total > 0, total, 1.0)).unsqueeze(-1), bias)


def slope(pre: Tensor, act: Callable[[Tensor], Tensor]) -> Tensor:
    """Return θ = act(pre) / pre elementwise (Eq. 10), and act's slope at 0 where |pre| ≤ GUARD (0.5 for GELU)."""
    small = pre.abs() <= GUARD
    tiny = torch.full((1,), 1e-6, dtype=pre.dtype, device=pre.device)
    at_zero = act(tiny) / tiny
    return torch.where(small, at_zero, act(pre) / torch.where(small, torch.ones_like(pre), pre))


def normed(parts: Float[Tensor, "*rows token d"], norm: NormParams, scale: Tensor, valid: Tensor) -> Tensor:
    """Return the norm's decomposition (Eq. 8): its linear part with the real input's divisor `scale`, β split
    over the `valid` pairs (split_bias)."""
    out = linear_part(parts, norm, scale)
    return split_bias(out, norm.bias, valid) if bool(norm.bias.any()) else out


def first_attention(
    pattern: Float[Tensor, "batch head query key"], value: Float[Tensor, "batch key head d_value"],
    out_weight: Float[Tensor, "head d_value d"],
) -> Float[Tensor, "batch query token d"]:
    """Return the first block's bias-free attention term Σ_h α^h_ik v^h_k W_O^h (each key is its own token)."""
    transformed = torch.einsum("bkhv,hvd->bhkd", value, out_weight)
    return torch.einsum("bhik,bhkd->bikd", pattern, transformed)


def attention(
    parts: Float[Tensor, "batch key token d"], pattern: Float[Tensor, "batch head query key"],
    value_weight: Float[Tensor, "d head_value"], out_weight: Float[Tensor, "head_value d"],
) -> Float[Tensor, "batch query token d"]:
    """Return a later block's bias-free attention term Σ_h Σ_j α^h_ij (X[j, k] W_V^h) W_O^h, mixed in value space."""
    heads = pattern.shape[1]
    values = parts @ value_weight  # [batch, key, token, head · d_value]
    values = values.view(*values.shape[:3], heads, -1)
    mixed = torch.einsum("bhij,bjkhv->bikhv", pattern, values)
    return mixed.reshape(*mixed.shape[:3], -1) @ out_weight


def feed_forward(
    parts: Float[Tensor, "batch row token d"], real: Float[Tensor, "batch row d"], up: tuple[Tensor, Tensor],
    gate: tuple[Tensor, Tensor] | None, act: Callable[[Tensor], Tensor], down: tuple[Tensor, Tensor],
    valid: Tensor,
) -> tuple[Float[Tensor, "batch row token d"], Float[Tensor, "batch row d_mlp"]]:
    """Return (the MLP's output decomposed [batch, row, token, d], the linearised activation output [batch, row, d_mlp]).

    real: the MLP's real input per row (the pre-activations are read from it, fixed by the forward pass);
    up / gate / down: (weight [d_in, d_out], bias [d_out]) of the projections (gate None: f(x W_1 + b_1) W_2 + b_2);
    valid [batch, row, token]: the pairs that exist (split_bias).
    The second output, Σ_k of the activation's decomposition, is what the linearisation gives for the real
    activation output: the caller compares it with the model's (the linearisation error).
    """
    up_part = split_bias(parts @ up[0], up[1], valid)
    pre = real @ up[0] + up[1]
    if gate is None:
        theta = slope(pre, act)
        hidden, linearised = theta.unsqueeze(-2) * up_part, theta * pre
    else:
        gate_pre = real @ gate[0] + gate[1]
        theta = slope(gate_pre, act)
        gated = theta * gate_pre  # f(g), as the line through the activation point gives it
        gate_part = split_bias(parts @ gate[0], gate[1], valid)
        hidden = 0.5 * (gated.unsqueeze(-2) * up_part + (theta * pre).unsqueeze(-2) * gate_part)
        linearised = gated * pre
    return split_bias(hidden @ down[0], down[1], valid), linearised


def restated_pattern(
    query: Float[Tensor, "batch query head d_head"], key: Float[Tensor, "batch key head d_head"], kept: Tensor, scale: float
) -> Float[Tensor, "batch head query key"]:
    """Return softmax(q·kᵀ·scale) [batch, head, query, key] over the keys `kept` [batch, head, query, key] (bool)
    in the working precision: the pattern the kernel computed, without the float32 rounding of the captured
    one; zero in a row that keeps no key (a padding row)."""
    scores = torch.einsum("bihd,bjhd->bhij", query, key) * scale
    return torch.softmax(scores.masked_fill(~kept, float("-inf")), dim=-1).masked_fill(~kept, 0.0)
