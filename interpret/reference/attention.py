"""Multi-head attention, written out step by step with a hook point at every intermediate.

The functional pieces (scorers, `masked_softmax`, `mix_values`) compose into `scaled_dot_product_attention`;
`MultiHeadAttention` calls the same pieces with hook points between them, so a hook that returns a tensor
replaces that intermediate for the rest of the computation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from interpret.hooks import HookPoint
from interpret.reference.config import TransformerConfig
from interpret.reference.masks import AllowedMask
from interpret.types import Pattern, Scores

QueryHeads = Float[Tensor, "batch query head d_head"]
KeyHeads = Float[Tensor, "batch key head d_head"]
QueryStream = Float[Tensor, "batch query d_model"]
KeyStream = Float[Tensor, "batch key d_model"]


def dot_scores(q: QueryHeads, k: KeyHeads, scale: float = 1.0) -> Scores:
    """Return [batch, head, query, key] scores scale * q·k (scale 1/sqrt(d_head) is scaled dot-product)."""
    return torch.einsum("bqhd,bkhd->bhqk", q, k) * scale


def additive_scores(
    q: QueryHeads,
    k: KeyHeads,
    w_query: Float[Tensor, "head d_head d_attn"],
    w_key: Float[Tensor, "head d_head d_attn"],
    v_score: Float[Tensor, "head d_attn"],
) -> Scores:
    """Return [batch, head, query, key] Bahdanau scores v·tanh(W_q q + W_k k), per head."""
    query_part = torch.einsum("bqhd,hde->bqhe", q, w_query)
    key_part = torch.einsum("bkhd,hde->bkhe", k, w_key)
    hidden = torch.tanh(query_part[:, :, None] + key_part[:, None, :])  # [batch, query, key, head, d_attn]
    return torch.einsum("bqkhe,he->bhqk", hidden, v_score)


def mask_scores(scores: Scores, allowed: AllowedMask | None) -> Scores:
    """Return [batch, head, query, key] scores with -inf where a key is not allowed."""
    if allowed is None:
        return scores
    return scores.masked_fill(~allowed, float("-inf"))


def masked_softmax(scores: Scores, allowed: AllowedMask | None) -> Pattern:
    """Return the [batch, head, query, key] pattern: softmax over key, exactly 0 at keys not allowed.

    A query with no allowed key gets a row of zeros (not NaN), and its gradient stays finite.
    """
    if allowed is None:
        return torch.softmax(scores, dim=-1)
    allowed = allowed.expand_as(scores)
    # A row of only -inf would give NaN; give such rows finite scores and zero them afterwards.
    has_key = allowed.any(dim=-1, keepdim=True)
    safe = scores.masked_fill(~allowed, float("-inf")).masked_fill(~has_key, 0.0)
    return torch.softmax(safe, dim=-1).masked_fill(~allowed, 0.0)


def mix_values(pattern: Pattern, v: KeyHeads) -> QueryHeads:
    """Return z [batch, query, head, d_head]: per head, the pattern-weighted sum of the values."""
    return torch.einsum("bhqk,bkhd->bqhd", pattern, v)


def scaled_dot_product_attention(
    q: QueryHeads, k: KeyHeads, v: KeyHeads, allowed_mask: AllowedMask | None = None
) -> tuple[QueryHeads, Pattern]:
    """Return (z [batch, query, head, d_head], pattern [batch, head, query, key]) of softmax(q·k/sqrt(d))·v.

    allowed_mask: bool, broadcastable to [batch, head, query, key]; False keys get probability exactly 0.
    """
    scores = mask_scores(dot_scores(q, k, 1.0 / math.sqrt(q.shape[-1])), allowed_mask)
    pattern = masked_softmax(scores, allowed_mask)
    return mix_values(pattern, v), pattern


class MultiHeadAttention(nn.Module):
    """Multi-head attention returning [batch, query, d_model]; self-attention, or cross-attention to memory.

    Hook points (module paths below the attention module):
        hook_q [batch, pos, head, d_head]; hook_k, hook_v [batch, pos, head, d_head] (pos = key positions);
        hook_attn_scores [batch, head, query, key], -inf where masked;
        hook_pattern [batch, head, query, key], rows sum to 1 over key, exactly 0 where masked (before the
            attention dropout, which acts only in training);
        hook_lse [batch, head, query], log Σ_key exp(score) of each row (computed only while hooked);
        hook_z [batch, pos, head, d_head], the per-head input of the output projection.
    Weights: `in_proj` [3 * d_model, d_model] (q, k, v stacked, as nn.MultiheadAttention) when
    `config.packed_qkv`, else `q_proj`, `k_proj`, `v_proj`; then `out_proj`. Additive scoring adds
    `score_query`, `score_key` [head, d_head, d_head] and `score_vector` [head, d_head].
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        d_model, n_heads, d_head, d_attn = config.d_model, config.n_heads, config.d_head, config.d_attn
        if config.packed_qkv:
            self.in_proj = nn.Linear(d_model, 3 * d_attn, bias=config.bias)
        else:
            self.q_proj = nn.Linear(d_model, d_attn, bias=config.bias)
            self.k_proj = nn.Linear(d_model, d_attn, bias=config.bias)
            self.v_proj = nn.Linear(d_model, d_attn, bias=config.bias)
        self.hook_q = HookPoint("batch pos head d_head")
        self.hook_k = HookPoint("batch pos head d_head")
        self.hook_v = HookPoint("batch pos head d_head")
        if config.scoring == "additive":
            bound = 1.0 / math.sqrt(d_head)
            self.score_query = nn.Parameter(torch.empty(n_heads, d_head, d_head).uniform_(-bound, bound))
            self.score_key = nn.Parameter(torch.empty(n_heads, d_head, d_head).uniform_(-bound, bound))
            self.score_vector = nn.Parameter(torch.empty(n_heads, d_head).uniform_(-bound, bound))
        self.hook_attn_scores = HookPoint("batch head query key")
        self.hook_pattern = HookPoint("batch head query key")
        self.hook_lse = HookPoint("batch head query")
        self.dropout = nn.Dropout(config.dropout)
        self.hook_z = HookPoint("batch pos head d_head")
        self.out_proj = nn.Linear(d_attn, d_model, bias=config.bias)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-draw this module's own tensors (the additive score's, U(-1/sqrt(d_head), 1/sqrt(d_head)) as at
        construction); the projections are nn.Linear and reset themselves. Used by the sanity check's
        re-initialisation (interpret.evidence.sanity)."""
        if self.config.scoring == "additive":
            bound = 1.0 / math.sqrt(self.config.d_head)
            for tensor in (self.score_query, self.score_key, self.score_vector):
                tensor.uniform_(-bound, bound)

    def projections(self) -> list[tuple[Tensor, Tensor | None]]:
        """Return [(weight [n_heads * d_head, d_model], bias [n_heads * d_head] or None)] for q, k and v."""
        if self.config.packed_qkv:
            weights = self.in_proj.weight.chunk(3, dim=0)
            bias = self.in_proj.bias
            biases = bias.chunk(3, dim=0) if bias is not None else (None, None, None)
            return list(zip(weights, biases, strict=True))
        return [(proj.weight, proj.bias) for proj in (self.q_proj, self.k_proj, self.v_proj)]

    def scores(self, q: QueryHeads, k: KeyHeads) -> Scores:
        """Return [batch, head, query, key] unmasked scores by `config.scoring`."""
        scoring = self.config.scoring
        if scoring == "additive":
            return additive_scores(q, k, self.score_query, self.score_key, self.score_vector)
        scale = 1.0 / math.sqrt(self.config.d_head) if scoring == "scaled_dot" else 1.0
        return dot_scores(q, k, scale)

    def forward(
        self, x: QueryStream, memory: KeyStream | None = None, allowed: AllowedMask | None = None
    ) -> QueryStream:
        """Return [batch, query, d_model]: attention of `x` to itself, or to `memory` [batch, key, d_model].

        allowed: bool [batch or 1, 1, query or 1, key], False where a key may not be attended to.
        """
        source = x if memory is None else memory
        (w_q, b_q), (w_k, b_k), (w_v, b_v) = self.projections()
        q = self.hook_q(self._split(F.linear(x, w_q, b_q)))
        k = self.hook_k(self._split(F.linear(source, w_k, b_k)))
        v = self.hook_v(self._split(F.linear(source, w_v, b_v)))
        scores = self.hook_attn_scores(mask_scores(self.scores(q, k), allowed))
        pattern = self.hook_pattern(masked_softmax(scores, allowed))
        if self.hook_lse._forward_hooks or self.hook_lse._forward_pre_hooks:  # a pass over [query, key]: only when asked
            self.hook_lse(torch.logsumexp(scores, dim=-1))
        z = self.hook_z(mix_values(self.dropout(pattern), v))
        return self.out_proj(z.flatten(-2))

    def _split(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos head d_head"]:
        return x.unflatten(-1, (self.config.n_heads, self.config.d_head))
