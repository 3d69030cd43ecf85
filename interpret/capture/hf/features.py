"""Adapter for speech models on log-mel features: Parakeet's and LASR's Fast Conformer encoders (CTC or bare),
Wav2Vec2-BERT, and Speech2Text (an encoder-decoder: its decoder side is text, `decoder_inputs`).

What it adds over the generic adapter: the input. These models read `input_features` [batch, frame, feature]
(log-mel frames, 10 ms apart for the released models; Wav2Vec2-BERT stacks two) with a frame mask, and attend
over the frames left after their own subsampling (Parakeet: a strided convolution, 8× for the released models;
Wav2Vec2-BERT: none); those are the positions, named `audio_0`, `audio_1`, .... Raw clips (1-D arrays or
tensors) are read by the feature extractor `interpret.load` returned, at its own sampling rate, and its frame
mask is given to the model as its attention mask; a tensor of features is taken as it is, every frame real. The
position count and each example's position mask come from the model's own `_get_subsampling_output_length` and
`_get_output_attention_mask` (Parakeet, LASR) or `_get_feat_extract_output_lengths` and
`_get_feature_vector_attention_mask` (Wav2Vec2-BERT), never a re-derived formula (`speech.frame_lengths`,
`speech.frame_mask`, shared with the raw-waveform adapter). The probe pass feeds zero features of a few frames.
Everything else (the Conformer stack, its relative positions, which its attention receives, projections, MLPs,
norms) is the generic adapter's.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.speech import decoder_probe, frame_lengths, frame_mask, prepare_waveforms, probe_samples
from interpret.capture.hf.structure import ADAPTERS_HINT
from interpret.capture.sites import Capturable
from interpret.errors import UnsupportedModelError

NAME = "features"
_SIZE_FIELDS = ("num_mel_bins", "feature_projection_input_dim")  # Parakeet and LASR; Wav2Vec2-BERT


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a log-mel speech encoder (the bare encoder or one with a CTC head)."""
    layout = generic.layout_of(model, inputs=_probe_inputs)
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    prepare = partial(prepare_waveforms, frames=partial(frame_lengths, model), frame_mask=partial(frame_mask, model),
                      dtype=_parameter(model).dtype, features=feature_size(model), encoder_decoder=encoder_decoder,
                      decoder_limit=layout.max_positions if encoder_decoder else None)
    return generic.capturable(model, replace(layout, max_positions=None), adapter=NAME, prepare=prepare)


def feature_size(model: nn.Module) -> int:
    """Return the size of one feature frame, from the config (or its encoder config; Speech2Text's is its
    features per channel times its channels)."""
    config = model.config
    per_channel = getattr(config, "input_feat_per_channel", None)
    if isinstance(per_channel, int) and per_channel > 0:
        return per_channel * int(getattr(config, "input_channels", 1) or 1)
    for holder in (config, getattr(config, "encoder_config", None)):
        for field in _SIZE_FIELDS:
            value = getattr(holder, field, None)
            if isinstance(value, int) and value > 0:
                return value
    raise UnsupportedModelError(
        f"{type(config).__name__} states no feature size ({', '.join(_SIZE_FIELDS)}); {ADAPTERS_HINT} that prepares"
        " its input."
    )


def _parameter(model: nn.Module) -> torch.Tensor:
    """Return the model's first floating-point parameter: its device and dtype are the features'."""
    return next(param for param in model.parameters() if param.is_floating_point())


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    """Return the probe's inputs: zero features [1, frames, feature] of a few positions (also on meta)."""
    parameter = _parameter(model)
    features = torch.zeros(1, probe_samples(model), feature_size(model), device=parameter.device, dtype=parameter.dtype)
    inputs: dict[str, Any] = {"input_features": features, **decoder_probe(model, parameter.device, with_mask)}
    if with_mask:
        inputs["attention_mask"] = torch.ones(features.shape[:2], dtype=torch.long, device=parameter.device)
    return inputs


ADAPTER = HFAdapter(
    model_types=("parakeet_ctc", "parakeet_encoder", "lasr_ctc", "lasr_encoder", "wav2vec2-bert", "speech_to_text"),
    build=build,
    adds="audio input: log-mel features, positions the frames after the model's own subsampling (audio_i)",
)
