"""from_torch / to_torch: all six PyTorch module types round-trip with identical outputs (to 1e-5)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from interpret.errors import ConfigError
from interpret.reference import (
    Decoder,
    DecoderLayer,
    DecoderLM,
    Encoder,
    EncoderClassifier,
    EncoderDecoder,
    EncoderLayer,
    MultiHeadAttention,
    TransformerConfig,
    attention_allowed,
    from_torch,
    padding_allowed,
    to_torch,
)

# nn.Transformer(norm_first=True) itself warns that it cannot use nested tensors; that is PyTorch's business.
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")

ATOL = 1e-5
D, HEADS, D_MLP = 16, 4, 24
SRC_LEN, TGT_LEN = 6, 5
SRC_MASK = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
TGT_MASK = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]])
CAUSAL = torch.ones(TGT_LEN, TGT_LEN, dtype=torch.bool).triu(1)


def _layer_kwargs(norm_first: bool) -> dict[str, object]:
    return {
        "dim_feedforward": D_MLP,
        "dropout": 0.0,
        "batch_first": True,
        "norm_first": norm_first,
        "activation": "gelu",
    }


def _build(kind: str, norm_first: bool) -> nn.Module:
    encoder_layer = nn.TransformerEncoderLayer(D, HEADS, **_layer_kwargs(norm_first))
    decoder_layer = nn.TransformerDecoderLayer(D, HEADS, **_layer_kwargs(norm_first))
    modules: dict[str, Callable[[], nn.Module]] = {
        "mha": lambda: nn.MultiheadAttention(D, HEADS, batch_first=True),
        "encoder_layer": lambda: encoder_layer,
        "decoder_layer": lambda: decoder_layer,
        "encoder": lambda: nn.TransformerEncoder(
            encoder_layer, 2, norm=nn.LayerNorm(D), enable_nested_tensor=False
        ),
        "decoder": lambda: nn.TransformerDecoder(decoder_layer, 2, norm=None),
        "transformer": lambda: nn.Transformer(
            D, HEADS, 2, 3, D_MLP, dropout=0.0, batch_first=True, norm_first=norm_first
        ),
    }
    return modules[kind]().eval()


def _torch_out(kind: str, module: nn.Module, src: Tensor, tgt: Tensor) -> Tensor:
    pad, tgt_pad = SRC_MASK == 0, TGT_MASK == 0
    if kind == "mha":
        return module(tgt, src, src, key_padding_mask=pad)[0]
    if kind in ("encoder_layer", "encoder"):
        return module(src, src_key_padding_mask=pad)
    if kind in ("decoder_layer", "decoder"):
        return module(tgt, src, tgt_mask=CAUSAL, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=pad)
    return module(
        src,
        tgt,
        tgt_mask=CAUSAL,
        src_key_padding_mask=pad,
        tgt_key_padding_mask=tgt_pad,
        memory_key_padding_mask=pad,
    )


def _our_out(kind: str, module: nn.Module, src: Tensor, tgt: Tensor) -> Tensor:
    if kind == "mha":
        return module(tgt, src, allowed=padding_allowed(SRC_MASK, 2, SRC_LEN))
    if kind == "encoder_layer":
        return module(src, attention_allowed(SRC_MASK, batch=2, n_query=SRC_LEN, n_key=SRC_LEN))
    if kind == "decoder_layer":
        allowed = attention_allowed(TGT_MASK, batch=2, n_query=TGT_LEN, n_key=TGT_LEN, causal=True)
        return module(tgt, src, allowed, padding_allowed(SRC_MASK, 2, SRC_LEN))
    if kind == "encoder":
        return module(inputs_embeds=src, attention_mask=SRC_MASK)
    if kind == "decoder":
        return module(inputs_embeds=tgt, attention_mask=TGT_MASK, memory=src, memory_mask=SRC_MASK)
    return module(
        inputs_embeds=src, attention_mask=SRC_MASK, decoder_inputs_embeds=tgt, decoder_attention_mask=TGT_MASK
    )


EXPECTED_TYPES = {
    "mha": MultiHeadAttention,
    "encoder_layer": EncoderLayer,
    "decoder_layer": DecoderLayer,
    "encoder": Encoder,
    "decoder": Decoder,
    "transformer": EncoderDecoder,
}


@pytest.mark.parametrize("kind", list(EXPECTED_TYPES))
@pytest.mark.parametrize("norm_first", [False, True])
def test_round_trip(kind: str, norm_first: bool) -> None:
    theirs = _build(kind, norm_first)
    src, tgt = torch.randn(2, SRC_LEN, D), torch.randn(2, TGT_LEN, D)
    expected = _torch_out(kind, theirs, src, tgt)
    ours = from_torch(theirs)
    assert type(ours) is EXPECTED_TYPES[kind]
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    torch.testing.assert_close(_our_out(kind, ours, src, tgt), expected, atol=ATOL, rtol=0)
    back = to_torch(ours).eval()
    assert type(back) is type(theirs)
    torch.testing.assert_close(_torch_out(kind, back, src, tgt), expected, atol=ATOL, rtol=0)


def test_converted_config_is_inferred() -> None:
    theirs = nn.Transformer(
        D,
        HEADS,
        2,
        3,
        D_MLP,
        dropout=0.0,
        activation="gelu",
        layer_norm_eps=1e-6,
        batch_first=True,
        norm_first=True,
        bias=False,
    )
    config = from_torch(theirs).config
    assert (config.d_model, config.n_heads, config.n_layers, config.n_decoder_layers, config.d_mlp) == (
        D,
        HEADS,
        2,
        3,
        D_MLP,
    )
    assert (config.activation, config.layer_norm_eps, config.norm_first, config.bias, config.final_norm) == (
        "gelu",
        1e-6,
        True,
        False,
        True,
    )
    assert config.vocab_size is None and config.positions == "none"


def test_sequence_first_stack() -> None:
    theirs = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(D, HEADS, D_MLP, dropout=0.0), 2, enable_nested_tensor=False
    ).eval()
    src = torch.randn(SRC_LEN, 2, D)  # PyTorch's [pos, batch, d_model]
    ours = from_torch(theirs)
    torch.testing.assert_close(
        ours(inputs_embeds=src.transpose(0, 1)), theirs(src).transpose(0, 1), atol=ATOL, rtol=0
    )


def _one_line(excinfo: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_unsupported_module_lists_supported_types() -> None:
    with pytest.raises(ConfigError) as excinfo:
        from_torch(nn.Linear(3, 3))
    message = _one_line(excinfo)
    assert "Linear" in message and "nn.MultiheadAttention" in message and "nn.Transformer" in message


@pytest.mark.parametrize(
    ("module", "needle"),
    [
        (nn.MultiheadAttention(D, HEADS, kdim=8, vdim=8), "kdim=8"),
        (nn.MultiheadAttention(D, HEADS, add_bias_kv=True), "add_bias_kv"),
        (nn.TransformerEncoderLayer(D, HEADS, D_MLP, activation=nn.GELU(approximate="tanh")), "activation"),
        (nn.TransformerEncoderLayer(D, HEADS, D_MLP, activation=torch.tanh), "activation"),
    ],
)
def test_unconvertible_settings(module: nn.Module, needle: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        from_torch(module)
    assert needle in _one_line(excinfo)


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        (
            MultiHeadAttention(TransformerConfig(d_model=D, n_heads=HEADS, scoring="additive")),
            "scoring='additive'",
        ),
        (Encoder(TransformerConfig(d_model=D, n_heads=HEADS, positions="none", window=2)), "window=2"),
        (Encoder(TransformerConfig(d_model=D, n_heads=HEADS, positions="learned")), "positions='learned'"),
        (
            Encoder(TransformerConfig(d_model=D, n_heads=HEADS, positions="none", vocab_size=9)),
            "vocab_size=9",
        ),
        (EncoderClassifier(TransformerConfig(d_model=D, n_heads=HEADS)), "EncoderClassifier"),
        (DecoderLM(TransformerConfig(d_model=D, n_heads=HEADS, vocab_size=9)), "DecoderLM"),
    ],
)
def test_to_torch_refuses_what_torch_cannot_express(model: nn.Module, needle: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        to_torch(model)
    assert needle in _one_line(excinfo)
