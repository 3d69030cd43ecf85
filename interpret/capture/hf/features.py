"""Adapter for speech models on log-mel features: Parakeet's, LASR's and Nemotron's streaming Fast Conformer
encoders (bare, with a CTC head, or in a transducer: Parakeet RNN-T and TDT, Nemotron ASR), Nemotron 3's audio
encoders (frames stacked into positions: `speech.stacking`), Wav2Vec2-BERT, and the
encoder-decoders whose decoder reads text (`decoder_inputs`): Speech2Text, and Canary and Cohere ASR (a Parakeet
encoder under a Transformer decoder).

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
A model that stacks frames and states no length function (Nemotron 3's diarization and transcription audio
encoders) has ceil(frames / stack) positions, each real where its first frame is, as its own code masks them.
Models that hold their encoder as a submodule (Canary, Cohere ASR, the transducers) are measured by the
encoder's own functions (`get_encoder()`). Everything else (the Conformer stack, its relative positions or
limited-context mask, which its attention receives, projections, MLPs, norms) is the generic adapter's.

A transducer (RNN-T, TDT) states itself an encoder-decoder, but its decoder is a prediction network without
attention, so every attention is the encoder's and `decoder_inputs` are refused. It is run at its first decoding
step: the prediction network reads the token greedy decoding starts from (`start_token`), and the output is the
joint network's logits [batch, frame, vocab (+ durations for TDT)] for the first token at every frame, which the
decision reads as it reads a CTC head's. Nemotron 3.5 ASR is given no `prompt_ids` and so conditions on its
config's `default_prompt_id` (language detection), as transformers does.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.layout import run_model
from interpret.capture.hf.speech import decoder_probe, frame_lengths, frame_mask, prepare_waveforms, probe_samples
from interpret.capture.hf.structure import ADAPTERS_HINT
from interpret.capture.sites import Capturable
from interpret.errors import UnsupportedModelError
from interpret.inputs import Encoded

NAME = "features"
_SIZE_FIELDS = ("num_mel_bins", "feature_projection_input_dim")  # Parakeet and LASR; Wav2Vec2-BERT


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a log-mel speech model: an encoder (bare, or with a CTC head or a transducer's
    prediction and joint networks) or an encoder-decoder whose decoder reads text."""
    layout = generic.layout_of(model, inputs=_probe_inputs)
    # A transducer (RNN-T, TDT) states itself an encoder-decoder, but its decoder, the prediction network, has no
    # attention: the probe finds attention on the encoder side alone.
    transducer = bool(getattr(model.config, "is_encoder_decoder", False)) and layout.kind == "encoder"
    encoder_decoder = layout.kind == "encoder-decoder"
    prepare = partial(prepare_waveforms, frames=partial(frame_lengths, model), frame_mask=partial(frame_mask, model),
                      dtype=_parameter(model).dtype, features=feature_size(model), encoder_decoder=encoder_decoder,
                      decoder_limit=layout.max_positions if encoder_decoder else None)
    made = generic.capturable(model, replace(layout, max_positions=None), adapter=NAME, prepare=prepare)
    return replace(made, run=partial(_run_transducer, model, start_token(model))) if transducer else made


def start_token(model: nn.Module) -> int:
    """Return the token a transducer's greedy decoding starts its prediction network from: the generation
    config's `decoder_start_token_id`, else the blank token (NeMo's start state)."""
    generation = getattr(model, "generation_config", None)
    start = getattr(generation, "decoder_start_token_id", None)
    return int(start if isinstance(start, int) else model.config.blank_token_id)


def _run_transducer(model: nn.Module, start: int, encoded: Encoded) -> Any:
    """Run a transducer at its first decoding step: the prediction network reads the start token, so the output
    is the joint network's logits [batch, frame, vocab (+ durations)] for the first token at every frame."""
    assert encoded.input_features is not None
    ids = torch.full((encoded.input_features.shape[0], 1), start, dtype=torch.long, device=encoded.input_features.device)
    return run_model(model, encoded, disable_cache=False, extra={"decoder_input_ids": ids})


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
    model_types=("parakeet_ctc", "parakeet_encoder", "parakeet_rnnt", "parakeet_tdt", "lasr_ctc", "lasr_encoder",
                 "nemotron_asr_streaming_encoder", "nemotron_asr_streaming", "nemotron3_5_asr",
                 "nemotron3_diarization_audio", "nemotron3_5_transcribe_asr_audio", "canary", "cohere_asr",
                 "wav2vec2-bert", "speech_to_text"),
    build=build,
    adds="audio input: log-mel features, positions the frames after the model's own subsampling (audio_i)",
)
