"""Convert PyTorch's built-in Transformer modules to the reference modules and back, weights included.

Our modules are always batch-first: a module converted from one with batch_first=False takes
[batch, pos, d_model] where the original took [pos, batch, d_model] (transpose the input, not the weights),
and `to_torch` builds batch_first=True modules. PyTorch passes masks at call time; ours take an
attention_mask [batch, pos] (1 real, 0 pad; the opposite of key_padding_mask) and a decoder's causal
self-attention is part of its config (`causal`), where PyTorch needs tgt_mask or tgt_is_causal=True.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from interpret.errors import ConfigError
from interpret.reference.attention import MultiHeadAttention
from interpret.reference.config import TransformerConfig
from interpret.reference.layers import DecoderLayer, EncoderLayer
from interpret.reference.models import Decoder, Encoder, EncoderDecoder

# A converted stack has no position table, so its only length limit is this generous default.
CONVERTED_MAX_POSITIONS = 65536

# each PyTorch class and ours, in the order the messages name them
_CLASSES: tuple[tuple[type[nn.Module], type[nn.Module]], ...] = (
    (nn.MultiheadAttention, MultiHeadAttention),
    (nn.TransformerEncoderLayer, EncoderLayer),
    (nn.TransformerDecoderLayer, DecoderLayer),
    (nn.TransformerEncoder, Encoder),
    (nn.TransformerDecoder, Decoder),
    (nn.Transformer, EncoderDecoder),
)
_TORCH_NAMES = ", ".join(f"nn.{theirs.__name__}" for theirs, _ in _CLASSES)
_OUR_NAMES = ", ".join(ours.__name__ for _, ours in _CLASSES)


def from_torch(module: nn.Module, *, causal: bool = True) -> nn.Module:
    """Return our module with the same weights and outputs as a PyTorch Transformer module.

    nn.MultiheadAttention -> MultiHeadAttention, nn.TransformerEncoderLayer -> EncoderLayer,
    nn.TransformerDecoderLayer -> DecoderLayer, nn.TransformerEncoder -> Encoder,
    nn.TransformerDecoder -> Decoder, nn.Transformer -> EncoderDecoder (final norms kept).
    causal: whether the decoder's self-attention is causal (what PyTorch gets from tgt_mask).
    """
    ours_class = next((ours for theirs, ours in _CLASSES if isinstance(module, theirs)), None)
    if ours_class is None:
        raise ConfigError(f"cannot convert {type(module).__name__}; from_torch supports {_TORCH_NAMES}.")
    if isinstance(module, nn.MultiheadAttention):
        fields = _attention_fields(module)
    elif isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        fields = _layer_fields(module)
    elif isinstance(module, nn.Transformer):
        fields = _transformer_fields(module)
    else:
        fields = _stack_fields(module.layers, module.norm)
        fields["n_decoder_layers"] = fields["n_layers"]
    # an encoder's or a lone attention's config keeps the default causal=True: only a decoder reads it
    decoder = isinstance(module, (nn.TransformerDecoderLayer, nn.TransformerDecoder, nn.Transformer))
    ours = ours_class(_config(fields, causal if decoder else True)).to(*_device_dtype(module))
    _transfer(_pairs(ours, module), to_ours=True)
    ours.train(module.training)
    return ours


def to_torch(module: nn.Module) -> nn.Module:
    """Return the PyTorch module (batch_first=True) with the same weights and outputs as our module.

    Refuses what PyTorch cannot express: scoring other than "scaled_dot", a window, position embeddings or
    token embeddings, and the classifier / language-model heads.
    """
    if not isinstance(module, tuple(ours for _, ours in _CLASSES)):
        raise ConfigError(
            f"{type(module).__name__} has no PyTorch equivalent; to_torch converts {_OUR_NAMES}."
        )
    config: TransformerConfig = module.config
    _check_expressible(config, stack=isinstance(module, (Encoder, Decoder, EncoderDecoder)))
    theirs: nn.Module
    if isinstance(module, MultiHeadAttention):
        theirs = nn.MultiheadAttention(
            config.d_model, config.n_heads, dropout=config.dropout, bias=config.bias, batch_first=True
        )
    elif isinstance(module, EncoderLayer):
        theirs = nn.TransformerEncoderLayer(**_torch_layer_kwargs(config))
    elif isinstance(module, DecoderLayer):
        theirs = nn.TransformerDecoderLayer(**_torch_layer_kwargs(config))
    elif isinstance(module, (Encoder, Decoder)):
        theirs = _torch_stack(config, decoder=isinstance(module, Decoder))
    else:
        theirs = nn.Transformer(
            config.d_model,
            config.n_heads,
            dropout=config.dropout,
            activation=config.activation,
            custom_encoder=_torch_stack(config, decoder=False),
            custom_decoder=_torch_stack(config, decoder=True),
            layer_norm_eps=config.layer_norm_eps,
            batch_first=True,
            norm_first=config.norm_first,
            bias=config.bias,
        )
    theirs = theirs.to(*_device_dtype(module))
    _transfer(_pairs(module, theirs), to_ours=False)
    theirs.train(module.training)
    return theirs


# --- config inference ------------------------------------------------------------------------------------


def _config(fields: dict[str, Any], causal: bool = True) -> TransformerConfig:
    return TransformerConfig(
        **fields, vocab_size=None, positions="none", max_positions=CONVERTED_MAX_POSITIONS, causal=causal
    )


def _transformer_fields(module: nn.Transformer) -> dict[str, Any]:
    encoder, decoder = module.encoder, module.decoder
    if not isinstance(encoder, nn.TransformerEncoder) or not isinstance(decoder, nn.TransformerDecoder):
        raise ConfigError(
            f"nn.Transformer with a custom {type(encoder).__name__} / {type(decoder).__name__} cannot be"
            " converted; use nn.TransformerEncoder and nn.TransformerDecoder stacks."
        )
    enc_fields = _stack_fields(encoder.layers, encoder.norm)
    dec_fields = _stack_fields(decoder.layers, decoder.norm)
    if {**enc_fields, "n_layers": 0} != {**dec_fields, "n_layers": 0}:  # alike but for their number of layers
        raise ConfigError(
            f"nn.Transformer's encoder {enc_fields} and decoder {dec_fields} differ beyond the number of"
            " layers; convert the two stacks separately."
        )
    return {**enc_fields, "n_decoder_layers": dec_fields["n_layers"]}


def _attention_fields(mha: nn.MultiheadAttention) -> dict[str, Any]:
    if not mha._qkv_same_embed_dim:
        raise ConfigError(
            f"nn.MultiheadAttention with kdim={mha.kdim}, vdim={mha.vdim} != embed_dim={mha.embed_dim}"
            " cannot be converted; only kdim = vdim = embed_dim is supported."
        )
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ConfigError(
            "nn.MultiheadAttention with add_bias_kv=True or add_zero_attn=True cannot be converted; build it"
            " without them."
        )
    return {
        "d_model": mha.embed_dim,
        "n_heads": mha.num_heads,
        "bias": mha.in_proj_bias is not None,
        "dropout": float(mha.dropout),
    }


def _activation(layer: nn.Module) -> str:
    function = layer.activation
    if function is F.relu or isinstance(function, nn.ReLU):
        return "relu"
    if function is F.gelu or (isinstance(function, nn.GELU) and function.approximate == "none"):
        return "gelu"
    raise ConfigError(
        f"activation {function!r} of {type(layer).__name__} has no equivalent; use 'relu' or 'gelu'."
    )


def _layer_fields(layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> dict[str, Any]:
    norms = [layer.norm1, layer.norm2] + (
        [layer.norm3] if isinstance(layer, nn.TransformerDecoderLayer) else []
    )
    eps = {norm.eps for norm in norms}
    if len(eps) != 1 or not all(norm.elementwise_affine for norm in norms):
        raise ConfigError(
            f"{type(layer).__name__} has LayerNorms with eps {sorted(eps)} or without affine weights;"
            " all must share one eps and have weights."
        )
    return {
        **_attention_fields(layer.self_attn),
        "d_mlp": layer.linear1.out_features,
        "activation": _activation(layer),
        "norm_first": bool(layer.norm_first),
        "layer_norm_eps": float(eps.pop()),
        "dropout": float(layer.dropout.p),
    }


def _stack_fields(layers: nn.ModuleList, norm: nn.Module | None) -> dict[str, Any]:
    per_layer = [_layer_fields(layer) for layer in layers]
    if any(fields != per_layer[0] for fields in per_layer):
        raise ConfigError("the stack's layers differ in size or settings; every layer must be built alike.")
    fields = {**per_layer[0], "n_layers": len(per_layer), "final_norm": norm is not None}
    if norm is not None and (
        not isinstance(norm, nn.LayerNorm)
        or norm.eps != fields["layer_norm_eps"]
        or (norm.bias is not None) != fields["bias"]
    ):
        raise ConfigError(
            f"the stack's final norm {norm!r} must be nn.LayerNorm with the layers' eps"
            f" {fields['layer_norm_eps']} and bias={fields['bias']}."
        )
    return fields


def _check_expressible(config: TransformerConfig, *, stack: bool) -> None:
    problems = []
    if config.scoring != "scaled_dot":
        problems.append(f"scoring={config.scoring!r} (PyTorch has only 'scaled_dot')")
    if config.window is not None:
        problems.append(f"window={config.window} (PyTorch has no local attention)")
    if stack and config.positions != "none":
        problems.append(f"positions={config.positions!r} (PyTorch's stacks add no positions; use 'none')")
    if stack and config.vocab_size is not None:
        problems.append(f"vocab_size={config.vocab_size} (PyTorch's stacks have no embeddings; use None)")
    if problems:
        raise ConfigError(f"no PyTorch equivalent for {'; '.join(problems)}.")


# --- building PyTorch modules ----------------------------------------------------------------------------


def _torch_layer_kwargs(config: TransformerConfig) -> dict[str, Any]:
    return {
        "d_model": config.d_model,
        "nhead": config.n_heads,
        "dim_feedforward": config.mlp_width,
        "dropout": config.dropout,
        "activation": config.activation,
        "layer_norm_eps": config.layer_norm_eps,
        "batch_first": True,
        "norm_first": config.norm_first,
        "bias": config.bias,
    }


def _torch_stack(config: TransformerConfig, *, decoder: bool) -> nn.TransformerEncoder | nn.TransformerDecoder:
    norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias) if config.final_norm else None
    if decoder:
        layer = nn.TransformerDecoderLayer(**_torch_layer_kwargs(config))
        return nn.TransformerDecoder(layer, config.n_decoder_blocks, norm=norm)
    # No nested tensors: they would return zeros at padded positions in inference mode, unlike ours.
    layer = nn.TransformerEncoderLayer(**_torch_layer_kwargs(config))
    return nn.TransformerEncoder(layer, config.n_layers, norm=norm, enable_nested_tensor=False)


# --- weights ---------------------------------------------------------------------------------------------

Pair = tuple[Tensor | None, Tensor | None]


def _pairs(ours: nn.Module, theirs: nn.Module) -> list[Pair]:
    """Return (our tensor, PyTorch's) for every weight and bias of `ours` and its PyTorch twin `theirs`."""
    if isinstance(ours, EncoderDecoder):
        return _pairs(ours.encoder, theirs.encoder) + _pairs(ours.decoder, theirs.decoder)
    if isinstance(ours, (Encoder, Decoder)):
        pairs = [pair for block, layer in zip(ours.blocks, theirs.layers, strict=True) for pair in _pairs(block, layer)]
        return pairs + (_linear_pairs(ours.ln_final, theirs.norm) if theirs.norm is not None else [])
    if isinstance(ours, MultiHeadAttention):
        return _attention_pairs(ours, theirs)
    # a layer: self-attention, (cross-attention,) its norms norm1, norm2(, norm3) in forward order, the MLP
    cross = isinstance(ours, DecoderLayer)
    pairs = _attention_pairs(ours.attn, theirs.self_attn)
    pairs += _attention_pairs(ours.cross_attn, theirs.multihead_attn) if cross else []
    norms = (ours.ln_attn, ours.ln_cross, ours.ln_mlp) if cross else (ours.ln_attn, ours.ln_mlp)
    for index, norm in enumerate(norms, 1):
        pairs += _linear_pairs(norm, getattr(theirs, f"norm{index}"))
    return pairs + _linear_pairs(ours.mlp.fc_in, theirs.linear1) + _linear_pairs(ours.mlp.fc_out, theirs.linear2)


def _linear_pairs(ours: nn.Module, theirs: nn.Module) -> list[Pair]:
    return [(ours.weight, theirs.weight), (ours.bias, theirs.bias)]


def _attention_pairs(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> list[Pair]:
    bias = theirs.in_proj_bias  # PyTorch's q, k, v are stacked as our packed in_proj: in thirds
    stacked = zip(theirs.in_proj_weight.chunk(3), (None,) * 3 if bias is None else bias.chunk(3), strict=True)
    pairs = [
        pair for (w, b), (w_t, b_t) in zip(ours.projections(), stacked, strict=True) for pair in ((w, w_t), (b, b_t))
    ]
    return pairs + _linear_pairs(ours.out_proj, theirs.out_proj)


def _transfer(pairs: list[Pair], *, to_ours: bool) -> None:
    """Copy each pair's tensor across (PyTorch -> ours when `to_ours`), in place."""
    with torch.no_grad():
        for mine, theirs in pairs:
            if mine is None and theirs is None:
                continue
            if mine is None or theirs is None or mine.shape != theirs.shape:
                raise ConfigError(
                    "weights do not line up (a bias on one side only, or a size mismatch); rebuild the module"
                    " with matching bias and sizes."
                )
            (mine if to_ours else theirs).copy_(theirs if to_ours else mine)


def _device_dtype(module: nn.Module) -> tuple[torch.device, torch.dtype]:
    for param in module.parameters():
        return param.device, param.dtype
    return torch.device("cpu"), torch.float32
