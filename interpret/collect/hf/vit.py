"""Adapter for ViT: image input, the class token first, then patches row by row.

`layers.{i}.attention` (q_proj, k_proj, v_proj, o_proj) and `mlp` (fc1, fc2); earlier transformers 5
releases used BERT's `encoder.layer.{i}.attention.attention` layout, which is mapped too. Positions are the
class token and the patches: tokens are `[CLS]`, `patch_0_0`, `patch_0_1`, ... (row, column). Inputs are
pixel values [batch, channel, height, width] or images (PIL or arrays) with the image processor that
`interpret.load` returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.collect.hf.adapter import HFAdapter, base_model, config_int
from interpret.collect.hf.layout import AttentionLayout, StackLayout, build_capturable, run_model
from interpret.collect.sites import Capturable
from interpret.errors import InputError
from interpret.inputs import Encoded


def _pair(value: Any) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, Sequence) else (int(value), int(value))


def prepare_images(
    processor: Any | None,
    inputs: Any,
    *,
    max_length: int | None = None,
    decoder_inputs: Any | None = None,
    image_size: tuple[int, int],
    patch_size: tuple[int, int],
    channels: int,
) -> Encoded:
    """Return the Encoded of images: pixel_values [batch, channel, height, width], 1 + patches positions."""
    if decoder_inputs is not None or max_length is not None:
        raise InputError("decoder inputs and max_length do not apply to a vision model; drop them.")
    if isinstance(inputs, Encoded):
        if inputs.pixel_values is None:
            raise InputError("this Encoded has no pixel_values; a vision model needs images or pixel values.")
        return inputs
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError(
            "a vision model takes images, not text; pass PIL images or pixel_values [batch, channel, height, width]."
        )
    if isinstance(inputs, Tensor):
        pixel_values = inputs
    elif processor is None:
        raise InputError(
            "image input needs an image processor; pass the one interpret.load returned, or a tensor of"
            " pixel_values [batch, channel, height, width]."
        )
    else:
        images = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        pixel_values = processor(images=images, return_tensors="pt")["pixel_values"]
    expected = (channels, *image_size)
    if pixel_values.dim() != 4 or not pixel_values.is_floating_point() or tuple(pixel_values.shape[1:]) != expected:
        raise InputError(
            f"pixel_values have shape {tuple(pixel_values.shape)} ({pixel_values.dtype}); this model takes float"
            f" [batch, {channels}, {image_size[0]}, {image_size[1]}]: resize with the image processor."
        )
    rows, cols = image_size[0] // patch_size[0], image_size[1] // patch_size[1]
    names = ["[CLS]"] + [f"patch_{row}_{col}" for row in range(rows) for col in range(cols)]
    batch = int(pixel_values.shape[0])
    special = torch.zeros(batch, len(names), dtype=torch.bool)
    special[:, 0] = True
    return Encoded(
        attention_mask=torch.ones(batch, len(names), dtype=torch.long),
        tokens=[list(names) for _ in range(batch)],
        special=special,
        pixel_values=pixel_values,
    )


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a ViT model (ViTModel, ViTForImageClassification); sites as in `layout`."""
    config = model.config
    n_heads = config_int(config, "num_attention_heads")
    d_model = config_int(config, "hidden_size")
    root = base_model(model)
    if hasattr(root, "layers"):  # the layout of recent transformers 5 releases
        blocks, kernel, out_proj, mlp_out, mlp_down = "layers", "attention", "attention.o_proj", "mlp", "mlp.fc2"
    else:  # the BERT-like layout of earlier releases
        blocks, kernel, out_proj = "encoder.layer", "attention.attention", "attention.output.dense"
        mlp_out = mlp_down = "output.dense"
    stack = StackLayout(
        prefix="",
        blocks=blocks,
        side="main",
        attentions=(AttentionLayout(kernel=kernel, out_proj=out_proj),),
        mlp_out=mlp_out,
        mlp_down=mlp_down,
        n_heads=n_heads,
        d_head=config_int(config, "head_dim", default=d_model // n_heads),
        d_model=d_model,
        d_mlp=config_int(config, "intermediate_size"),
    )
    prepare = partial(
        prepare_images,
        image_size=_pair(config.image_size),
        patch_size=_pair(config.patch_size),
        channels=config_int(config, "num_channels"),
    )
    return build_capturable(
        model,
        root,
        [stack],
        kind="vision",
        run=partial(run_model, model, disable_cache=False),
        adapter="vit",
        prepare=prepare,
    )


ADAPTER = HFAdapter(model_types=("vit",), build=build)
