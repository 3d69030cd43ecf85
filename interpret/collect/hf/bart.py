"""Adapter for BART (encoder-decoder, learned positions).

`encoder.layers.{i}.self_attn`; `decoder.layers.{i}.self_attn` (causal) and `encoder_attn` (cross
attention); the MLP is `fc1`, `fc2` directly on the layer.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from interpret.collect.hf.adapter import HFAdapter, base_model, config_int
from interpret.collect.hf.layout import AttentionLayout, StackLayout, build_capturable, run_model
from interpret.collect.sites import Capturable, Side


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a BART model (BartModel, BartForConditionalGeneration, ...)."""
    config = model.config
    d_model = config_int(config, "d_model")
    self_attention = AttentionLayout(kernel="self_attn", out_proj="self_attn.out_proj")
    stacks = []
    sides: tuple[tuple[Side, str], ...] = (("main", "encoder"), ("decoder", "decoder"))
    for side, prefix in sides:
        n_heads = config_int(config, f"{prefix}_attention_heads")
        attentions = (self_attention,)
        if prefix == "decoder":
            attentions += (AttentionLayout(kernel="encoder_attn", out_proj="encoder_attn.out_proj", name="cross_attn"),)
        stacks.append(
            StackLayout(
                prefix=f"{prefix}.",
                blocks=f"{prefix}.layers",
                side=side,
                attentions=attentions,
                mlp_out="fc2",
                mlp_down="fc2",
                n_heads=n_heads,
                d_head=d_model // n_heads,
                d_model=d_model,
                d_mlp=config_int(config, f"{prefix}_ffn_dim"),
            )
        )
    return build_capturable(
        model,
        base_model(model),
        stacks,
        kind="encoder-decoder",
        run=partial(run_model, model, disable_cache=True),
        max_positions=config_int(config, "max_position_embeddings"),
        adapter="bart",
    )


ADAPTER = HFAdapter(model_types=("bart",), build=build)
