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
from interpret.reference.layers import MLP, DecoderLayer, EncoderLayer
from interpret.reference.models import Decoder, Encoder, EncoderDecoder

# A converted stack has no position table, so its only length limit is this generous default.
CONVERTED_MAX_POSITIONS = 65536

Ours = MultiHeadAttention | EncoderLayer | DecoderLayer | Encoder | Decoder | EncoderDecoder
Theirs = (
    nn.MultiheadAttention
    | nn.TransformerEncoderLayer
    | nn.TransformerDecoderLayer
    | nn.TransformerEncoder
    | nn.TransformerDecoder
    | nn.Transformer
)
_TORCH_NAMES = (
    "nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,"
    " nn.TransformerDecoder, nn.Transformer"
)
_OUR_NAMES = "MultiHeadAttention, EncoderLayer, DecoderLayer, Encoder, Decoder, EncoderDecoder"


def from_torch(module: nn.Module, *, causal: bool = True) -> Ours:
    """Return our module with the same weights and outputs as a PyTorch Transformer module.

    nn.MultiheadAttention -> MultiHeadAttention, nn.TransformerEncoderLayer -> EncoderLayer,
    nn.TransformerDecoderLayer -> DecoderLayer, nn.TransformerEncoder -> Encoder,
    nn.TransformerDecoder -> Decoder, nn.Transformer -> EncoderDecoder (final norms kept).
    causal: whether the decoder's self-attention is causal (what PyTorch gets from tgt_mask).
    """
    place = _device_dtype(module)
    ours: Ours
    if isinstance(module, nn.MultiheadAttention):
        ours = MultiHeadAttention(_config(_attention_fields(module))).to(*place)
        pairs = _attention_pairs(ours, module)
    elif isinstance(module, nn.TransformerEncoderLayer):
        ours = EncoderLayer(_config(_layer_fields(module))).to(*place)
        pairs = _encoder_layer_pairs(ours, module)
    elif isinstance(module, nn.TransformerDecoderLayer):
        ours = DecoderLayer(_config(_layer_fields(module), causal=causal)).to(*place)
        pairs = _decoder_layer_pairs(ours, module)
    elif isinstance(module, nn.TransformerEncoder):
        ours = Encoder(_config(_stack_fields(module.layers, module.norm))).to(*place)
        pairs = _stack_pairs(ours, module.layers, module.norm)
    elif isinstance(module, nn.TransformerDecoder):
        fields = _stack_fields(module.layers, module.norm)
        ours = Decoder(_config({**fields, "n_decoder_layers": fields["n_layers"]}, causal=causal)).to(*place)
        pairs = _stack_pairs(ours, module.layers, module.norm)
    elif isinstance(module, nn.Transformer):
        ours = EncoderDecoder(_transformer_config(module, causal)).to(*place)
        encoder, decoder = module.encoder, module.decoder
        pairs = _stack_pairs(ours.encoder, encoder.layers, encoder.norm)
        pairs += _stack_pairs(ours.decoder, decoder.layers, decoder.norm)
    else:
        raise ConfigError(f"cannot convert {type(module).__name__}; from_torch supports {_TORCH_NAMES}.")
    _transfer(pairs, to_ours=True)
    ours.train(module.training)
    return ours


def to_torch(module: nn.Module) -> Theirs:
    """Return the PyTorch module (batch_first=True) with the same weights and outputs as our module.

    Refuses what PyTorch cannot express: scoring other than "scaled_dot", a window, position embeddings or
    token embeddings, and the classifier / language-model heads.
    """
    if not isinstance(
        module, (MultiHeadAttention, EncoderLayer, DecoderLayer, Encoder, Decoder, EncoderDecoder)
    ):
        raise ConfigError(
            f"{type(module).__name__} has no PyTorch equivalent; to_torch converts {_OUR_NAMES}."
        )
    config: TransformerConfig = module.config
    _check_expressible(config, stack=isinstance(module, (Encoder, Decoder, EncoderDecoder)))
    place = _device_dtype(module)
    theirs: Theirs
    if isinstance(module, MultiHeadAttention):
        theirs = nn.MultiheadAttention(
            config.d_model, config.n_heads, dropout=config.dropout, bias=config.bias, batch_first=True
        ).to(*place)
        pairs = _attention_pairs(module, theirs)
    elif isinstance(module, EncoderLayer):
        theirs = nn.TransformerEncoderLayer(**_torch_layer_kwargs(config)).to(*place)
        pairs = _encoder_layer_pairs(module, theirs)
    elif isinstance(module, DecoderLayer):
        theirs = nn.TransformerDecoderLayer(**_torch_layer_kwargs(config)).to(*place)
        pairs = _decoder_layer_pairs(module, theirs)
    elif isinstance(module, Encoder):
        theirs = _torch_encoder(config).to(*place)
        pairs = _stack_pairs(module, theirs.layers, theirs.norm)
    elif isinstance(module, Decoder):
        theirs = _torch_decoder(config).to(*place)
        pairs = _stack_pairs(module, theirs.layers, theirs.norm)
    else:
        encoder, decoder = _torch_encoder(config), _torch_decoder(config)
        theirs = nn.Transformer(
            config.d_model,
            config.n_heads,
            dropout=config.dropout,
            activation=config.activation,
            custom_encoder=encoder,
            custom_decoder=decoder,
            layer_norm_eps=config.layer_norm_eps,
            batch_first=True,
            norm_first=config.norm_first,
            bias=config.bias,
        ).to(*place)
        pairs = _stack_pairs(module.encoder, encoder.layers, encoder.norm)
        pairs += _stack_pairs(module.decoder, decoder.layers, decoder.norm)
    _transfer(pairs, to_ours=False)
    theirs.train(module.training)
    return theirs


