"""Adapter for video Transformers over tubelets: VideoMAE and ViViT.

What it adds over the generic adapter: the input. These models read `pixel_values` [batch, frame, channel,
height, width] and cut the clip into tubelets of `tubelet` frames × one patch (a 3-D convolution, flattened in
(time, row, column) order), so a position is one tubelet: `t{time}_patch_{row}_{col}`, after ViViT's class token
(`[CLS]`). Clips are read by the model's image or video processor (a list of videos, each a list of frames), or
taken as a tensor [batch, frame, channel, height, width] at the config's frame count and size. The probe pass
feeds one zero clip of that shape. Everything else (the stack of blocks, projections, MLPs, norms) is the generic
adapter's. TimeSformer, whose blocks run a temporal and a spatial attention each, is not served.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.media import image_side, pair
from interpret.capture.sites import Capturable
from interpret.errors import InputError, UnsupportedModelError
from interpret.inputs import Encoded

NAME = "video"


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a VideoMAE or ViViT model: tubelet positions, after a class token where it has one."""
    layout = generic.layout_of(model, inputs=_probe_inputs)
    frames, size, patch, tubelet, channels = clip_sizes(model)
    grid = (frames // tubelet, size[0] // patch[0], size[1] // patch[1])
    extra = layout.positions - grid[0] * grid[1] * grid[2]
    if extra not in (0, 1):
        raise UnsupportedModelError(
            f"{type(model).__name__} attends over {layout.positions} positions, not its {grid[0]} × {grid[1]} ×"
            f" {grid[2]} tubelets (and a class token); the {NAME} adapter does not match it."
        )
    specials = ["[CLS]"][:extra]
    names = [*specials, *(f"t{t}_patch_{r}_{c}" for t, r, c in itertools.product(*map(range, grid)))]
    prepare = partial(prepare_clips, shape=(frames, channels, *size), names=names, specials=len(specials))
    return generic.capturable(model, layout, adapter=NAME, prepare=prepare)


def clip_sizes(model: nn.Module) -> tuple[int, tuple[int, int], tuple[int, int], int, int]:
    """Return (frames, image size, patch size, frames per tubelet, channels) from the config: `tubelet_size` is
    VideoMAE's frame count with `patch_size`, or ViViT's [frames, height, width]."""
    config = model.config
    tubelet = getattr(config, "tubelet_size", None)
    if isinstance(tubelet, Sequence) and len(tubelet) == 3:
        frames_per, patch = int(tubelet[0]), (int(tubelet[1]), int(tubelet[2]))
    elif isinstance(tubelet, int) and getattr(config, "patch_size", None) is not None:
        frames_per, patch = tubelet, pair(config.patch_size)
    else:
        raise UnsupportedModelError(
            f"{type(config).__name__} states no tubelet size; the {NAME} adapter does not match it."
        )
    size = pair(config.image_size)
    frames = int(config.num_frames)
    if frames % frames_per or size[0] % patch[0] or size[1] % patch[1]:
        raise UnsupportedModelError(
            f"{type(config).__name__}'s {frames} frames of {size[0]} × {size[1]} do not divide into tubelets of"
            f" {frames_per} × {patch[0]} × {patch[1]}; the {NAME} adapter does not match it."
        )
    return frames, size, patch, frames_per, int(getattr(config, "num_channels", 3) or 3)


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    """Return the probe's input: one zero clip [1, frame, channel, height, width] at the config's shape."""
    frames, size, _, _, channels = clip_sizes(model)
    parameter = next(model.parameters())
    return {"pixel_values": torch.zeros(1, frames, channels, *size, device=parameter.device, dtype=parameter.dtype)}


def prepare_clips(
    processor: Any | None,
    inputs: Any,
    *,
    max_length: int | None = None,
    decoder_inputs: Any | None = None,
    shape: tuple[int, int, int, int],
    names: list[str],
    specials: int,
) -> Encoded:
    """Return the Encoded of clips: pixel_values [batch, frame, channel, height, width], one position per tubelet."""
    if decoder_inputs is not None or max_length is not None:
        raise InputError("decoder inputs and max_length do not apply to a video model; drop them.")
    if isinstance(inputs, Encoded):
        if inputs.pixel_values is None or inputs.pixel_values.dim() != 5:
            raise InputError("this Encoded has no clips; a video model needs pixel_values [batch, frame, channel,"
                             " height, width].")
        return inputs
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError("a video model takes clips, not text; pass videos (each a list of frames) or pixel_values"
                         " [batch, frame, channel, height, width].")
    if isinstance(inputs, Tensor):
        pixel_values = inputs
    elif processor is None or not callable(processor):
        raise InputError("video input needs the model's image or video processor; pass the one interpret.load"
                         " returned, or a tensor of pixel_values [batch, frame, channel, height, width].")
    else:
        pixel_values = processor(list(inputs), return_tensors="pt")["pixel_values"]
    if pixel_values.dim() != 5 or not pixel_values.is_floating_point() or tuple(pixel_values.shape[1:]) != shape:
        frames, channels, height, width = shape
        raise InputError(
            f"pixel_values have shape {tuple(pixel_values.shape)} ({pixel_values.dtype}); this model takes float"
            f" [batch, {frames}, {channels}, {height}, {width}]: {frames} frames, resized with its processor."
        )
    return image_side(pixel_values, names, specials)


ADAPTER = HFAdapter(
    model_types=("videomae", "vivit"),
    build=build,
    adds="video input: clips [batch, frame, channel, height, width], one position per tubelet (t{time}_patch_{row}_{col})",
)
