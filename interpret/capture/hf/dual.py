"""Adapter for text-image dual encoders (CLIP, SigLIP, SigLIP 2, AltCLIP, Chinese-CLIP, CLIPSeg, MetaCLIP 2,
OWL-ViT, OWLv2, BLIP, AIMv2, and the vision-text dual encoder assembled from any two towers): a text tower and a
vision tower in one forward pass.

What it adds over the generic adapter: a second input. The model takes text and images together and runs
two stacks that never attend to each other, so the text tower is the main stack (`blocks.{i}...`, over the
tokens) and the vision tower is the `vision.` stack (`vision.blocks.{i}...`, over its special tokens and
patches), on the trace's `image` side. Inputs are `{"text": texts, "images": images or pixel values}` (or
the pair `(texts, images)`), with the model's processor (CLIPProcessor: tokenizer and image processor) or a
tokenizer and pixel values [batch, channel, height, width]. A text tower that reads its row's last position
(SigLIP's: `interpret.capture.hf.pooling`) has its texts padded on the left, with position ids that follow the
padding, so that it reads each text's last token and each example is what it is alone. SigLIP 2's vision tower
takes each image as patches of its own grid, read as the `naflex` adapter reads them (pixel values [batch, row,
column, patch_dim], one grid per batch, positions `patch_{row}_{col}`). Everything else (blocks, projections,
MLPs, norms, gates per tower with `prefix=`) is the generic adapter's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Literal

import torch
from torch import nn

from interpret.capture.hf import generic, naflex
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.media import image_side, patch_names, pixels, text_side
from interpret.capture.hf.pooling import text_pooling
from interpret.capture.hf.probe import Probe
from interpret.capture.hf.structure import (
    AttentionCall, ModelLayout, find_stacks, max_positions, position_offset, probe_attentions,
)
from interpret.capture.sites import Capturable
from interpret.errors import InputError, UnsupportedModelError
from interpret.inputs import Encoded


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a dual encoder (CLIPModel, SiglipModel): text stack, then `vision.` stack. A model
    of a dual encoder's type that holds its vision tower alone (CLIPForImageClassification,
    SiglipForImageClassification: a forward that takes no text) is a vision model: the generic adapter's, or the
    `naflex` adapter's where its tower takes each image's own grid of patches (Siglip2ForImageClassification)."""
    if "input_ids" not in generic.forward_parameters(model):
        return (naflex.build if naflex.takes_patches(model) else generic.build)(model, processor)
    layout = generic.layout_of(model, inputs=_probe_inputs, discover=_discover)
    pooling = text_pooling(model, paired=True)
    side = pooling.padding_side if pooling is not None else None
    if naflex.takes_patches(model):  # SigLIP 2: each image its own grid of patches
        tower = naflex.tower_of(model)
        prepare = partial(prepare_pair, text_limit=layout.max_positions, image=partial(naflex.prepare, tower),
                          padding_side=side)
        return generic.capturable(model, replace(layout, max_positions=None), adapter="dual", prepare=prepare,
                                  pixels=tower.inputs)
    image_size, patch_size, channels = generic.vision_sizes(model)
    grid = (image_size[0] // patch_size[0], image_size[1] // patch_size[1])
    extra = layout.positions - grid[0] * grid[1]
    if extra < 0:
        raise UnsupportedModelError(
            f"the vision tower of {type(model).__name__} attends over fewer positions than its patches; the dual"
            " adapter does not match it."
        )
    specials = ["[CLS]", *(f"[SPECIAL_{i}]" for i in range(1, extra))][:extra]
    image = partial(_image_side, image_size=image_size, channels=channels, names=patch_names(grid, specials),
                    specials=len(specials))
    prepare = partial(prepare_pair, text_limit=layout.max_positions, image=image, padding_side=side)
    return generic.capturable(model, replace(layout, max_positions=None), adapter="dual", prepare=prepare)


def _image_side(image_processor: Any | None, images: Any, *, image_size: tuple[int, int], channels: int,
                names: list[str], specials: int) -> Encoded:
    """Return the image side of images read by the image processor (or pixel values [batch, channel, height,
    width]) at the tower's size, positions `names`."""
    return image_side(pixels(image_processor, images, shape=(channels, *image_size)), names, specials)


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    text = generic.probe_inputs(model, with_mask)
    if naflex.takes_patches(model):
        return {**text, **naflex.probe_image(model)}
    image_size, _, channels = generic.vision_sizes(model)
    parameter = next(model.parameters())
    text["pixel_values"] = torch.zeros(1, channels, *image_size, device=parameter.device, dtype=parameter.dtype)
    return text


def _discover(model: nn.Module, probe: Probe) -> ModelLayout:
    """Return the text stack (main side) and the vision stack (`vision.`, image side); `positions` holds the
    vision tower's positions."""
    calls = probe_attentions(probe)
    stacks = find_stacks(model, probe, calls) if calls else []
    text = [stack for stack, call in _firsts(stacks, calls) if call.query_length == generic.PROBE_TOKENS]
    vision = [(stack, call) for stack, call in _firsts(stacks, calls) if call.query_length != generic.PROBE_TOKENS]
    if len(stacks) != 2 or len(text) != 1 or len(vision) != 1:
        raise UnsupportedModelError(
            f"{type(model).__name__} does not run one text stack and one vision stack; the dual-encoder adapter does"
            " not match it."
        )
    text_stack, (vision_stack, vision_call) = text[0], vision[0]
    return ModelLayout(
        kind="encoder",
        stacks=(replace(text_stack, prefix="", side="main"), replace(vision_stack, prefix="vision.", side="image")),
        max_positions=max_positions(model),
        position_offset=position_offset(model),
        positions=vision_call.query_length,
    )


def _firsts(stacks: Sequence[Any], calls: Sequence[AttentionCall]) -> list[tuple[Any, AttentionCall]]:
    """Pair each stack with the first attention call inside it."""
    return [(stack, next(call for call in calls if call.path.startswith(stack.blocks + "."))) for stack in stacks]


def prepare_pair(
    processor: Any | None,
    inputs: Any,
    *,
    max_length: int | None = None,
    decoder_inputs: Any | None = None,
    text_limit: int | None,
    image: Callable[[Any, Any], Encoded],
    padding_side: Literal["left", "right"] | None = None,
) -> Encoded:
    """Return the Encoded of texts with their images on the `image` side (one image per text; `image` makes that
    side from the image processor and the images), the texts padded on `padding_side` (None: the tokenizer's)."""
    if decoder_inputs is not None:
        raise InputError("a dual encoder takes no decoder inputs; pass {'text': ..., 'images': ...}.")
    if isinstance(inputs, Encoded):
        if inputs.image is None:
            raise InputError("this Encoded has no image side; a dual encoder needs text and images.")
        return inputs
    if isinstance(inputs, Mapping) and {"text", "images"} <= set(inputs):
        texts, images = inputs["text"], inputs["images"]
    elif isinstance(inputs, tuple) and len(inputs) == 2:
        texts, images = inputs
    else:
        raise InputError(
            "a text-image dual encoder takes text and images together: pass {'text': texts, 'images': images or"
            " pixel_values}."
        )
    tokenizer = getattr(processor, "tokenizer", processor)
    text = text_side(tokenizer, texts, text_limit, max_length=max_length, padding_side=padding_side)
    side = image(getattr(processor, "image_processor", None), images)
    if side.batch != text.batch:
        raise InputError(f"{text.batch} texts but {side.batch} images were given; give one image per text.")
    return replace(text, image=side)


ADAPTER = HFAdapter(
    model_types=("clip", "siglip", "siglip2", "altclip", "chinese_clip", "clipseg", "metaclip_2", "owlvit", "owlv2",
                 "blip", "aimv2", "vision-text-dual-encoder"),
    build=build,
    adds="text and images in one forward: the text tower as the main stack, the vision tower as `vision.` on the image side",
)
