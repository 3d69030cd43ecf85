"""Adapter for vision towers that take an image as a sequence of patches of its own grid: SigLIP 2's NaFlex
tower, Gemma 4's vision tower and Pix2Struct's.

What it adds over the generic adapter: the input. These towers are fed `pixel_values` [batch, patches, patch_dim]
already cut into patches (patch_dim = patch × patch × channel, each patch's pixels row by row with the channels
last, as their image processors' `convert_image_to_patches` lay them out; the processor pads every image to its
`max_num_patches`), and where each patch lies: SigLIP 2 (`Siglip2VisionModel`) takes `spatial_shapes` [batch, 2]
(each image's rows and columns of patches, to which it resizes its position embeddings) and
`pixel_attention_mask` [batch, patches]; Gemma 4 (`Gemma4VisionModel`) takes `pixel_position_ids` [batch,
patches, 2], each patch's (column, row), (−1, −1) for padding, and pools windows of `pooling_kernel_size` ×
`pooling_kernel_size` patches after its blocks, so its grids are multiples of that; Pix2Struct
(`Pix2StructVisionModel`) takes `flattened_patches` [batch, patches, 2 + patch_dim], each patch led by its row
and column counted from 1 (0 for padding), with an `attention_mask`. Positions are the patches in
raster order: `patch_{row}_{col}`, no special token (the pooling reads them after the blocks).

Input: `Encoded.pixel_values` [batch, row, column, patch_dim], one grid for the whole batch; images are read by the
model's processor (which chooses each image's grid from its aspect ratio and `max_num_patches`; images of different
grids are refused: resize them to one size, or explain them one at a time), or taken as such a tensor. The run
gives the model each image's patches in raster order with their grid and a mask of ones: the processor's padding
patches, which the mask hid from every real one, are not positions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

import torch
from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.media import check_decoder_inputs, decoder_text, image_side
from interpret.capture.hf.probe import Probe
from interpret.capture.hf.speech import decoder_probe
from interpret.capture.hf.structure import ModelLayout, model_layout
from interpret.capture.sites import Capturable
from interpret.errors import InputError
from interpret.inputs import Encoded

NAME = "naflex"
_PROBE_GRID = (2, 3)  # rows × columns of the probe's image, in units of the tower's multiple: a non-square grid


Feed = Literal["shapes", "positions", "flattened"]
# the forward parameter that tells each way of saying where the patches lie
_FEEDS: dict[str, Feed] = {"spatial_shapes": "shapes", "pixel_position_ids": "positions",
                           "flattened_patches": "flattened"}


@dataclass(frozen=True)
class Tower:
    """How a tower reads its patches: the size of one (patch × patch × channel), what its grid's rows and columns
    must be multiples of (Gemma 4's pooling window, else 1), and how it is told where they lie: each image's grid
    and a mask (`shapes`, SigLIP 2), each patch's (column, row) (`positions`, Gemma 4), or each patch's row and
    column, counted from 1, as its first two values, with a mask (`flattened`, Pix2Struct)."""

    patch_dim: int
    multiple: int
    feed: Feed

    def inputs(self, pixel_values: Tensor) -> dict[str, Tensor]:
        """Return the tower's keyword arguments for `pixel_values` [batch, row, column, patch_dim] (raster order):
        the patches [batch, row × column, patch_dim] and where they lie: their grid [batch, 2] and a mask of ones
        [batch, row × column]; each patch's (column, row) [batch, row × column, 2]; or the patches led by their
        row and column [batch, row × column, 2 + patch_dim] and a mask of ones."""
        batch, rows, columns, dim = pixel_values.shape
        device = pixel_values.device
        patches = pixel_values.reshape(batch, rows * columns, dim)
        row, column = torch.meshgrid(torch.arange(rows, device=device), torch.arange(columns, device=device),
                                     indexing="ij")
        ones = torch.ones(batch, rows * columns, dtype=torch.long, device=device)
        if self.feed == "positions":
            where = torch.stack([column, row], dim=-1).reshape(1, -1, 2).expand(batch, -1, -1)
            return {"pixel_values": patches, "pixel_position_ids": where}
        if self.feed == "flattened":
            ids = torch.stack([row, column], dim=-1).reshape(1, -1, 2).expand(batch, -1, -1).to(patches.dtype) + 1
            return {"flattened_patches": torch.cat([ids, patches], dim=-1), "attention_mask": ones}
        return {"pixel_values": patches, "pixel_attention_mask": ones,
                "spatial_shapes": torch.tensor([[rows, columns]] * batch, dtype=torch.long, device=device)}


def takes_patches(model: nn.Module) -> bool:
    """Whether `model`'s forward takes patches with where they lie (`spatial_shapes`, `pixel_position_ids` or
    `flattened_patches`)."""
    return bool(set(_FEEDS) & set(generic.forward_parameters(model)))


def tower_of(model: nn.Module) -> Tower:
    """Return how `model` (a tower, or a dual encoder whose vision tower it is) reads its patches, from its
    forward's parameters and its (vision) config."""
    config = getattr(model.config, "vision_config", None) or model.config
    parameters = generic.forward_parameters(model)
    feed = next((feed for name, feed in _FEEDS.items() if name in parameters), "shapes")
    multiple = int(getattr(config, "pooling_kernel_size", None) or 1) if feed == "positions" else 1
    channels = int(getattr(config, "num_channels", None) or 3)  # Gemma 4 and Pix2Struct set none: RGB patches
    dim = getattr(config, "patch_embed_hidden_size", None) or channels * int(config.patch_size) ** 2
    return Tower(int(dim), multiple, feed)


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a NaFlex vision tower (one position per patch, in raster order), or of an
    encoder-decoder whose encoder is one (Pix2Struct: the image's patches, then the decoder's text)."""
    tower = tower_of(model)
    layout = generic.layout_of(model, inputs=_probe_inputs, discover=_discover)  # probed once per model
    decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    made = partial(prepare, tower, processor_default=processor, decoder=decoder, decoder_limit=layout.max_positions)
    # an encoder-decoder's limit is its decoder side's, read by `prepare`; the image side has none
    return generic.capturable(model, replace(layout, max_positions=None) if decoder else layout, adapter=NAME,
                              prepare=made, pixels=tower.inputs)


def prepare(
    tower: Tower, processor: Any | None, inputs: Any = None, *, max_length: int | None = None,
    decoder_inputs: Any | None = None, processor_default: Any | None = None, decoder: bool = False,
    decoder_limit: int | None = None,
) -> Encoded:
    """Return the Encoded of images: pixel_values [batch, row, column, patch_dim] (raster order), positions
    `patch_{row}_{col}`, and, for an encoder-decoder (`decoder`), the decoder side from `decoder_inputs` (text
    with the processor's tokenizer, or token ids). `inputs`: such a tensor, an Encoded, or images read by the
    processor."""
    if max_length is not None:
        raise InputError("max_length does not apply to images; drop it.")
    check_decoder_inputs(decoder, decoder_inputs, "this vision model", encoded=isinstance(inputs, Encoded))
    dim = tower.patch_dim
    if isinstance(inputs, Encoded):
        if inputs.pixel_values is None or inputs.pixel_values.dim() != 4 or inputs.pixel_values.shape[-1] != dim:
            raise InputError(f"this Encoded has no patches; pass images or pixel_values [batch, row, column, {dim}].")
        return inputs
    if isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and any(isinstance(x, str) for x in inputs)):
        raise InputError(f"a vision model takes images, not text; pass PIL images or pixel_values [batch, row,"
                         f" column, {dim}].")
    pixel_values = inputs if isinstance(inputs, Tensor) else _processed(processor or processor_default, inputs, dim)
    if pixel_values.dim() != 4 or pixel_values.shape[-1] != dim or not pixel_values.is_floating_point():
        raise InputError(
            f"pixel_values have shape {tuple(pixel_values.shape)} ({pixel_values.dtype}); this tower takes float"
            f" patches [batch, row, column, {dim}]: read images with its image processor."
        )
    rows, columns = int(pixel_values.shape[1]), int(pixel_values.shape[2])
    if rows % tower.multiple or columns % tower.multiple:
        raise InputError(
            f"a grid of {rows} × {columns} patches does not divide into the tower's {tower.multiple} ×"
            f" {tower.multiple} pooling windows; resize the images with its image processor."
        )
    names = [f"patch_{row}_{col}" for row in range(rows) for col in range(columns)]
    side = image_side(pixel_values, names, 0)
    if not decoder:
        return side
    return replace(side, decoder=decoder_text(processor or processor_default, decoder_inputs, decoder_limit, side.batch))


def _processed(processor: Any | None, images: Any, dim: int) -> Tensor:
    """Return pixel_values [batch, row, column, patch_dim] of images read by the tower's processor (its patches,
    `spatial_shapes` and padding), refused unless every image has the same grid."""
    if processor is None or not callable(processor):
        raise InputError("image input needs the model's image processor; pass the one interpret.load returned, or"
                         f" pixel_values [batch, row, column, {dim}].")
    images = list(images) if isinstance(images, (list, tuple)) else [images]
    made = processor(images=images, return_tensors="pt")
    grids = _grids(made)
    if grids is None:
        raise InputError(f"{type(processor).__name__} gave no spatial_shapes, image_position_ids or flattened patches;"
                         " pass the tower's own image processor.")
    patches = made["flattened_patches"][..., 2:] if "flattened_patches" in made else made["pixel_values"]
    distinct = set(grids)
    if len(distinct) > 1:
        raise InputError(
            f"the images make {len(distinct)} different patch grids ({', '.join('×'.join(map(str, g)) for g in sorted(distinct))});"
            " one batch needs one grid: resize the images to one size, or explain them one at a time."
        )
    rows, columns = distinct.pop()
    return patches[:, : rows * columns].reshape(len(images), rows, columns, patches.shape[-1]).float()


def _grids(made: Any) -> list[tuple[int, int]] | None:
    """Return each image's (rows, columns) of patches from a processor's output, after checking that its first
    rows × columns patches are the image's own in raster order and the rest padding; None when it says neither."""
    if "spatial_shapes" in made:
        grids = [(int(rows), int(columns)) for rows, columns in made["spatial_shapes"].tolist()]
        mask = made.get("pixel_attention_mask")
        expected = None if mask is None else torch.stack([
            torch.arange(mask.shape[1]) < rows * columns for rows, columns in grids])
        if expected is not None and not torch.equal(mask.bool(), expected):
            raise InputError("the processor's mask does not mark each image's own patches first; pass the tower's own"
                             " image processor.")
        return grids
    if "flattened_patches" in made:  # (row, column) from 1 before each patch's values; 0 for padding
        located = made["flattened_patches"][..., :2].long().flip(-1) - 1  # [batch, patches, 2]: (column, row)
    elif "image_position_ids" in made:
        located = made["image_position_ids"]
    else:
        return None
    grids = []
    for where in located:  # [patches, 2]: (column, row), (-1, -1) for padding
        real = where[(where != -1).all(dim=-1)]
        rows, columns = int(real[:, 1].max()) + 1, int(real[:, 0].max()) + 1
        row, column = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
        if not torch.equal(where[: rows * columns], torch.stack([column, row], dim=-1).reshape(-1, 2).to(where)):
            raise InputError("the processor's patch positions are not each image's patches in raster order; pass the"
                             " tower's own image processor.")
        grids.append((rows, columns))
    return grids


def _discover(model: nn.Module, probe: Probe) -> ModelLayout:
    # a vision model whatever its input is called (Pix2Struct's flattened_patches); an encoder-decoder as such
    return model_layout(model, probe, vision=not getattr(model.config, "is_encoder_decoder", False))


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    return {**probe_image(model), **decoder_probe(model, next(model.parameters()).device, with_mask)}


def probe_image(model: nn.Module) -> dict[str, Any]:
    """Return the probe's image input: one image of `_PROBE_GRID` (times the tower's multiple) zero patches and
    where they lie."""
    tower = tower_of(model)
    parameter = next(model.parameters())
    rows, columns = (size * tower.multiple for size in _PROBE_GRID)
    pixel_values = torch.zeros(1, rows, columns, tower.patch_dim, device=parameter.device, dtype=parameter.dtype)
    return tower.inputs(pixel_values)


ADAPTER = HFAdapter(
    model_types=("siglip2_vision_model", "gemma4_vision", "pix2struct_vision_model", "pix2struct"),
    build=build,
    adds="patches of each image's own grid: images [batch, row, column, patch_dim] fed with their spatial_shapes and"
         " a mask, one position per patch in raster order",
)
