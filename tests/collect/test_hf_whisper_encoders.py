"""Audio encoders built on Whisper's (Qwen2-Audio's, Voxtral's, Audio Flamingo 3's, MOSS's, GLM-ASR's) through the `whisper`
adapter: log-mel features [batch, mel, frame] of the model's fixed window, positions the frames after its strided
convolution (`audio_i`), and no decoder side.

Each is captured equal to its eager model's own `output_attentions` (with SDPA where its class has it), leaves the
output untouched, reads raw audio through a Whisper feature extractor as the extractor itself does, runs rollout,
and is listed by `interpret models` as supported by the adapter; decoder inputs, text and features of the wrong
shape are refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import built_with, eager_copy
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

import interpret
from interpret.capture.hf import catalog
from interpret.errors import InputError

TIGHT = 1e-6
MELS, POSITIONS = 16, 8  # a window of 16 feature frames, halved by the convolution
_SIZES = {"num_mel_bins": MELS, "max_source_positions": POSITIONS, "d_model": 32, "encoder_layers": 2,
          "encoder_attention_heads": 4, "encoder_ffn_dim": 64}


def _builder(model_type: str, **extra: Any) -> Callable[[], Any]:
    config = CONFIG_MAPPING[model_type](**_SIZES, **extra)
    model_class = catalog._model_class(type(config), {}, model_type)
    assert model_class is not None
    return lambda: model_class(config)


MODELS: dict[str, Callable[[], Any]] = {
    "qwen2_audio_encoder": _builder("qwen2_audio_encoder"),
    "voxtral_encoder": _builder("voxtral_encoder", intermediate_size=64, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=4),
    "audioflamingo3_encoder": _builder("audioflamingo3_encoder"),
    "moss_transcribe_diarize_audio": _builder("moss_transcribe_diarize_audio"),
    # GLM-ASR: Whisper's convolutions under rotary blocks; its window is `max_position_embeddings` positions
    "glmasr_encoder": lambda: T.GlmAsrEncoder(T.GlmAsrEncoderConfig(
        num_mel_bins=MELS, max_position_embeddings=POSITIONS, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, head_dim=8, intermediate_size=64)),
}
RUNS = [(name, kernel) for name in MODELS for kernel in ("sdpa", "eager")]


def _features(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, MELS, 2 * POSITIONS, generator=torch.Generator().manual_seed(5))


def _extractor() -> Any:
    # 1 s of 16 kHz audio in hops of 1000 samples: the 16 frames of the tiny models' window
    return T.WhisperFeatureExtractor(feature_size=MELS, sampling_rate=16000, hop_length=1000, chunk_length=1, n_fft=400)


def _model(name: str, kernel: str) -> Any:
    return built_with(MODELS[name], kernel)


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_patterns_equal_the_eager_output_attentions_and_the_output_is_untouched(name: str, kernel: str) -> None:
    model = _model(name, kernel)
    features = _features()
    trace = interpret.collect(model, None, features, names="*")
    extra = {"input_features_mask": torch.ones(2, 2 * POSITIONS, dtype=torch.long)} if name.startswith("audioflamingo") else {}
    with torch.no_grad():
        reference = eager_copy(model)(input_features=features, output_attentions=True, **extra).attentions
        plain = model(input_features=features, **extra)
    assert (trace.meta.adapter, trace.meta.kind, trace.encoded.pos) == ("whisper", "encoder", POSITIONS)
    assert trace.encoded.tokens[0][:2] == ["audio_0", "audio_1"] and trace.encoded.decoder is None
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    assert len(reference) == 2
    for layer, attention in enumerate(reference):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention.float(), atol=TIGHT, rtol=0)


def test_raw_audio_is_read_by_the_feature_extractor_as_it_reads_it_and_rollout_runs() -> None:
    clips = [np.random.default_rng(seed).standard_normal(12_000).astype(np.float32) for seed in range(2)]
    model = _model("qwen2_audio_encoder", "sdpa")
    trace = interpret.collect(model, _extractor(), clips)
    expected = _extractor()(clips, sampling_rate=16000, return_tensors="pt")["input_features"]
    torch.testing.assert_close(trace.encoded.input_features, expected, atol=0, rtol=0)
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, POSITIONS) and np.isfinite(rollout).all() and (rollout >= 0).all()


@pytest.mark.parametrize(("inputs", "extra", "match"), [
    ("a clip", {}, "takes audio, not text"),
    (torch.zeros(2, MELS, 10), {}, rf"shape \(2, {MELS}, 10\).*\[batch, {MELS}, {2 * POSITIONS}\]"),
    (torch.zeros(2, MELS, 2 * POSITIONS), {"decoder_inputs": ["a b"]}, "an encoder alone: it takes no decoder inputs"),
])
def test_text_wrong_shapes_and_decoder_inputs_are_refused_in_one_line(inputs: Any, extra: dict[str, Any],
                                                                       match: str) -> None:
    with pytest.raises(InputError, match=match) as err:
        interpret.collect(_model("voxtral_encoder", "sdpa"), None, inputs, **extra)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["qwen2_audio_encoder", "audioflamingo3_encoder", "glmasr_encoder"])
def test_interpret_models_lists_it(name: str) -> None:
    row = catalog.describe(name)
    assert (row.status, row.adapter, row.kind) == ("supported", "whisper", "encoder"), row
