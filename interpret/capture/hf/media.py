"""Image and audio inputs made into an Encoded: pixel values or audio features, and names for the positions.

A vision model's positions are its special tokens (the class token, DeiT's distillation token, registers)
followed by the patches row by row: `[CLS]`, `patch_0_0`, `patch_0_1`, ... (row, column). Inputs are pixel
values [batch, channel, height, width] or images (PIL or arrays) with the image processor that
`interpret.load` returned; a video model's are clips [batch, frame, channel, height, width] or videos (lists of
frames) with its processor. An audio encoder's positions are its frames after the model's own downsampling
(`audio_0`, `audio_1`, ...); inputs are log-mel features [batch, mel, frame] or raw audio with the model's
feature extractor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

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
    decoder: bool = False,
    decoder_limit: int | None = None,
) -> Encoded:
    """Return the Encoded of images: pixel_values [batch, channel, height, width], specials + patches positions,
    and, for an encoder-decoder reading them (`decoder`: TrOCR), the decoder side from `decoder_inputs`."""
    names = patch_names((image_size[0] // patch_size[0], image_size[1] // patch_size[1]), specials)
    return prepare_pixels(processor, inputs, max_length=max_length, decoder_inputs=decoder_inputs,
                          shape=(channels, *image_size), names=names, specials=len(specials), decoder=decoder,
                          decoder_limit=decoder_limit)


def prepare_pixels(
    processor: Any | None,
    inputs: Any,
    *,
    max_length: int | None = None,
    decoder_inputs: Any | None = None,
    shape: tuple[int, ...],
    names: Sequence[str],
    specials: int,
    decoder: bool = False,
    decoder_limit: int | None = None,
) -> Encoded:
    """Return the Encoded of images or clips (`pixels`, each of `shape`) whose positions are `names`, the first
    `specials` of them special, with the decoder side read from `decoder_inputs` for an encoder-decoder
    (`decoder`, its side's limit `decoder_limit`); an Encoded is taken as it is."""
    kind = _Media.of(shape)
    if max_length is not None:
        raise InputError(f"max_length does not apply to a {kind.model} model; drop it.")
    check_decoder_inputs(decoder, decoder_inputs, f"this {kind.model} model", encoded=isinstance(inputs, Encoded))
    if isinstance(inputs, Encoded):
        if inputs.pixel_values is None or inputs.pixel_values.dim() != len(shape) + 1:
            raise InputError(f"this Encoded has no {kind.things}; a {kind.model} model needs {kind.things} or"
                             f" pixel_values {kind.axes}.")
        return inputs
    side = image_side(pixels(processor, inputs, shape=shape), names, specials)
    return replace(side, decoder=decoder_text(processor, decoder_inputs, decoder_limit, side.batch)) if decoder else side


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


def audio_side(features: Tensor, positions: int, decoder: Encoded | None = None) -> Encoded:
    """Return the Encoded of log-mel features [batch, mel, frame] whose `positions` encoder positions, all real,
    are `audio_0`, `audio_1`, ... (the same for every clip), with the decoder side where there is one."""
    batch = int(features.shape[0])
    names = [f"audio_{i}" for i in range(positions)]
    return Encoded(
        attention_mask=torch.ones(batch, positions, dtype=torch.long),
        tokens=[list(names) for _ in range(batch)],
        special=torch.zeros(batch, positions, dtype=torch.bool),
        input_features=features,
        decoder=decoder,
    )


@dataclass(frozen=True)
class _Media:
    """How the messages name what a vision or video model takes."""

    model: str
    things: str
    given: str
    axes: str
    processor: str

    @classmethod
    def of(cls, shape: tuple[int, ...]) -> _Media:
        """Images for a per-example shape [channel, height, width], clips for [frame, channel, height, width]."""
        if len(shape) == 4:
            return cls("video", "clips", "videos (each a list of frames)", "[batch, frame, channel, height, width]",
                       "the model's image or video processor")
        return cls("vision", "images", "PIL images", "[batch, channel, height, width]", "an image processor")


def pixels(processor: Any | None, inputs: Any, *, shape: tuple[int, ...]) -> Tensor:
    """Return pixel values [batch, *shape] from a tensor, or from images (clips: lists of frames) and a processor:
    images [batch, channel, height, width], or a video model's clips [batch, frame, channel, height, width]."""
    kind = _Media.of(shape)
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError(
            f"a {kind.model} model takes {kind.things}, not text; pass {kind.given} or pixel_values {kind.axes}."
        )
    if isinstance(inputs, Tensor):
        pixel_values = inputs
    elif processor is None or not callable(processor):
        raise InputError(
            f"{'image' if kind.model == 'vision' else 'video'} input needs {kind.processor}; pass the one"
            f" interpret.load returned, or a tensor of pixel_values {kind.axes}."
        )
    elif kind.model == "video":  # a video processor's first parameter is `videos`, an image processor's `images`
        read = processor(list(inputs), return_tensors="pt")  # V-JEPA 2's video processor: `pixel_values_videos`
        pixel_values = read["pixel_values_videos" if "pixel_values_videos" in read else "pixel_values"]
    else:
        images = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        pixel_values = processor(images=images, return_tensors="pt")["pixel_values"]
    if (pixel_values.dim() != len(shape) + 1 or not pixel_values.is_floating_point()
            or tuple(pixel_values.shape[1:]) != shape):
        fix = ("resize with the image processor" if kind.model == "vision"
               else f"{shape[0]} frames, resized with its processor")
        raise InputError(
            f"pixel_values have shape {tuple(pixel_values.shape)} ({pixel_values.dtype}); this model takes float"
            f" [batch, {', '.join(map(str, shape))}]: {fix}."
        )
    return pixel_values


def check_decoder_inputs(decoder: bool, decoder_inputs: Any, family: str, *, encoded: bool = False) -> None:
    """Refuse decoder inputs given to a model without a decoder, and their absence where it has one (`encoded`: the
    input is an Encoded, which carries its decoder side); `family` names the model in the message."""
    if decoder and decoder_inputs is None and not encoded:
        raise InputError(f"{family} needs decoder inputs; pass decoder_inputs= (text or token ids).")
    if not decoder and decoder_inputs is not None:
        raise InputError(f"{family} is an encoder alone: it takes no decoder inputs; drop decoder_inputs=.")


def feature_extractor(processor: Any | None, family: str, features: str) -> Any:
    """Return the feature extractor that reads raw audio: the processor's, or the processor itself when it is one;
    refuse in one line when there is none (`features`: the tensor to pass instead, e.g. "[batch, 80, 3000]")."""
    extractor = getattr(processor, "feature_extractor", None)
    if extractor is None and hasattr(processor, "sampling_rate") and callable(processor):
        extractor = processor
    if extractor is None:
        raise InputError(f"raw audio needs {family}'s feature extractor; pass the processor or feature extractor"
                         f" interpret.load returned, or log-mel features {features}.")
    return extractor


def decoder_text(processor: Any | None, decoder_inputs: Any, limit: int | None, batch: int) -> Encoded:
    """Return the decoder side of an encoder-decoder whose encoder reads audio or images (Whisper, Speech2Text,
    Pix2Struct): `decoder_inputs` read with the processor's tokenizer (or the tokenizer itself), one per clip or
    image of the `batch`. A feature extractor or image processor alone holds no tokenizer: token ids are then named
    by their numbers, and text is refused."""
    tokenizer = getattr(processor, "tokenizer", processor)
    if not hasattr(tokenizer, "convert_ids_to_tokens"):
        tokenizer = None
    decoder = text_side(tokenizer, decoder_inputs, limit)
    if decoder.batch != batch:
        raise InputError(
            f"decoder inputs have {decoder.batch} examples but the encoder's input {batch}; give one decoder input per"
            " example."
        )
    return decoder


def text_side(
    tokenizer: Any | None, inputs: Any, limit: int | None, *, max_length: int | None = None,
    padding_side: Literal["left", "right"] | None = None,
) -> Encoded:
    """Return the Encoded of one text side (a decoder's inputs, a dual encoder's texts): text with the
    tokenizer (cut to `max_length` if given, padded on `padding_side`, by default the tokenizer's), token ids
    [batch, pos], or an Encoded, checked against `limit` positions."""
    if isinstance(inputs, Encoded):
        encoded = inputs
    elif isinstance(inputs, Tensor) and not inputs.is_floating_point():
        encoded = from_ids(inputs, tokenizer=tokenizer)
    elif isinstance(inputs, str) or (isinstance(inputs, Sequence) and inputs and all(isinstance(t, str) for t in inputs)):
        if tokenizer is None or not callable(tokenizer):
            raise InputError("text input needs a tokenizer; pass the one interpret.load returned, or token ids.")
        return encode(tokenizer, inputs, limit=model_limit(tokenizer, limit), max_length=max_length,
                      padding_side=padding_side)
    else:
        raise InputError(
            f"text inputs of type {type(inputs).__name__} are not understood; pass text, a list of texts or token"
            " ids [batch, pos]."
        )
    if limit is not None and encoded.pos > limit:
        raise InputError(f"the text has {encoded.pos} positions but the model accepts at most {limit}; shorten it.")
    return encoded
