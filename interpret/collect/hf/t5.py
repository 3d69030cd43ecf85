"""Adapter for T5 (encoder-decoder, relative position bias, unscaled scores).

`encoder.block.{i}.layer.0.SelfAttention`; `decoder.block.{i}.layer.0.SelfAttention` (causal) and
`layer.1.EncDecAttention` (cross attention). T5 passes `scaling=1.0` and its position bias to the kernel;
both enter the recomputed scores exactly as they entered the kernel.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from interpret.collect.hf.adapter import HFAdapter, base_model, config_int
from interpret.collect.hf.layout import AttentionLayout, StackLayout, build_capturable, run_model
from interpret.collect.sites import Capturable
from interpret.errors import UnsupportedModelError


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a T5 model with a decoder (T5Model, T5ForConditionalGeneration)."""
    config = model.config
    root = base_model(model)
    if not isinstance(getattr(root, "decoder", None), nn.Module):
        raise UnsupportedModelError(
            f"{type(model).__name__} has no decoder; the T5 adapter serves encoder-decoder T5 models,"
            " so load T5ForConditionalGeneration or T5Model."
        )
    sizes = {
        "n_heads": config_int(config, "num_heads"),
        "d_head": config_int(config, "d_kv"),
        "d_model": config_int(config, "d_model"),
        "d_mlp": config_int(config, "d_ff"),
    }
    self_attention = AttentionLayout(kernel="layer.0.SelfAttention", out_proj="layer.0.SelfAttention.o")
    encoder = StackLayout(
        prefix="encoder.",
        blocks="encoder.block",
        side="main",
        attentions=(self_attention,),
        mlp_out="layer.1.DenseReluDense",
        mlp_down="layer.1.DenseReluDense.wo",
        **sizes,
    )
    cross = AttentionLayout(kernel="layer.1.EncDecAttention", out_proj="layer.1.EncDecAttention.o", name="cross_attn")
    decoder = StackLayout(
        prefix="decoder.",
        blocks="decoder.block",
        side="decoder",
        attentions=(self_attention, cross),
        mlp_out="layer.2.DenseReluDense",
        mlp_down="layer.2.DenseReluDense.wo",
        **sizes,
    )
    return build_capturable(
        model,
        root,
        [encoder, decoder],
        kind="encoder-decoder",
        run=partial(run_model, model, disable_cache=True),
        max_positions=None,  # relative positions: no fixed limit beyond the tokenizer's
        adapter="t5",
    )


ADAPTER = HFAdapter(model_types=("t5",), build=build)
