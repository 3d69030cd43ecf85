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


class EncoderLayer(nn.Module):
    """Self-attention then MLP, each with a residual connection; returns [batch, pos, d_model]."""

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
        self.ln_mlp = _norm(config)
        self.mlp = MLP(config)
        self.dropout_mlp = nn.Dropout(config.dropout)
        self.hook_mlp_out = HookPoint("batch pos d_model")
        self.hook_resid_post = HookPoint("batch pos d_model")

    def forward(self, x: Residual, allowed: SelfMask | None = None) -> Residual:
        """Return [batch, pos, d_model]; `allowed` is the self-attention mask [batch or 1, 1, pos, pos]."""
        resid = self.hook_resid_pre(x)
        if self.norm_first:
            attn_out = self.hook_attn_out(self.dropout_attn(self.attn(self.ln_attn(resid), allowed=allowed)))
            resid = self.hook_resid_mid(resid + attn_out)
            mlp_out = self.hook_mlp_out(self.dropout_mlp(self.mlp(self.ln_mlp(resid))))
            return self.hook_resid_post(resid + mlp_out)
        attn_out = self.hook_attn_out(self.dropout_attn(self.attn(resid, allowed=allowed)))
        resid = self.hook_resid_mid(self.ln_attn(resid + attn_out))
        mlp_out = self.hook_mlp_out(self.dropout_mlp(self.mlp(resid)))
        return self.hook_resid_post(self.ln_mlp(resid + mlp_out))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the memory, then MLP; returns [batch, pos, d_model]."""

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
        resid = self.hook_resid_pre(x)
        if self.norm_first:
            attn_out = self.hook_attn_out(self.dropout_attn(self.attn(self.ln_attn(resid), allowed=allowed)))
            resid = self.hook_resid_mid(resid + attn_out)
            cross_out = self.dropout_cross(
                self.cross_attn(self.ln_cross(resid), memory, allowed=memory_allowed)
            )
            cross_out = self.hook_cross_attn_out(cross_out)
            resid = self.hook_resid_mid2(resid + cross_out)
            mlp_out = self.hook_mlp_out(self.dropout_mlp(self.mlp(self.ln_mlp(resid))))
            return self.hook_resid_post(resid + mlp_out)
        attn_out = self.hook_attn_out(self.dropout_attn(self.attn(resid, allowed=allowed)))
        resid = self.hook_resid_mid(self.ln_attn(resid + attn_out))
        cross_out = self.dropout_cross(self.cross_attn(resid, memory, allowed=memory_allowed))
        cross_out = self.hook_cross_attn_out(cross_out)
        resid = self.hook_resid_mid2(self.ln_cross(resid + cross_out))
        mlp_out = self.hook_mlp_out(self.dropout_mlp(self.mlp(resid)))
        return self.hook_resid_post(self.ln_mlp(resid + mlp_out))
