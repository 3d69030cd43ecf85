"""Make our reference Transformer capturable: every HookPoint is a site."""

from __future__ import annotations

from typing import Any

from torch import nn

from interpret.capture.sites import Capturable, Side, Site
from interpret.inputs import Encoded
from interpret.reference.models import Decoder, ReferenceModel


def _side(name: str) -> Side:
    if ".cross_attn." in name and name.endswith(("hook_pattern", "hook_attn_scores", "hook_lse")):
        return "cross"
    if ".cross_attn." in name and name.endswith(("hook_k", "hook_v")):
        return "main"  # cross-attention keys and values are computed from the encoder's positions
    return "decoder" if name.startswith("decoder.") else "main"


def reference_capturable(model: ReferenceModel) -> Capturable:
    """Return the Capturable of a reference model: its hook points, sizes and forward."""
    config = model.config
    sizes = {
        "head": config.n_heads,
        "d_head": config.d_head,
        "d_model": config.d_model,
        "d_mlp": config.mlp_width,
    }
    if config.vocab_size is not None:
        sizes["vocab"] = config.vocab_size

    def run(encoded: Encoded) -> Any:
        return model.forward_encoded(encoded)

    def embedding(side: str) -> nn.Module | None:
        if isinstance(model, Decoder):  # a decoder on its own: its main side is a memory of embeddings
            owner: nn.Module | None = model if side == "decoder" else None
        else:
            owner = getattr(model, "decoder", None) if side == "decoder" else getattr(model, "encoder", model)
        module = getattr(owner, "embed", None)
        return module if isinstance(module, nn.Module) else None

    sites = [
        Site(name=name, axes=tuple(point.axes.split()), sizes=sizes, module=point, side=_side(name))
        for name, point in model.hook_points().items()
    ]
    return Capturable(
        model=model,
        model_id=type(model).__name__,
        kind=model.kind,
        n_layers=model.n_layers,
        n_heads=config.n_heads,
        sites=sites,
        run=run,
        max_positions=config.max_positions,
        attention="eager",
        embedding=embedding,
        model_class=type(model).__name__,
    )
