"""Adapter for Llama-style decoders (Llama, Qwen2, Mistral): rotary embeddings, grouped-query attention.

`layers.{i}.self_attn` (q_proj, k_proj, v_proj, o_proj) and `mlp` (gate_proj, up_proj, down_proj). The
query and key are recorded where they enter the kernel, after the rotary embedding, and the shared key and
value heads are repeated per query head, so `hook_k[..., h, :]` is the key query head `h` attended with.
Sliding-window layers (Mistral, Qwen2) are masked as the model masks them.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from interpret.collect.hf.adapter import HFAdapter, base_model, config_int
from interpret.collect.hf.layout import AttentionLayout, StackLayout, build_capturable, run_model
from interpret.collect.sites import Capturable


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a Llama, Qwen2 or Mistral model (any task head); sites as in `layout`."""
    config = model.config
    n_heads = config_int(config, "num_attention_heads")
    d_model = config_int(config, "hidden_size")
    stack = StackLayout(
        prefix="",
        blocks="layers",
        side="main",
        attentions=(AttentionLayout(kernel="self_attn", out_proj="self_attn.o_proj"),),
        mlp_out="mlp",
        mlp_down="mlp.down_proj",
        n_heads=n_heads,
        d_head=config_int(config, "head_dim", default=d_model // n_heads),
        d_model=d_model,
        d_mlp=config_int(config, "intermediate_size"),
    )
    return build_capturable(
        model,
        base_model(model),
        [stack],
        kind="decoder",
        run=partial(run_model, model, disable_cache=True),
        max_positions=config_int(config, "max_position_embeddings"),
        adapter="llama",
    )


ADAPTER = HFAdapter(model_types=("llama", "qwen2", "mistral"), build=build)
