"""The adapter contract: what a package registers under the entry-point group `interpret.adapters`.

Most models need none: the generic adapter (`interpret.capture.hf.generic`) serves every model type that
no adapter claims, from the model's own structure. An adapter is for a family's real quirks (attention
computed in the module, windowed or hierarchical attention, a second input tower, audio input): any object
with `model_types` (the `config.model_type` values it serves), `build(model, tokenizer) -> Capturable` and
optionally `adds` (one line: what it adds over the generic adapter). The built-in family adapters and
third-party packages register the same way, in their pyproject.toml:

    [project.entry-points."interpret.adapters"]
    my_family = "my_package.adapter:ADAPTER"

`HFAdapter` below is a ready-made frozen dataclass for that object; `generic.layout_of` and
`generic.capturable` are the building blocks a family adapter starts from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from interpret.capture.sites import Capturable

GROUP = "interpret.adapters"


@dataclass(frozen=True)
class HFAdapter:
    """An adapter: the model types it serves, the function that makes such a model capturable, and what it
    adds over the generic adapter (one line, shown by `interpret models`)."""

    model_types: tuple[str, ...]
    build: Callable[[nn.Module, Any], Capturable]
    adds: str = ""


def base_model(model: nn.Module) -> nn.Module:
    """Return the bare transformer inside a model with a task head (`BertForMaskedLM.bert`), or the model."""
    inner = getattr(model, "base_model", None)
    return inner if isinstance(inner, nn.Module) else model
