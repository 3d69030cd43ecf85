"""Adapter for the Audio Spectrogram Transformer (AST): a ViT over a log-mel spectrogram.

What it adds over the generic adapter: the input. AST reads `input_values` [batch, frame, mel], a fixed-length
log-mel spectrogram (1,024 frames of 10 ms and 128 mel bins for the released models), and cuts it into
overlapping patches with a strided convolution over (frequency, time). Its positions are a class token, a
distillation token and the patches, frequency band by band: `[CLS]`, `[DIST]`, `patch_0_0`, `patch_0_1`, ...
(`patch_{frequency}_{time}`, as an image's `patch_{row}_{col}`), the grid from the model's own
`ASTEmbeddings.get_shape`. Raw clips (1-D arrays or tensors) are made into `input_values` by the feature
extractor `interpret.load` returned, at its sampling rate; it pads or cuts every clip to the model's length
and gives no mask, so every position is real (padding is silence the model reads). The probe pass feeds a
zero spectrogram of the model's shape. Everything else is the generic adapter's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.media import image_side, patch_names
from interpret.capture.hf.speech import clips, extract
from interpret.capture.hf.structure import ADAPTERS_HINT
from interpret.capture.sites import Capturable
from interpret.errors import InputError, UnsupportedModelError
from interpret.inputs import Encoded

NAME = "spectrogram"
SPECIALS = ("[CLS]", "[DIST]")


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of an AST model (ASTModel, ASTForAudioClassification)."""
    layout = generic.layout_of(model, inputs=_probe_inputs)
    frames, mels = _shape(model)
    grid = patch_grid(model)
    names = patch_names(grid, SPECIALS)
    if layout.positions != len(names):
        raise UnsupportedModelError(
            f"{type(model).__name__} attends over {layout.positions} positions, not its {len(names)} (2 tokens and a"
            f" {grid[0]} × {grid[1]} patch grid); {ADAPTERS_HINT} that maps its positions to the spectrogram."
        )
    prepare = partial(prepare_spectrograms, frames=frames, mels=mels, names=names)
    return generic.capturable(model, replace(layout, max_positions=None), adapter=NAME, prepare=prepare)


def _shape(model: nn.Module) -> tuple[int, int]:
    """Return (frames, mel bins) of the spectrogram the model takes."""
    return int(model.config.max_length), int(model.config.num_mel_bins)


def patch_grid(model: nn.Module) -> tuple[int, int]:
    """Return the patch grid (frequency patches, time patches), by the model's own `get_shape`."""
    for module in model.modules():
        if callable(getattr(type(module), "get_shape", None)):
            frequency, time = module.get_shape(model.config)
            return int(frequency), int(time)
    raise UnsupportedModelError(
        f"{type(model).__name__} has no patch embedding that states its grid; {ADAPTERS_HINT} that prepares its input."
    )


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    """Return the probe's input: a zero spectrogram [1, frames, mel] (also on the meta device)."""
    parameter = next(model.parameters())
    return {"input_values": torch.zeros(1, *_shape(model), device=parameter.device, dtype=parameter.dtype)}


_WHAT = "pass a log-mel spectrogram [batch, frame, mel] as the model takes it, or a list of 1-D float clips with the" \
        " feature extractor"


def prepare_spectrograms(
    processor: Any | None,
    inputs: Any,
    *,
    max_length: int | None = None,
    decoder_inputs: Any | None = None,
    frames: int,
    mels: int,
    names: Sequence[str],
) -> Encoded:
    """Return the Encoded of spectrograms: input_values [batch, frames, mels] (float) and the positions `names`
    (the two tokens, then the patches), all real.

    inputs: spectrograms [batch, frames, mels] (a float tensor or array), or one clip or a list of clips (1-D
        float arrays or tensors) with the feature extractor `interpret.load` returned, or an Encoded made here.
    """
    if max_length is not None:
        raise InputError("max_length does not apply to AST (it reads a fixed-length spectrogram); drop it.")
    if decoder_inputs is not None:
        raise InputError("decoder inputs do not apply to an audio classifier; drop them.")
    if isinstance(inputs, Encoded):
        if inputs.input_values is None or inputs.input_values.dim() != 3:
            raise InputError("this Encoded has no spectrogram (input_values [batch, frame, mel]); AST needs audio.")
        return inputs
    values = spectrograms(processor, inputs)
    if tuple(values.shape[1:]) != (frames, mels) or not values.is_floating_point():
        raise InputError(
            f"the spectrogram has shape {tuple(values.shape)} ({values.dtype}); this model takes float"
            f" [batch, {frames}, {mels}] (frames, mel bins): use its own feature extractor."
        )
    encoded = image_side(values, names, len(SPECIALS))
    return replace(encoded, pixel_values=None, input_values=values)


def spectrograms(processor: Any | None, inputs: Any) -> Tensor:
    """Return input_values [batch, frame, mel] from a spectrogram tensor or array, or from clips and the
    feature extractor."""
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError(f"an audio model takes audio, not text; {_WHAT} interpret.load returned.")
    if isinstance(inputs, (Tensor, np.ndarray)) and inputs.ndim == 3:
        return torch.as_tensor(inputs).cpu()
    if isinstance(inputs, Tensor) or (isinstance(inputs, np.ndarray) and inputs.ndim != 1):
        raise InputError(f"audio of shape {tuple(inputs.shape)} is not understood; {_WHAT} interpret.load returned.")
    out = extract(processor, clips(inputs, _WHAT))
    if "input_values" not in out or out["input_values"].dim() != 3:
        raise InputError(
            f"{type(getattr(processor, 'feature_extractor', processor)).__name__} did not return a spectrogram"
            " (input_values [batch, frame, mel]); this model needs its own feature extractor (ASTFeatureExtractor)."
        )
    return out["input_values"].float()


ADAPTER = HFAdapter(
    model_types=("audio-spectrogram-transformer",),
    build=build,
    adds="audio input: a log-mel spectrogram, positions [CLS], [DIST] and its patches (patch_{frequency}_{time})",
)
