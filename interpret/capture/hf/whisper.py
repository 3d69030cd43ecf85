"""Adapter for Whisper: a speech encoder-decoder on log-mel features.

What it adds over the generic adapter: the input. Whisper's encoder takes log-mel features
[batch, mel, frame] of a fixed length (2 × max_source_positions frames, 30 s for the released models) and
halves the frames with a strided convolution, so the encoder's positions are `max_source_positions` steps
of 20 ms, named `audio_0`, `audio_1`, ...; its decoder takes text (`decoder_inputs`). The probe pass feeds
features of that length. Everything else (encoder and decoder stacks, cross attention, projections, MLPs,
norms, gates) is the generic adapter's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.media import audio_decoder
from interpret.capture.hf.speech import decoder_probe
from interpret.capture.sites import Capturable
from interpret.errors import InputError
from interpret.inputs import Encoded


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a Whisper model (WhisperModel, WhisperForConditionalGeneration)."""
    layout = generic.layout_of(model, inputs=_probe_inputs)
    mels, frames, positions = _sizes(model)
    prepare = partial(prepare_audio, mels=mels, frames=frames, positions=positions, decoder_limit=layout.max_positions)
    return generic.capturable(model, replace(layout, max_positions=None), adapter="whisper", prepare=prepare)


def _sizes(model: nn.Module) -> tuple[int, int, int]:
    """Return (mel bins, feature frames, encoder positions) from the config."""
    config = model.config
    positions = int(config.max_source_positions)
    return int(config.num_mel_bins), 2 * positions, positions


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    mels, frames, _ = _sizes(model)
    parameter = next(model.parameters())
    features = torch.zeros(1, mels, frames, device=parameter.device, dtype=parameter.dtype)
    return {"input_features": features, **decoder_probe(model, parameter.device, with_mask)}


def prepare_audio(
    processor: Any | None,
    inputs: Any,
    *,
    max_length: int | None = None,
    decoder_inputs: Any | None = None,
    mels: int,
    frames: int,
    positions: int,
    decoder_limit: int | None,
) -> Encoded:
    """Return the Encoded of audio: input_features [batch, mel, frame], encoder positions `audio_{i}`, and
    the decoder side from `decoder_inputs` (text with the tokenizer, or token ids)."""
    if max_length is not None:
        raise InputError("max_length does not apply to audio (Whisper reads fixed 30 s windows); drop it.")
    if decoder_inputs is None:
        raise InputError("Whisper needs decoder inputs; pass decoder_inputs= (text or token ids).")
    features = _features(processor, inputs, mels=mels, frames=frames)
    batch = int(features.shape[0])
    names = [f"audio_{i}" for i in range(positions)]
    decoder = audio_decoder(processor, decoder_inputs, decoder_limit, batch)
    return Encoded(
        attention_mask=torch.ones(batch, positions, dtype=torch.long),
        tokens=[list(names) for _ in range(batch)],
        special=torch.zeros(batch, positions, dtype=torch.bool),
        input_features=features,
        decoder=decoder,
    )


def _features(processor: Any | None, inputs: Any, *, mels: int, frames: int) -> Tensor:
    """Return log-mel features [batch, mel, frame] from a tensor, or from raw audio and a feature extractor."""
    if isinstance(inputs, Encoded):
        if inputs.input_features is None:
            raise InputError("this Encoded has no input_features; Whisper needs audio features or raw audio.")
        return inputs.input_features
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError("Whisper takes audio, not text; pass log-mel features [batch, mel, frame] or raw audio arrays.")
    if isinstance(inputs, Tensor) and inputs.dim() == 3:
        features = inputs
    else:
        extractor = getattr(processor, "feature_extractor", None)
        if extractor is None:
            raise InputError(
                "raw audio needs Whisper's feature extractor; pass a WhisperProcessor as the tokenizer, or log-mel"
                f" features [batch, {mels}, {frames}]."
            )
        clips = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        rate = getattr(extractor, "sampling_rate", 16000)
        features = extractor(clips, sampling_rate=rate, return_tensors="pt")["input_features"]
    if not features.is_floating_point() or tuple(features.shape[1:]) != (mels, frames):
        raise InputError(
            f"audio features have shape {tuple(features.shape)} ({features.dtype}); this model takes float"
            f" [batch, {mels}, {frames}] (pad or cut the audio to the model's window)."
        )
    return features


ADAPTER = HFAdapter(
    model_types=("whisper",),
    build=build,
    adds="audio input: log-mel features, encoder positions after the convolutional downsampling (audio_i)",
)
