"""Our encoder and decoder layers against nn.TransformerEncoderLayer / nn.TransformerDecoderLayer."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from interpret.hooks import stamp_names
from interpret.reference import DecoderLayer, EncoderLayer, attention_allowed, from_torch, padding_allowed

ATOL = 1e-5
D_MODEL, HEADS, D_MLP = 16, 4, 32


def padding(lengths: list[int], pos: int) -> Tensor:
    return (torch.arange(pos)[None, :] < torch.tensor(lengths)[:, None]).long()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first: bool, activation: str) -> None:
    theirs = nn.TransformerEncoderLayer(
        D_MODEL, HEADS, D_MLP, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, EncoderLayer)
    x, mask = torch.randn(3, 6, D_MODEL), padding([6, 4, 1], 6)
    expected = theirs(x, src_key_padding_mask=mask == 0)
    allowed = attention_allowed(mask, batch=3, n_query=6, n_key=6)
    torch.testing.assert_close(ours(x, allowed), expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first: bool) -> None:
    theirs = nn.TransformerDecoderLayer(
        D_MODEL, HEADS, D_MLP, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, DecoderLayer)
    target, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 7, D_MODEL)
    target_mask, memory_mask = padding([5, 3], 5), padding([7, 2], 7)
    expected = theirs(
        target,
        memory,
        tgt_mask=torch.ones(5, 5, dtype=torch.bool).triu(1),
        tgt_key_padding_mask=target_mask == 0,
        memory_key_padding_mask=memory_mask == 0,
    )
    allowed = attention_allowed(target_mask, batch=2, n_query=5, n_key=5, causal=True)
    out = ours(target, memory, allowed, padding_allowed(memory_mask, 2, 7))
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


def test_sequence_first_torch_layer_is_batch_first_here() -> None:
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_MLP, dropout=0.0, batch_first=False).eval()
    ours = from_torch(theirs)
    x = torch.randn(4, 2, D_MODEL)  # [pos, batch, d_model] for PyTorch
    torch.testing.assert_close(ours(x.transpose(0, 1)), theirs(x).transpose(0, 1), atol=ATOL, rtol=0)


def test_layer_hook_names_in_forward_order() -> None:
    encoder_layer = from_torch(nn.TransformerEncoderLayer(D_MODEL, HEADS, D_MLP, batch_first=True))
    assert list(stamp_names(encoder_layer)) == [
        "hook_resid_pre",
        "attn.hook_q",
        "attn.hook_k",
        "attn.hook_v",
        "attn.hook_attn_scores",
        "attn.hook_pattern",
        "attn.hook_lse",
        "attn.hook_z",
        "hook_attn_out",
        "hook_resid_mid",
        "mlp.hook_pre",
        "mlp.hook_post",
        "hook_mlp_out",
        "hook_resid_post",
    ]
    decoder_layer = from_torch(nn.TransformerDecoderLayer(D_MODEL, HEADS, D_MLP, batch_first=True))
    names = list(stamp_names(decoder_layer))
    assert names[:9] == [
        "hook_resid_pre",
        "attn.hook_q",
        "attn.hook_k",
        "attn.hook_v",
        "attn.hook_attn_scores",
        "attn.hook_pattern",
        "attn.hook_lse",
        "attn.hook_z",
        "hook_attn_out",
    ]
    assert names[9:] == [
        "hook_resid_mid",
        "cross_attn.hook_q",
        "cross_attn.hook_k",
        "cross_attn.hook_v",
        "cross_attn.hook_attn_scores",
        "cross_attn.hook_pattern",
        "cross_attn.hook_lse",
        "cross_attn.hook_z",
        "hook_cross_attn_out",
        "hook_resid_mid2",
        "mlp.hook_pre",
        "mlp.hook_post",
        "hook_mlp_out",
        "hook_resid_post",
    ]


def test_residual_hooks_add_up_in_pre_norm() -> None:
    layer = from_torch(
        nn.TransformerEncoderLayer(D_MODEL, HEADS, D_MLP, dropout=0.0, batch_first=True, norm_first=True)
    ).eval()
    seen: dict[str, Tensor] = {}
    handles = [
        point.register_forward_hook(lambda mod, args, out, name=name: seen.__setitem__(name, out))
        for name, point in stamp_names(layer).items()
    ]
    try:
        layer(torch.randn(2, 3, D_MODEL))
    finally:
        for handle in handles:
            handle.remove()
    torch.testing.assert_close(seen["hook_resid_mid"], seen["hook_resid_pre"] + seen["hook_attn_out"])
    torch.testing.assert_close(seen["hook_resid_post"], seen["hook_resid_mid"] + seen["hook_mlp_out"])
    assert seen["mlp.hook_post"].shape == (2, 3, D_MLP)
    assert (seen["mlp.hook_post"] == torch.relu(seen["mlp.hook_pre"])).all()
