"""Adapter for XLM and FlauBERT: layers kept as parallel lists instead of block modules.

What it adds over the generic adapter: the layout. These models hold each layer's parts in lists of their own,
`attentions`, `layer_norm1`, `ffns` and `layer_norm2`, and run layer i as

    x = layer_norm1[i](x + attentions[i](x));  x = layer_norm2[i](x + ffns[i](x));  x = x · mask

(post-norm; FlauBERT's `pre_norm` checkpoints are refused), so no module bounds a layer. The blocks are the
attention modules (`hook_resid_pre` is their input); the layer's other parts are named beside them
(`StackLayout.block_output`, `^` paths): `ln2` is `layer_norm1[i]` (whose output the MLP reads), the MLP is
`ffns[i]` (`mlp.hook_post` the input of its `lin2`), and `hook_resid_post` is `layer_norm2[i]`'s output (the
model then zeroes padded positions, which every pattern masks anyway). The attention (`MultiHeadAttention`:
query, key and value projections, a softmax of their products, `out_lin`) is computed in the module's own
code and found by the generic own-code capture, its sizes read from the probe pass. Nothing is re-derived
beyond the names: the probe confirms that each list has an entry per layer and that the attention module
computed its attention.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.layout import AttentionLayout, StackLayout
from interpret.capture.hf.probe import Probe
from interpret.capture.hf.structure import ADAPTERS_HINT, ModelLayout
from interpret.capture.sites import Capturable
from interpret.errors import UnsupportedModelError

NAME = "parallel"
PARTS = ("attentions", "layer_norm1", "ffns", "layer_norm2")  # the lists, in the order a layer runs them


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of an XLM or FlauBERT model (the bare model or one with a task head)."""
    if getattr(model.config, "pre_norm", False):
        raise UnsupportedModelError(
            f"{type(model).__name__} normalises before each sublayer (pre_norm=True), where its layer_norm1 feeds"
            f" the attention; only post-norm checkpoints (pre_norm=False) are laid out here; {ADAPTERS_HINT}."
        )
    return generic.capturable(model, generic.layout_of(model, discover=discover), adapter=NAME)


def _lists(model: nn.Module) -> str:
    """Return the path of the module holding the parallel lists (the root, or `transformer` under a head)."""
    for path, module in model.named_modules():
        if all(isinstance(getattr(module, part, None), nn.ModuleList) for part in PARTS):
            return path
    raise UnsupportedModelError(
        f"{type(model).__name__} holds no parallel lists {', '.join(PARTS)}; {ADAPTERS_HINT}."
    )


def discover(model: nn.Module, probe: Probe) -> ModelLayout:
    """Return the layout of the parallel lists, with the sizes of the attention the probe saw computed."""
    config = model.config
    holder = _lists(model)
    prefix = f"{holder}." if holder else ""
    lists = {part: getattr(model.get_submodule(holder), part) for part in PARTS}
    layers = len(lists["attentions"])
    if any(len(parts) != layers for parts in lists.values()):
        raise UnsupportedModelError(
            f"the lists {', '.join(PARTS)} of {type(model).__name__} differ in length; {ADAPTERS_HINT}."
        )
    first = f"{prefix}attentions.0"
    calls = [call for call in probe.own if call.path == first]
    if not calls:
        why = probe.missed.get(first, "no attention was computed in it")
        raise UnsupportedModelError(f"the attention module {first!r} of {type(model).__name__}: {why}; {ADAPTERS_HINT}.")
    call = calls[0]
    ffn = lists["ffns"][0]
    stack = StackLayout(
        prefix="",
        blocks=f"{prefix}attentions",
        side="main",
        attentions=(AttentionLayout(kernel="", out_proj="out_lin", own=True),),
        mlp_out="^ffns",
        mlp_down="^ffns.lin2",
        n_heads=call.n_heads,
        d_head=call.d_head,
        d_model=int(ffn.lin2.out_features),
        d_mlp=int(ffn.lin2.in_features),
        d_value=call.d_value,
        n_kv_heads=call.n_kv_heads,
        ln2="^layer_norm1",
        block_output="^layer_norm2",
        unsupported=(("ln1.hook_normalized", "the attention reads the residual stream unnormalised (post-norm layers)"),),
    )
    kind = "decoder" if getattr(config, "causal", False) else "encoder"
    limit = getattr(config, "max_position_embeddings", None)
    return ModelLayout(kind, (stack,), max_positions=limit, positions=call.query_length)


ADAPTER = HFAdapter(
    model_types=("xlm", "flaubert"),
    build=build,
    adds="layout: layers kept as parallel lists (attentions, layer_norm1, ffns, layer_norm2) read as blocks",
)
