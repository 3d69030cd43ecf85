"""Adapter for Whisper and the audio encoders built on Whisper's (Qwen2-Audio's, Voxtral's, Audio Flamingo 3's,
MOSS's, GLM-ASR's: Whisper's convolutions under rotary blocks, its processor cutting audio into Whisper's 30 s
windows): speech on log-mel features.

What it adds over the generic adapter: the input. Whisper's encoder takes log-mel features
[batch, mel, frame] of a fixed length (2 × max_source_positions frames, 30 s for the released models) and
halves the frames with a strided convolution, so the encoder's positions are `max_source_positions` steps
of 20 ms, named `audio_0`, `audio_1`, ...; Whisper's decoder takes text (`decoder_inputs`), while the encoders
alone take none. Every frame of the window is real (the feature extractor pads the audio to it with its own
silence, as these models are trained on); an encoder that asks for a frame mask (`input_features_mask`) is given
one of ones. The probe pass feeds features of that length. Everything else (encoder and decoder stacks, cross
attention, projections, MLPs, norms, gates) is the generic adapter's.
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
from interpret.capture.hf.layout import run_model
from interpret.capture.hf.media import audio_side, check_decoder_inputs, decoder_text, feature_extractor
from interpret.capture.hf.speech import decoder_probe
from interpret.capture.sites import Capturable
from interpret.errors import InputError
from interpret.inputs import Encoded

_MASK = "input_features_mask"  # the frame mask some encoders built on Whisper's ask for (Audio Flamingo 3)


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a Whisper model (WhisperModel, WhisperForConditionalGeneration) or of an audio
    encoder built on Whisper's."""
    layout = generic.layout_of(model, inputs=_probe_inputs)
    mels, frames, positions = _sizes(model)
    decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    prepare = partial(prepare_audio, mels=mels, frames=frames, positions=positions, decoder_limit=layout.max_positions,
                      decoder=decoder, family=_family(model))
    made = generic.capturable(model, replace(layout, max_positions=None), adapter="whisper", prepare=prepare)
    return made if _MASK not in generic.forward_parameters(model) else replace(made, run=partial(_run_masked, model))


def _family(model: nn.Module) -> str:
    """Return the name the messages give the model: Whisper, or the encoder's class."""
    return "Whisper" if model.config.model_type == "whisper" else type(model).__name__


def _ones_mask(features: Tensor) -> Tensor:
    """Return the frame mask [batch, frame] of features [batch, mel, frame] whose every frame is real."""
    return torch.ones(features.shape[0], features.shape[-1], dtype=torch.long, device=features.device)


def _run_masked(model: nn.Module, encoded: Encoded) -> Any:
    """Run an encoder that asks for its frame mask (`input_features_mask`) with one of ones: every frame is real."""
    assert encoded.input_features is not None
    return run_model(model, encoded, disable_cache=False, extra={_MASK: _ones_mask(encoded.input_features)})


def _sizes(model: nn.Module) -> tuple[int, int, int]:
    """Return (mel bins, feature frames, encoder positions) from the config (GLM-ASR's encoder states its window
    of positions as `max_position_embeddings`)."""
    config = model.config
    positions = int(getattr(config, "max_source_positions", None) or config.max_position_embeddings)
    return int(config.num_mel_bins), 2 * positions, positions


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    mels, frames, _ = _sizes(model)
    parameter = next(model.parameters())
    features = torch.zeros(1, mels, frames, device=parameter.device, dtype=parameter.dtype)
    inputs = {"input_features": features, **decoder_probe(model, parameter.device, with_mask)}
    if _MASK in generic.forward_parameters(model):
        inputs[_MASK] = _ones_mask(features)
    return inputs


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
    decoder: bool = True,
    family: str = "Whisper",
) -> Encoded:
    """Return the Encoded of audio: input_features [batch, mel, frame], encoder positions `audio_{i}`, and, for a
    model with a decoder, the decoder side from `decoder_inputs` (text with the tokenizer, or token ids)."""
    if max_length is not None:
        raise InputError(f"max_length does not apply to audio ({family} reads fixed 30 s windows); drop it.")
    check_decoder_inputs(decoder, decoder_inputs, family)
    features = _features(processor, inputs, mels=mels, frames=frames, family=family)
    side = decoder_text(processor, decoder_inputs, decoder_limit, int(features.shape[0])) if decoder else None
    return audio_side(features, positions, side)


def _features(processor: Any | None, inputs: Any, *, mels: int, frames: int, family: str = "Whisper") -> Tensor:
    """Return log-mel features [batch, mel, frame] from a tensor, or from raw audio and a feature extractor (the
    processor's, or the processor itself when it is one)."""
    if isinstance(inputs, Encoded):
        if inputs.input_features is None:
            raise InputError(f"this Encoded has no input_features; {family} needs audio features or raw audio.")
        return inputs.input_features
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError(f"{family} takes audio, not text; pass log-mel features [batch, mel, frame] or raw audio"
                         " arrays.")
    if isinstance(inputs, Tensor) and inputs.dim() == 3:
        features = inputs
    else:
        extractor = feature_extractor(processor, family, f"[batch, {mels}, {frames}]")
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
    model_types=("whisper", "qwen2_audio_encoder", "voxtral_encoder", "audioflamingo3_encoder",
                 "moss_transcribe_diarize_audio", "glmasr_encoder"),
    build=build,
    adds="audio input: log-mel features, encoder positions after the convolutional downsampling (audio_i);"
         " the Whisper-based audio encoders alone (Qwen2-Audio, Voxtral, Audio Flamingo 3, MOSS, GLM-ASR)",
)
