"""The Qwen audio encoders that cut log-mel features into chunks (Qwen2.5-Omni's, Qwen3-Omni's, Qwen3-ASR's)
through the `chunked` adapter: features [batch, mel, frame], one position per frame after the convolutions.

Qwen2.5-Omni's patterns equal a plain statement of its attention: softmax(q·kᵀ/√d) within each chunk of 2 ×
n_window frames (n_window positions after its stride-2 convolution), 0 across chunks, q and k from its own
projections of the normalised block input. Every encoder's SDPA capture equals its eager capture (the kernel's own
weights per window); z is the pattern times the values in every block (each window's call on the diagonal); a
batch captures what each clip captures alone; the output is the model's own; the feature extractor's frames are
read exactly (its padding cut off; clips of different lengths refused); rollout and the default report run;
`interpret models` lists each as supported by the adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import assert_each_alone, assert_listed, built_with
from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniAudioEncoderConfig
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder
from transformers.models.qwen3_asr.configuration_qwen3_asr import Qwen3ASREncoderConfig
from transformers.models.qwen3_asr.modeling_qwen3_asr import Qwen3ASREncoder
from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeAudioEncoderConfig
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeAudioEncoder

import interpret
from interpret.capture.hf import chunked
from interpret.errors import InputError

TIGHT = 1e-6
RECOMPUTED = 1e-5  # under SDPA the pattern is recomputed from q and k in float32 (the bound)
MELS, FRAMES = 16, 250
_SIZES = {"num_mel_bins": MELS, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 64,
          "d_model": 32, "output_dim": 24}
# The Qwen3 encoders count 13 positions per chunk of 100 frames (n_window 50) in their own length function.
BUILDS: dict[str, Callable[[], Any]] = {
    "qwen2_5_omni_audio_encoder": lambda: Qwen2_5OmniAudioEncoder(
        Qwen2_5OmniAudioEncoderConfig(**_SIZES, n_window=4, max_source_positions=64)),
    "qwen3_omni_moe_audio_encoder": lambda: Qwen3OmniMoeAudioEncoder(Qwen3OmniMoeAudioEncoderConfig(
        **_SIZES, n_window=50, n_window_infer=200, downsample_hidden_size=8, max_source_positions=64)),
    "qwen3_asr_encoder": lambda: Qwen3ASREncoder(Qwen3ASREncoderConfig(
        **_SIZES, n_window=50, n_window_infer=200, downsample_hidden_size=8, max_position_embeddings=64)),
}
# positions of a clip of 250 frames: Qwen2.5-Omni 31 chunks of 8 frames (4 positions) and one of 2 (1 position);
# the Qwen3 encoders two chunks of 100 frames (13 positions) and one of 50 (7 positions)
POSITIONS = {"qwen2_5_omni_audio_encoder": 125, "qwen3_omni_moe_audio_encoder": 33, "qwen3_asr_encoder": 33}


def _encoder(model_type: str, kernel: str) -> Any:
    return built_with(BUILDS[model_type], kernel)


def _features(batch: int = 2, frames: int = FRAMES, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, MELS, frames, generator=torch.Generator().manual_seed(seed))


def _plain_qwen2_5(model: Any, features: torch.Tensor, layer: int) -> torch.Tensor:
    """softmax(q·kᵀ/√d) of block `layer` within each chunk (4 positions, the last 1), 0 across chunks."""
    seen: list[torch.Tensor] = []
    block = model.layers[layer]
    handle = block.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        with torch.no_grad():
            model(**chunked.encoder_of(model).inputs(features))
    finally:
        handle.remove()
    hidden = block.self_attn_layer_norm(seen[0]).unflatten(0, (features.shape[0], -1))  # [batch, pos, d_model]
    heads = model.config.encoder_attention_heads
    q = block.self_attn.q_proj(hidden).unflatten(-1, (heads, -1)).transpose(1, 2)
    k = block.self_attn.k_proj(hidden).unflatten(-1, (heads, -1)).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    chunk = torch.arange(scores.shape[-1]) // 4
    scores = scores.masked_fill(chunk[:, None] != chunk[None, :], float("-inf"))
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_qwen2_5_omni_patterns_equal_the_plain_statement_within_each_chunk(kernel: str) -> None:
    model, features = _encoder("qwen2_5_omni_audio_encoder", kernel), _features()
    trace = interpret.collect(model, None, features)
    assert trace.meta.attention == ("eager" if kernel == "eager" else "recomputed")
    for layer in range(2):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"]
        assert pattern.shape == (2, 4, 125, 125)
        torch.testing.assert_close(pattern, _plain_qwen2_5(model, features, layer), atol=RECOMPUTED, rtol=0)


@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_sdpa_equals_eager_z_is_pattern_times_values_and_the_output_is_untouched(model_type: str) -> None:
    features = _features()
    eager = interpret.collect(_encoder(model_type, "eager"), None, features, names="*")
    model = _encoder(model_type, "sdpa")
    sdpa = interpret.collect(model, None, features, names="*")
    positions = POSITIONS[model_type]
    assert sdpa.encoded.tokens[0][:2] == ["audio_0", "audio_1"] and sdpa.encoded.pos == positions
    for layer in range(2):
        pattern = sdpa[f"blocks.{layer}.attn.hook_pattern"]
        assert pattern.shape == (2, 4, positions, positions)
        torch.testing.assert_close(pattern, eager[f"blocks.{layer}.attn.hook_pattern"], atol=RECOMPUTED, rtol=0)
        mixed = torch.einsum("bhqk,bkhd->bqhd", pattern, sdpa[f"blocks.{layer}.attn.hook_v"])  # [batch, pos, head, d]
        torch.testing.assert_close(mixed, sdpa[f"blocks.{layer}.attn.hook_z"], atol=1e-5, rtol=0)
    with torch.no_grad():
        plain = model(**chunked.encoder_of(model).inputs(features))
    torch.testing.assert_close(sdpa.output.last_hidden_state.flatten(0, 1), plain.last_hidden_state, atol=0, rtol=0)


@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_a_batch_captures_what_each_clip_captures_alone(model_type: str) -> None:
    assert_each_alone(_encoder(model_type, "sdpa"), _features(batch=3), RECOMPUTED)


def _extractor() -> Any:
    return T.WhisperFeatureExtractor(feature_size=MELS, sampling_rate=16000, hop_length=160, chunk_length=30)


def test_raw_audio_is_read_by_the_feature_extractor_with_its_padding_cut_off_and_rollout_runs() -> None:
    rng = np.random.default_rng(0)
    clips = [rng.standard_normal(16000).astype(np.float32) * 0.1 for _ in range(2)]  # 1 s: 100 frames each
    model = _encoder("qwen2_5_omni_audio_encoder", "sdpa")
    made = _extractor()(clips, sampling_rate=16000, return_attention_mask=True, return_tensors="pt")
    real = int(made["attention_mask"][0].sum())
    assert made["input_features"].shape[-1] == 3000 > real
    trace = interpret.collect(model, _extractor(), clips)
    assert torch.equal(trace.encoded.input_features, made["input_features"][..., :real])
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, trace.encoded.pos) and np.isfinite(rollout).all() and (rollout >= 0).all()


@pytest.mark.parametrize(
    ("inputs", "match"),
    [("a sentence", "takes audio, not text"), (torch.zeros(1, 8, 40), r"shape \(1, 8, 40\).*\[batch, 16, frame\]"),
     ("clips", r"the clips make 2 different numbers of feature frames")],
)
def test_text_wrong_shapes_and_mixed_lengths_are_refused_in_one_line(inputs: Any, match: str) -> None:
    if inputs == "clips":
        inputs = [np.zeros(16000, np.float32), np.zeros(8000, np.float32)]
    with pytest.raises(InputError, match=match) as error:
        interpret.collect(_encoder("qwen2_5_omni_audio_encoder", "eager"), _extractor(), inputs)
    assert "\n" not in str(error.value)


def test_the_default_report_runs_the_methods_without_gradients(tmp_path: Any) -> None:
    report = interpret.explain(_encoder("qwen3_asr_encoder", "sdpa"), None, _features(batch=1))
    assert report.run.analyzers == ("rollout", "attention_entropy")
    assert "audio_32" in report.render(tmp_path / "encoder.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_interpret_models_lists_it(model_type: str) -> None:
    assert_listed(model_type, "chunked", "encoder")
