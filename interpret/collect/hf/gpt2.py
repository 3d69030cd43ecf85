"""Adapter for GPT-2: `h.{i}` with `attn` (c_attn, c_proj) and `mlp` (c_fc, c_proj).

With `reorder_and_upcast_attn=True` and the eager kernel, GPT-2 computes attention without the kernel
registry; attention sites then never fire (load it with attn_implementation="sdpa" instead).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from interpret.collect.hf.adapter import HFAdapter, base_model, config_int
from interpret.collect.hf.layout import AttentionLayout, StackLayout, build_capturable, run_model
from interpret.collect.sites import Capturable


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a GPT-2 model (any task head); sites as in `layout`."""
    config = model.config
    n_heads = config_int(config, "n_head", "num_attention_heads")
    d_model = config_int(config, "n_embd", "hidden_size")
    stack = StackLayout(
        prefix="",
        blocks="h",
        side="main",
        attentions=(AttentionLayout(kernel="attn", out_proj="attn.c_proj"),),
        mlp_out="mlp",
        mlp_down="mlp.c_proj",
        n_heads=n_heads,
        d_head=d_model // n_heads,
        d_model=d_model,
        d_mlp=config_int(config, "n_inner", default=4 * d_model),
    )
    return build_capturable(
        model,
        base_model(model),
        [stack],
        kind="decoder",
        run=partial(run_model, model, disable_cache=True),
        max_positions=config_int(config, "n_positions", "max_position_embeddings"),
        adapter="gpt2",
    )


ADAPTER = HFAdapter(model_types=("gpt2",), build=build)
