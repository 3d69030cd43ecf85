"""Adapter for BERT and RoBERTa (post-norm encoders): `encoder.layer.{i}` with `attention.self`."""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from interpret.collect.hf.adapter import HFAdapter, base_model, config_int
from interpret.collect.hf.layout import AttentionLayout, StackLayout, build_capturable, run_model
from interpret.collect.sites import Capturable


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a BERT or RoBERTa model (any task head); sites as in `layout`."""
    config = model.config
    n_heads = config_int(config, "num_attention_heads")
    d_model = config_int(config, "hidden_size")
    stack = StackLayout(
        prefix="",
        blocks="encoder.layer",
        side="main",
        attentions=(AttentionLayout(kernel="attention.self", out_proj="attention.output.dense"),),
        mlp_out="output.dense",  # before the dropout and the post-norm residual add
        mlp_down="output.dense",
        n_heads=n_heads,
        d_head=d_model // n_heads,
        d_model=d_model,
        d_mlp=config_int(config, "intermediate_size"),
    )
    max_positions = config_int(config, "max_position_embeddings")
    if config.model_type == "roberta":  # positions start after the padding index
        max_positions -= config_int(config, "pad_token_id", default=1) + 1
    decoder = bool(getattr(config, "is_decoder", False))
    return build_capturable(
        model,
        base_model(model),
        [stack],
        kind="decoder" if decoder else "encoder",
        run=partial(run_model, model, disable_cache=decoder),
        max_positions=max_positions,
        adapter="bert",
    )


ADAPTER = HFAdapter(model_types=("bert", "roberta"), build=build)
