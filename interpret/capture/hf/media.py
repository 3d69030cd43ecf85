"""Image and audio inputs made into an Encoded: pixel values or audio features, and names for the positions.

A vision model's positions are its special tokens (the class token, DeiT's distillation token, registers)
followed by the patches row by row: `[CLS]`, `patch_0_0`, `patch_0_1`, ... (row, column). Inputs are pixel
values [batch, channel, height, width] or images (PIL or arrays) with the image processor that
`interpret.load` returned. An audio encoder's positions are its frames after the model's own downsampling
(`audio_0`, `audio_1`, ...); inputs are log-mel features [batch, mel, frame] or raw audio with the model's
feature extractor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from interpret.errors import InputError
from interpret.inputs import Encoded, encode, from_ids, model_limit


def pair(value: Any) -> tuple[int, int]:
    """Return (height, width) from an int or a pair (configs give image and patch sizes either way)."""
    return (int(value[0]), int(value[1])) if isinstance(value, Sequence) else (int(value), int(value))


def patch_names(grid: tuple[int, int], specials: Sequence[str] = ("[CLS]",)) -> list[str]:
    """Return the position names: `specials` first, then `patch_{row}_{col}` row by row over `grid`."""
    return list(specials) + [f"patch_{row}_{col}" for row in range(grid[0]) for col in range(grid[1])]


def prepare_images(
    processor: Any | None,
    inputs: Any,
    *,
    max_length: int | None = None,
    decoder_inputs: Any | None = None,
    image_size: tuple[int, int],
    patch_size: tuple[int, int],
    channels: int,
    specials: Sequence[str] = ("[CLS]",),
) -> Encoded:
    """Return the Encoded of images: pixel_values [batch, channel, height, width], specials + patches positions."""
    if decoder_inputs is not None or max_length is not None:
        raise InputError("decoder inputs and max_length do not apply to a vision model; drop them.")
    if isinstance(inputs, Encoded):
        if inputs.pixel_values is None:
            raise InputError("this Encoded has no pixel_values; a vision model needs images or pixel values.")
        return inputs
    pixel_values = pixels(processor, inputs, image_size=image_size, channels=channels)
    names = patch_names((image_size[0] // patch_size[0], image_size[1] // patch_size[1]), specials)
    return image_side(pixel_values, names, len(specials))


def image_side(pixel_values: Tensor, names: Sequence[str], specials: int) -> Encoded:
    """Return the Encoded of images `pixel_values` [batch, channel, height, width] (or clips [batch, frame, channel,
    height, width]) whose positions are `names` (the same for every image), the first `specials` of them special."""
    batch = int(pixel_values.shape[0])
    special = torch.zeros(batch, len(names), dtype=torch.bool)
    special[:, :specials] = True
    return Encoded(
        attention_mask=torch.ones(batch, len(names), dtype=torch.long),
        tokens=[list(names) for _ in range(batch)],
        special=special,
        pixel_values=pixel_values,
    )


def pixels(processor: Any | None, inputs: Any, *, image_size: tuple[int, int], channels: int) -> Tensor:
    """Return pixel values [batch, channel, height, width] from a tensor or from images and a processor."""
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError(
            "a vision model takes images, not text; pass PIL images or pixel_values [batch, channel, height, width]."
        )
    if isinstance(inputs, Tensor):
        pixel_values = inputs
    elif processor is None or not callable(processor):
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
    return pixel_values


def audio_decoder(processor: Any | None, decoder_inputs: Any, limit: int | None, batch: int) -> Encoded:
    """Return the decoder side of a speech encoder-decoder (Whisper, Speech2Text): `decoder_inputs` read with the
    processor's tokenizer (or the tokenizer itself), one per clip of the `batch`."""
    decoder = text_side(getattr(processor, "tokenizer", processor), decoder_inputs, limit)
    if decoder.batch != batch:
        raise InputError(
            f"decoder inputs have {decoder.batch} examples but the audio {batch}; give one decoder input per example."
        )
    return decoder


def text_side(tokenizer: Any | None, inputs: Any, limit: int | None, *, max_length: int | None = None) -> Encoded:
    """Return the Encoded of one text side (a decoder's inputs, a dual encoder's texts): text with the
    tokenizer (cut to `max_length` if given), token ids [batch, pos], or an Encoded, checked against `limit`
    positions."""
    if isinstance(inputs, Encoded):
        encoded = inputs
    elif isinstance(inputs, Tensor) and not inputs.is_floating_point():
        encoded = from_ids(inputs, tokenizer=tokenizer)
    elif isinstance(inputs, str) or (isinstance(inputs, Sequence) and inputs and all(isinstance(t, str) for t in inputs)):
        if tokenizer is None or not callable(tokenizer):
            raise InputError("text input needs a tokenizer; pass the one interpret.load returned, or token ids.")
        return encode(tokenizer, inputs, limit=model_limit(tokenizer, limit), max_length=max_length)
    else:
        raise InputError(
            f"text inputs of type {type(inputs).__name__} are not understood; pass text, a list of texts or token"
            " ids [batch, pos]."
        )
    if limit is not None and encoded.pos > limit:
        raise InputError(f"the text has {encoded.pos} positions but the model accepts at most {limit}; shorten it.")
    return encoded
