"""Adapter for video Transformers over tubelets: VideoMAE, ViViT and V-JEPA 2.

What it adds over the generic adapter: the input. These models read a clip [batch, frame, channel, height,
width] (`pixel_values`; V-JEPA 2's `pixel_values_videos`) and cut it into tubelets of `tubelet` frames × one patch
(a 3-D convolution, flattened in (time, row, column) order), so a position is one tubelet: `t{time}_patch_{row}_{col}`,
after ViViT's class token (`[CLS]`). Clips are read by the model's image or video processor (a list of videos,
each a list of frames), or taken as a tensor [batch, frame, channel, height, width] at the config's frame count
(`num_frames`; V-JEPA 2's `frames_per_clip`) and size (`image_size`; `crop_size`). V-JEPA 2's base model is run
with `skip_predictor`: its predictor, the self-supervised objective's network that predicts masked tubelets'
features from the others, is not part of what the encoder computes for a clip (its classifier has no predictor).
The probe pass feeds one zero clip of that shape. Everything else (the stack of blocks, projections, MLPs, norms)
is the generic adapter's. Models that factor attention over time and space are fed their clips (a patch per frame
where the config sets no tubelet) and refused for what their probe shows: TimeSformer's blocks run a temporal and a
spatial attention each, VideoPrism runs a stack over each frame's patches then a stack over each patch's frames;
neither has one position × position pattern per layer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.media import pair, prepare_pixels
from interpret.capture.sites import Capturable
from interpret.errors import UnsupportedModelError

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
    prepare = partial(prepare_pixels, shape=(frames, channels, *size), names=names, specials=len(specials))
    return generic.capturable(model, layout, adapter=NAME, prepare=prepare, pixels=feed_of(model))


def feed_of(model: nn.Module) -> Callable[[torch.Tensor], dict[str, Any]]:
    """Return how `model` is run on clips [batch, frame, channel, height, width]: the keyword arguments under the
    name its forward takes them by, with V-JEPA 2's predictor skipped (read from the signature once)."""
    parameters = generic.forward_parameters(model)
    name = "pixel_values_videos" if "pixel_values_videos" in parameters else "pixel_values"
    extra = {"skip_predictor": True} if "skip_predictor" in parameters else {}
    return lambda clips: {name: clips, **extra}


def clip_sizes(model: nn.Module) -> tuple[int, tuple[int, int], tuple[int, int], int, int]:
    """Return (frames, image size, patch size, frames per tubelet, channels) from the config: `tubelet_size` is
    VideoMAE's and V-JEPA 2's frame count with `patch_size`, or ViViT's [frames, height, width]; frames are
    `num_frames` (V-JEPA 2's `frames_per_clip`), the size `image_size` (V-JEPA 2's `crop_size`)."""
    config = model.config
    tubelet = getattr(config, "tubelet_size", None)
    if isinstance(tubelet, Sequence) and len(tubelet) == 3:
        frames_per, patch = int(tubelet[0]), (int(tubelet[1]), int(tubelet[2]))
    elif isinstance(tubelet, int) and getattr(config, "patch_size", None) is not None:
        frames_per, patch = tubelet, pair(config.patch_size)
    elif tubelet is None and getattr(config, "patch_size", None) is not None:  # a patch per frame (TimeSformer)
        frames_per, patch = 1, pair(config.patch_size)
    else:
        raise UnsupportedModelError(
            f"{type(config).__name__} states no tubelet size; the {NAME} adapter does not match it."
        )
    size = pair(config.image_size if hasattr(config, "image_size") else config.crop_size)
    frames = int(config.num_frames if hasattr(config, "num_frames") else config.frames_per_clip)
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
    return feed_of(model)(torch.zeros(1, frames, channels, *size, device=parameter.device, dtype=parameter.dtype))


ADAPTER = HFAdapter(
    model_types=("videomae", "vivit", "vjepa2", "timesformer", "videoprism_vision_model"),
    build=build,
    adds="video input: clips [batch, frame, channel, height, width], one position per tubelet (t{time}_patch_{row}_{col})",
)
