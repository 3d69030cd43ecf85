"""Adapter for ViT-MAE's encoder (ViTMAEModel, ViTMAEForPreTraining): patches kept in their order.

What it adds over the generic adapter: the patches' order. Before its first block ViT-MAE shuffles the patches by
the argsort of per-example noise, drawn at random in every forward pass unless `noise` [batch, patches] is given,
and keeps the first (1 − mask_ratio) of them. With a mask ratio above zero the positions are a random subset of
the patches, different in every pass, so no position is a patch: such a model is refused, naming the setting that
keeps every patch (`mask_ratio=0.0`). With mask_ratio 0 every patch is kept but still in a random order, which the
generic adapter, seeing as many positions as a ViT's, would name as if in order; this adapter passes increasing
noise (0, 1, 2, ...), whose argsort keeps the patches in order, so position `patch_{row}_{col}` is that patch in
every pass (the probe's, the capture's and every re-run's). Everything else is the generic adapter's.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.layout import run_model
from interpret.capture.sites import Capturable
from interpret.errors import UnsupportedModelError
from interpret.inputs import Encoded

NAME = "mae"


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a ViT-MAE encoder that keeps every patch, in order."""
    ratio = float(getattr(model.config, "mask_ratio", 0.0) or 0.0)
    if ratio > 0:
        raise UnsupportedModelError(
            f"{type(model).__name__} keeps {1 - ratio:.0%} of its patches, drawn at random in every forward pass"
            f" (mask_ratio={ratio:g}), so its positions are no fixed patches; load it with mask_ratio=0.0 (e.g."
            f" {type(model).__name__}.from_pretrained(path, mask_ratio=0.0)) to capture every patch in order."
        )
    layout = generic.layout_of(model, inputs=_probe_inputs)
    return replace(generic.capturable(model, layout, adapter=NAME), run=partial(_run, model))


def in_order(model: nn.Module, pixel_values: Tensor) -> Tensor:
    """Return noise [batch, patches] whose argsort keeps the patches in their order: 0, 1, 2, ... per example."""
    _, patch_size, _ = generic.vision_sizes(model)
    patches = (pixel_values.shape[-2] // patch_size[0]) * (pixel_values.shape[-1] // patch_size[1])
    order = torch.arange(patches, device=pixel_values.device, dtype=torch.float32)
    return order.expand(pixel_values.shape[0], patches)


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    inputs = generic.probe_inputs(model, with_mask)
    return {**inputs, "noise": in_order(model, inputs["pixel_values"])}


def _run(model: nn.Module, encoded: Encoded) -> Any:
    """Run the model on the Encoded's images with the noise that keeps every patch in order."""
    assert encoded.pixel_values is not None
    return run_model(model, encoded, disable_cache=False, extra={"noise": in_order(model, encoded.pixel_values)})


ADAPTER = HFAdapter(
    model_types=("vit_mae",),
    build=build,
    adds="patches kept in order (noise 0, 1, 2, ... instead of a random shuffle); a mask ratio above 0 refused",
)
