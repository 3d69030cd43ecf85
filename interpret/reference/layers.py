"""Transformer blocks: the MLP, the encoder layer and the decoder layer, pre- or post-norm.

Hook points of a block, in forward order (module paths below the block):
    EncoderLayer: hook_resid_pre, attn.*, hook_attn_out, hook_resid_mid, mlp.hook_pre, mlp.hook_post,
        hook_mlp_out, hook_resid_post.
    DecoderLayer: hook_resid_pre, attn.*, hook_attn_out, hook_resid_mid, cross_attn.*, hook_cross_attn_out,
        hook_resid_mid2, mlp.hook_pre, mlp.hook_post, hook_mlp_out, hook_resid_post.
The residual hooks hold the stream between sub-blocks: with post-norm (norm_first=False) that is after each
sub-block's LayerNorm, with pre-norm the un-normalized sum. `hook_*_out` is a sub-block's output (after its
dropout) before it is added to the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor, nn

from interpret.hooks import HookPoint
from interpret.reference.attention import MultiHeadAttention
from interpret.reference.config import TransformerConfig
from interpret.types import Residual

Memory = Float[Tensor, "batch key d_model"]
SelfMask = Bool[Tensor, "#batch 1 pos pos"]
CrossMask = Bool[Tensor, "#batch 1 1 key"]


class MLP(nn.Module):
    """Position-wise feed-forward network returning [batch, pos, d_model]: fc_out(act(fc_in(x)))."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.activation = config.activation
        self.fc_in = nn.Linear(config.d_model, config.mlp_width, bias=config.bias)
        self.hook_pre = HookPoint("batch pos d_mlp")
        self.hook_post = HookPoint("batch pos d_mlp")
        self.dropout = nn.Dropout(config.dropout)
        self.fc_out = nn.Linear(config.mlp_width, config.d_model, bias=config.bias)

    def forward(self, x: Residual) -> Residual:
        """Return [batch, pos, d_model]; hook_pre / hook_post see the [batch, pos, d_mlp] activations."""
        pre = self.hook_pre(self.fc_in(x))
        post = self.hook_post(F.relu(pre) if self.activation == "relu" else F.gelu(pre))
        return self.fc_out(self.dropout(post))


def _norm(config: TransformerConfig) -> nn.LayerNorm:
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)


class _Block(nn.Module):
    """The sub-blocks of a layer (cross-attention when `cross`), built in forward order, and `_step`, one
    sub-block with its residual connection."""

    cross = False

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.norm_first = config.norm_first
        self.hook_resid_pre = HookPoint("batch pos d_model")
        self.ln_attn = _norm(config)
        self.attn = MultiHeadAttention(config)
        self.dropout_attn = nn.Dropout(config.dropout)
        self.hook_attn_out = HookPoint("batch pos d_model")
        self.hook_resid_mid = HookPoint("batch pos d_model")
        if self.cross:
            self.ln_cross = _norm(config)
            self.cross_attn = MultiHeadAttention(config)
            self.dropout_cross = nn.Dropout(config.dropout)
            self.hook_cross_attn_out = HookPoint("batch pos d_model")
            self.hook_resid_mid2 = HookPoint("batch pos d_model")
        self.ln_mlp = _norm(config)
        self.mlp = MLP(config)
        self.dropout_mlp = nn.Dropout(config.dropout)
        self.hook_mlp_out = HookPoint("batch pos d_model")
        self.hook_resid_post = HookPoint("batch pos d_model")

    def _step(
        self, resid: Residual, norm: nn.Module, sublayer: Callable[[Residual], Residual], dropout: nn.Module,
        hook_out: HookPoint, hook_resid: HookPoint,
    ) -> Residual:
        """Return the stream [batch, pos, d_model] after `sublayer`: normed before it (pre-norm) or after the sum."""
        if self.norm_first:
            return hook_resid(resid + hook_out(dropout(sublayer(norm(resid)))))
        return hook_resid(norm(resid + hook_out(dropout(sublayer(resid)))))

    def _self_attention(self, x: Residual, allowed: SelfMask | None) -> Residual:
        attend = partial(self.attn, allowed=allowed)
        return self._step(
            self.hook_resid_pre(x), self.ln_attn, attend, self.dropout_attn, self.hook_attn_out, self.hook_resid_mid
        )

    def _mlp(self, resid: Residual) -> Residual:
        return self._step(resid, self.ln_mlp, self.mlp, self.dropout_mlp, self.hook_mlp_out, self.hook_resid_post)


class EncoderLayer(_Block):
    """Self-attention then MLP, each with a residual connection; returns [batch, pos, d_model]."""

    def forward(self, x: Residual, allowed: SelfMask | None = None) -> Residual:
        """Return [batch, pos, d_model]; `allowed` is the self-attention mask [batch or 1, 1, pos, pos]."""
        return self._mlp(self._self_attention(x, allowed))


class DecoderLayer(_Block):
    """Masked self-attention, cross-attention to the memory, then MLP; returns [batch, pos, d_model]."""

    cross = True

    def forward(
        self,
        x: Residual,
        memory: Memory,
        allowed: SelfMask | None = None,
        memory_allowed: CrossMask | None = None,
    ) -> Residual:
        """Return [batch, pos, d_model]: target `x` attends to itself, then to `memory` [batch, key, d_model].

        allowed: bool self-attention mask [batch or 1, 1, pos, pos]; memory_allowed: bool cross-attention
        mask [batch or 1, 1, 1, key] (False at padded memory positions).
        """
        resid = self._self_attention(x, allowed)
        resid = self._step(
            resid, self.ln_cross, lambda h: self.cross_attn(h, memory, allowed=memory_allowed), self.dropout_cross,
            self.hook_cross_attn_out, self.hook_resid_mid2,
        )
        return self._mlp(resid)
