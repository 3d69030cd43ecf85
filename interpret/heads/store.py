"""Write a BERT or RoBERTa whose pruned heads are really removed, as a "bert_pruned" or "roberta_pruned"
checkpoint (see pruned_bert.py).

A stock BertConfig cannot describe fewer heads of the same width, so `prune_heads` writes BERT and RoBERTa with
zeroed heads (same parameter count). `save_removed` instead removes every layer's pruned heads in memory, moves
the weights into the matching `BertPruned*` / `RobertaPruned*` class (per-layer head counts in its config) and
saves it with that class's source file and an `auto_map`: `AutoModel.from_pretrained(DIR, trust_remote_code=True)` loads it with
fewer parameters in a fresh process. Plain `AutoModel.from_pretrained(DIR)` refuses the directory (it asks for
trust_remote_code) unless the process has called `interpret.heads.pruned_bert.register()`.

`expanded` turns such a model back into the stock class with every original head, the removed ones zero: the
collector captures layers of one head count only, so this is how `interpret.load` gives it to every command.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from jaxtyping import Float
from torch import Tensor, nn

from interpret.errors import UnsupportedModelError
from interpret.heads import pruned_bert
from interpret.heads.surgery import Pruned, built_like, count_parameters, head_rows, prune_heads

# config keys that belong to one format: dropped when a stock config becomes a pruned one and back
_OWN_KEYS = ("model_type", "architectures", "auto_map", "transformers_version", "heads_per_layer", "kept_heads")


def storable(model: nn.Module) -> bool:
    """Return whether `save_removed` can write `model`: a BERT or RoBERTa (model_type "bert", "roberta") of a
    class it maps."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    return model_type in pruned_bert.PRUNED_CONFIGS and type(model).__name__ in pruned_bert.PRUNED_CLASSES


def removed_model(model: nn.Module, mask: Float[Tensor, "layer head"]) -> Pruned:
    """Return `model` (unchanged) as a `BertPruned*` / `RobertaPruned*` model holding only the heads whose mask is not 0.

    Layers whose every head is pruned keep one head with a zeroed output projection (it adds exactly nothing,
    like its gate of 0). Raises UnsupportedModelError for a model `storable` refuses."""
    if not storable(model):
        raise UnsupportedModelError(
            f"{type(model).__name__} is not a BERT or RoBERTa model of the classes"
            f" {', '.join(pruned_bert.PRUNED_CLASSES)}; its removed heads cannot be stored with per-layer head counts."
        )
    swapped = prune_heads(model, mask, in_memory=True)
    if not swapped.removed:
        raise UnsupportedModelError(f"the heads could not be removed: {swapped.note}")
    heads_per_layer = [len(kept) for kept in swapped.kept]
    settings = _stock_settings(model.config)
    config_class = pruned_bert.PRUNED_CONFIGS[model.config.model_type]
    config = config_class(heads_per_layer=heads_per_layer, kept_heads=[list(kept) for kept in swapped.kept], **settings)
    cls, _ = pruned_bert.PRUNED_CLASSES[type(model).__name__]
    config.architectures = [cls.__name__]
    config.auto_map = pruned_bert.auto_map(config_class)
    built = built_like(cls, config, model)
    built.load_state_dict(swapped.model.state_dict(), strict=True)
    built = built.eval()
    on = [int((mask[layer] != 0).sum()) for layer in range(mask.shape[0])]
    emptied = " (a layer with none stores one head whose output is zero)" if 0 in on else ""
    note = (
        f"removed (heads kept per layer: {', '.join(map(str, on))}{emptied}), stored as model type"
        f" {config_class.model_type} with its modeling file: load it with interpret.load(DIR), or with"
        " AutoModel.from_pretrained(DIR, trust_remote_code=True)"
    )
    return Pruned(built, True, max(heads_per_layer), max(heads_per_layer), swapped.kept,
                  swapped.parameters_before, count_parameters(built), note)


def save_removed(pruned: Pruned, directory: str | Path) -> None:
    """Write `pruned` (from `removed_model`) with save_pretrained and its modeling file into `directory`."""
    directory = Path(directory)
    pruned.model.save_pretrained(directory)
    shutil.copyfile(pruned_bert.__file__, directory / pruned_bert.MODULE_FILE)


def _stock_settings(config: Any) -> dict[str, Any]:
    """Return `config`'s settings without the keys that belong to one format (`_OWN_KEYS`)."""
    return {key: value for key, value in config.to_dict().items() if key not in _OWN_KEYS}


def expanded(model: nn.Module) -> nn.Module:
    """Return the stock class (e.g. BertForSequenceClassification) computing what `model` (a BertPruned* or
    RobertaPruned* model) computes, with all num_attention_heads heads per layer: each stored head at its
    original index (config.kept_heads), every removed head's query, key, value rows and output columns zero
    (its attention is uniform and it adds exactly nothing, as its gate of 0 did), in eval mode."""
    import transformers

    config = model.config
    stock = getattr(transformers, type(model).__name__.replace("Pruned", "", 1))
    stock_config = stock.config_class(**_stock_settings(config))
    stock_config.architectures = [stock.__name__]
    stock_config._attn_implementation = config._attn_implementation
    built = built_like(stock, stock_config, model)
    d_head = config.hidden_size // config.num_attention_heads
    width = config.num_attention_heads * d_head
    state = model.state_dict()
    base = "" if model.base_model is model else f"{model.base_model_prefix}."
    for layer, kept in enumerate(config.kept_heads):
        rows = head_rows(kept, d_head)
        prefix = f"{base}encoder.layer.{layer}.attention."
        for name in ("self.query.weight", "self.query.bias", "self.key.weight", "self.key.bias",
                     "self.value.weight", "self.value.bias"):
            stored = state[prefix + name]
            state[prefix + name] = stored.new_zeros(width, *stored.shape[1:]).index_copy(0, rows, stored)
        stored = state[prefix + "output.dense.weight"]
        state[prefix + "output.dense.weight"] = stored.new_zeros(stored.shape[0], width).index_copy(1, rows, stored)
    built.load_state_dict(state, strict=True)
    return built.eval()