# --- config inference ------------------------------------------------------------------------------------


def _config(fields: dict[str, Any], causal: bool = True) -> TransformerConfig:
    return TransformerConfig(
        **fields, vocab_size=None, positions="none", max_positions=CONVERTED_MAX_POSITIONS, causal=causal
    )


def _transformer_config(module: nn.Transformer, causal: bool) -> TransformerConfig:
    encoder, decoder = module.encoder, module.decoder
    if not isinstance(encoder, nn.TransformerEncoder) or not isinstance(decoder, nn.TransformerDecoder):
        raise ConfigError(
            f"nn.Transformer with a custom {type(encoder).__name__} / {type(decoder).__name__} cannot be"
            " converted; use nn.TransformerEncoder and nn.TransformerDecoder stacks."
        )
    enc_fields = _stack_fields(encoder.layers, encoder.norm)
    dec_fields = _stack_fields(decoder.layers, decoder.norm)
    if _without(enc_fields, "n_layers") != _without(dec_fields, "n_layers"):
        raise ConfigError(
            f"nn.Transformer's encoder {enc_fields} and decoder {dec_fields} differ beyond the number of"
            " layers; convert the two stacks separately."
        )
    return _config({**enc_fields, "n_decoder_layers": dec_fields["n_layers"]}, causal=causal)


def _without(fields: dict[str, Any], key: str) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if name != key}


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


def _torch_norm(config: TransformerConfig) -> nn.LayerNorm | None:
    if not config.final_norm:
        return None
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)


def _torch_encoder(config: TransformerConfig) -> nn.TransformerEncoder:
    # No nested tensors: they would return zeros at padded positions in inference mode, unlike ours.
    return nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**_torch_layer_kwargs(config)),
        config.n_layers,
        norm=_torch_norm(config),
        enable_nested_tensor=False,
    )


def _torch_decoder(config: TransformerConfig) -> nn.TransformerDecoder:
    return nn.TransformerDecoder(
        nn.TransformerDecoderLayer(**_torch_layer_kwargs(config)),
        config.n_decoder_blocks,
        norm=_torch_norm(config),
    )


# --- weights ---------------------------------------------------------------------------------------------

Pair = tuple[Tensor | None, Tensor | None]


def _linear_pairs(ours: nn.Module, theirs: nn.Module) -> list[Pair]:
    return [(ours.weight, theirs.weight), (ours.bias, theirs.bias)]


def _attention_pairs(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> list[Pair]:
    pairs: list[Pair]
    if ours.config.packed_qkv:
        pairs = [(ours.in_proj.weight, theirs.in_proj_weight), (ours.in_proj.bias, theirs.in_proj_bias)]
    else:
        d_model = ours.config.d_model
        pairs = []
        for index, proj in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
            rows = slice(index * d_model, (index + 1) * d_model)
            bias = theirs.in_proj_bias
            pairs += [
                (proj.weight, theirs.in_proj_weight[rows]),
                (proj.bias, None if bias is None else bias[rows]),
            ]
    return pairs + _linear_pairs(ours.out_proj, theirs.out_proj)


def _mlp_pairs(ours: MLP, theirs: nn.Module) -> list[Pair]:
    return _linear_pairs(ours.fc_in, theirs.linear1) + _linear_pairs(ours.fc_out, theirs.linear2)


def _encoder_layer_pairs(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> list[Pair]:
    return (
        _attention_pairs(ours.attn, theirs.self_attn)
        + _linear_pairs(ours.ln_attn, theirs.norm1)
        + _linear_pairs(ours.ln_mlp, theirs.norm2)
        + _mlp_pairs(ours.mlp, theirs)
    )


def _decoder_layer_pairs(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> list[Pair]:
    return (
        _attention_pairs(ours.attn, theirs.self_attn)
        + _attention_pairs(ours.cross_attn, theirs.multihead_attn)
        + _linear_pairs(ours.ln_attn, theirs.norm1)
        + _linear_pairs(ours.ln_cross, theirs.norm2)
        + _linear_pairs(ours.ln_mlp, theirs.norm3)
        + _mlp_pairs(ours.mlp, theirs)
    )


def _stack_pairs(ours: Encoder | Decoder, layers: nn.ModuleList, norm: nn.Module | None) -> list[Pair]:
    pairs: list[Pair] = []
    for block, layer in zip(ours.blocks, layers, strict=True):
        if isinstance(block, DecoderLayer):
            pairs += _decoder_layer_pairs(block, layer)
        else:
            pairs += _encoder_layer_pairs(block, layer)
    if norm is not None:
        pairs += _linear_pairs(ours.ln_final, norm)
    return pairs


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
