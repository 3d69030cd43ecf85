"""Adapter for DistilBERT: `transformer.layer.{i}` with `attention` (q_lin, k_lin, v_lin, out_lin), `ffn`."""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from interpret.collect.hf.adapter import HFAdapter, base_model, config_int
from interpret.collect.hf.layout import AttentionLayout, StackLayout, build_capturable, run_model
from interpret.collect.sites import Capturable


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a DistilBERT model (any task head); sites as in `layout`."""
    config = model.config
    n_heads = config_int(config, "n_heads")
    d_model = config_int(config, "dim")
    stack = StackLayout(
        prefix="",
        blocks="transformer.layer",
        side="main",
        attentions=(AttentionLayout(kernel="attention", out_proj="attention.out_lin"),),
        mlp_out="ffn",
        mlp_down="ffn.lin2",
        n_heads=n_heads,
        d_head=d_model // n_heads,
        d_model=d_model,
        d_mlp=config_int(config, "hidden_dim"),
    )
    return build_capturable(
        model,
        base_model(model),
        [stack],
        kind="encoder",
        run=partial(run_model, model, disable_cache=False),
        max_positions=config_int(config, "max_position_embeddings"),
        adapter="distilbert",
    )


ADAPTER = HFAdapter(model_types=("distilbert",), build=build)
