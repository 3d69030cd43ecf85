"""Write a BERT or RoBERTa whose pruned heads are really removed, as a "bert_pruned" or "roberta_pruned"
checkpoint (see pruned_bert.py).

A stock BertConfig cannot describe fewer heads of the same width, so `prune_heads` writes BERT and RoBERTa with
zeroed heads (same parameter count). `save_removed` instead removes every layer's pruned heads in memory, moves
the weights into the matching `BertPruned*` / `RobertaPruned*` class (per-layer head counts in its config) and
saves it with that class's source file and an `auto_map`: `AutoModel.from_pretrained(DIR, trust_remote_code=True)` loads it with
fewer parameters in a fresh process. Plain `AutoModel.from_pretrained(DIR)` refuses the directory (it asks for
trust_remote_code) unless the process has called `interpret.heads.pruned_bert.register()`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interpret.errors import UnsupportedModelError
from interpret.heads import pruned_bert
from interpret.heads.surgery import Pruned, count_parameters, prune_heads


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
    settings = model.config.to_dict()
    for key in ("model_type", "architectures", "auto_map", "transformers_version", "heads_per_layer"):
        settings.pop(key, None)
    config_class = pruned_bert.PRUNED_CONFIGS[model.config.model_type]
    config = config_class(heads_per_layer=heads_per_layer, **settings)
    cls, _ = pruned_bert.PRUNED_CLASSES[type(model).__name__]
    config.architectures = [cls.__name__]
    config.auto_map = pruned_bert.auto_map(config_class)
    with torch.random.fork_rng(devices=[]):
        built = cls(config)
    parameter = next(model.parameters())
    built = built.to(device=parameter.device, dtype=parameter.dtype)
    built.load_state_dict(swapped.model.state_dict(), strict=True)
    built = built.eval()
    note = (
        f"removed ({', '.join(map(str, heads_per_layer))} heads per layer), stored as model type"
        f" {config_class.model_type} with"
        f" its modeling file: load it with AutoModel.from_pretrained(DIR, trust_remote_code=True)"
    )
    return Pruned(built, True, max(heads_per_layer), max(heads_per_layer), swapped.kept,
                  swapped.parameters_before, count_parameters(built), note)


def save_removed(pruned: Pruned, directory: str | Path) -> None:
    """Write `pruned` (from `removed_model`) with save_pretrained and its modeling file into `directory`."""
    directory = Path(directory)
    pruned.model.save_pretrained(directory)
    shutil.copyfile(pruned_bert.__file__, directory / pruned_bert.MODULE_FILE)
