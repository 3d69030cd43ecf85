"""The `speech` adapter: speech encoders on raw waveforms (wav2vec2 family), on tiny random models built from
configs (`hf_tiny.SPEECH_ENCODERS`: hidden 32, 2 layers, 4 heads, a two-layer convolutional feature encoder).

Captured patterns equal the eager model's own `output_attentions` on a padded batch of two clips, under SDPA
and eager; where the model ignores padding, each clip's frames in the batch equal the clip alone; positions are
the feature encoder's frames counted by the model's own functions; rollout and a report run; a model saved with
its feature extractor is loaded back with `interpret.load` and explained from numpy clips; `interpret models`
lists the claimed types as supported by this adapter (probed on the meta device); bad audio is refused in one line.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers
from click.testing import CliRunner
from torch import Tensor
from hf_tiny import (CLIP_SAMPLES, SAMPLING_RATE, SPEECH_ENCODERS, audio_clips, eager_patterns, feature_extractor,
                     model_inputs, save_tiny_speech, tiny_speech)

import interpret
from interpret.analysis.run import run_context
from interpret.capture.api import capturable_for, prepare
from interpret.capture.hf import speech
from interpret.capture.hf.registry import adapter_for
from interpret.cli.main import cli
from interpret.errors import InputError
from interpret.files.trace_io import load_trace, save_trace
from interpret.inputs import Encoded

TIGHT = 1e-6  # captured against eager output_attentions (observed: below 1e-7)
PADDING = 1e-5  # a clip in a padded batch against the clip alone
RUNS = [(family, implementation) for family in SPEECH_ENCODERS for implementation in ("sdpa", "eager")]
INVARIANT = [family for family, spec in SPEECH_ENCODERS.items() if spec.padding_invariant]
READS_PADDING = [family for family, spec in SPEECH_ENCODERS.items() if not spec.padding_invariant]


def _eager_twin(model: Any, family: str) -> Any:
    """Return the same weights loaded with the eager kernel."""
    eager = tiny_speech(family, "eager")
    eager.load_state_dict(model.state_dict())
    return eager


@pytest.mark.parametrize(("family", "implementation"), RUNS, ids=[f"{f}-{i}" for f, i in RUNS])
def test_patterns_equal_eager_output_attentions_on_a_padded_batch(family, implementation) -> None:
    model = tiny_speech(family, implementation)
    assert model.config._attn_implementation == implementation
    assert adapter_for(model).name == "speech"
    trace = interpret.collect(model, feature_extractor(), audio_clips())
    encoded = trace.encoded
    assert trace.meta.adapter == "speech" and trace.meta.kind == "encoder"
    assert encoded.padding[1].any() and not encoded.padding[0].any()  # the second clip is padded
    expected = eager_patterns(_eager_twin(model, family), encoded)
    assert sorted(trace.names()) == sorted(expected) and len(expected) == 2
    for name, pattern in expected.items():
        assert trace[name].dtype == torch.float32 and trace[name].shape == (2, 4, encoded.pos, encoded.pos)
        torch.testing.assert_close(trace[name], pattern, atol=TIGHT, rtol=0, msg=name)
    assert trace.meta.attention == ("eager" if implementation == "eager" else "recomputed")


@pytest.mark.parametrize("family", list(SPEECH_ENCODERS))
def test_positions_are_the_feature_encoders_frames(family) -> None:
    model = tiny_speech(family)
    trace = interpret.collect(model, feature_extractor(), audio_clips())
    encoded = trace.encoded
    frames = model._get_feat_extract_output_lengths(torch.tensor(CLIP_SAMPLES))
    assert encoded.lengths == frames.tolist() == [39, 24]  # floor((floor((n - 10) / 5) + 1 - 3) / 2) + 1
    assert encoded.tokens[0] == [f"audio_{i}" for i in range(39)] and encoded.pos == 39
    assert encoded.input_values.shape == (2, 400) and encoded.sample_mask.sum(-1).tolist() == list(CLIP_SAMPLES)
    assert torch.equal(encoded.special, encoded.attention_mask == 0)
    with torch.no_grad():
        hidden = model(**model_inputs(encoded), output_hidden_states=True).hidden_states[-1]
    assert hidden.shape[1] == encoded.pos
    # the extractor's own normalisation: each clip to zero mean, unit variance over its own samples
    real = encoded.input_values[1, :CLIP_SAMPLES[1]]
    assert abs(float(real.mean())) < 1e-5 and abs(float(real.std(unbiased=False)) - 1) < 1e-3
    assert float(encoded.input_values[1, CLIP_SAMPLES[1]:].abs().max()) == 0


@pytest.mark.parametrize("family", INVARIANT)
def test_each_clip_of_a_padded_batch_equals_the_clip_alone(family) -> None:
    model = tiny_speech(family)
    extractor, clips = feature_extractor(), audio_clips()
    names = ["*hook_pattern", "*hook_attn_scores", "*hook_resid_post"]
    batch = interpret.collect(model, extractor, clips, names=names)
    for b in range(2):
        alone = interpret.collect(model, extractor, clips[b:b + 1], names=names)
        keep = batch.encoded.attention_mask[b].bool()
        assert alone.encoded.pos == int(keep.sum())
        for name in batch.names():
            got = batch[name][b]
            got = got[:, keep][:, :, keep] if name.endswith(("hook_pattern", "hook_attn_scores")) else got[keep]
            torch.testing.assert_close(got, alone[name][0], atol=PADDING, rtol=0, msg=name)
        torch.testing.assert_close(batch.output.logits[b], alone.output.logits[0], atol=PADDING, rtol=0)


@pytest.mark.parametrize("family", READS_PADDING)
def test_a_model_that_reads_padding_is_captured_as_it_runs(family) -> None:
    """data2vec-audio and the Conformer read padded frames themselves (stacked positional convolutions, the
    convolution module): a padded clip's numbers differ from the clip alone in the model's own output, and the
    capture follows the model (the eager test above checks the padded batch)."""
    model = tiny_speech(family)
    extractor, clips = feature_extractor(), audio_clips()
    batch = interpret.collect(model, extractor, clips, names=["*hook_resid_post"])
    alone = interpret.collect(model, extractor, clips[1:], names=["*hook_resid_post"])
    keep = batch.encoded.attention_mask[1].bool()
    with torch.no_grad():
        own_batch = model(**model_inputs(batch.encoded), output_hidden_states=True).hidden_states[-1][1][keep]
        own_alone = model(**model_inputs(alone.encoded), output_hidden_states=True).hidden_states[-1][0]
    assert float((own_batch - own_alone).abs().max()) > 1e-2
    torch.testing.assert_close(batch["blocks.1.hook_resid_post"][1][keep], own_batch, atol=1e-6, rtol=0)


def test_positions_are_the_frames_the_transformer_reads_before_an_adapter() -> None:
    """A checkpoint with adapter layers after the transformer (add_adapter) still attends over the feature
    encoder's frames: positions are counted without the adapter's striding."""
    torch.manual_seed(0)
    config = SPEECH_ENCODERS["wav2vec2"].config()
    config.add_adapter, config.num_adapter_layers, config.adapter_stride, config.output_hidden_size = True, 1, 2, 32
    model = transformers.Wav2Vec2Model(config).eval()
    trace = interpret.collect(model, feature_extractor(), audio_clips())
    assert trace.encoded.lengths == [39, 24] and trace["blocks.0.attn.hook_pattern"].shape[-1] == 39
    assert model._get_feat_extract_output_lengths(torch.tensor([400])).item() == 20  # with the adapter: not positions


def test_waveform_tensor_and_encoded_inputs() -> None:
    model = tiny_speech("hubert")
    waveform = torch.randn(2, 300, generator=torch.Generator().manual_seed(1))
    trace = interpret.collect(model, None, waveform)  # as the model takes it: no extractor, no mask
    assert trace.encoded.sample_mask is None and trace.encoded.lengths == [29, 29]
    assert torch.equal(trace.encoded.input_values, waveform)
    with torch.no_grad():
        own = _eager_twin(model, "hubert")(input_values=waveform, output_attentions=True).attentions
    torch.testing.assert_close(trace["blocks.1.attn.hook_pattern"], own[1], atol=TIGHT, rtol=0)
    again = interpret.collect(model, None, trace.encoded)
    assert torch.equal(again["blocks.1.attn.hook_pattern"], trace["blocks.1.attn.hook_pattern"])
    one = interpret.collect(model, feature_extractor(), torch.from_numpy(audio_clips()[0]).numpy())  # one 1-D clip
    assert one.encoded.batch == 1 and one.encoded.pos == 39


def test_rollout_runs_and_a_report_names_the_frames(tmp_path) -> None:
    model = tiny_speech("wav2vec2")
    extractor = feature_extractor()
    trace = interpret.collect(model, extractor, audio_clips())
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert np.isfinite(rollout).all() and (rollout >= 0).all() and rollout.shape[0] == 2
    assert np.abs(rollout[1, 24:]).max() == 0  # the padded frames of the second clip get nothing
    report = interpret.explain(model, extractor, audio_clips(), analyzers=["rollout"])
    path = tmp_path / "speech.html"
    report.render(path)
    html = path.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html>") and "audio_0" in html and "audio_38" in html


def test_saved_model_and_extractor_load_back_and_explain_raw_audio(tmp_path) -> None:
    directory = save_tiny_speech("hubert", tmp_path / "hubert")
    model, extractor = interpret.load(directory, device="cpu")
    assert isinstance(extractor, transformers.Wav2Vec2FeatureExtractor)
    assert extractor.sampling_rate == SAMPLING_RATE and extractor.return_attention_mask
    assert type(model).__name__ == "HubertForSequenceClassification"
    clips = audio_clips(seed=3)
    trace = interpret.collect(model, extractor, clips)
    original = tiny_speech("hubert", "eager")
    expected = eager_patterns(original, prepare(capturable_for(original, extractor), extractor, clips))
    for name, pattern in expected.items():
        torch.testing.assert_close(trace[name], pattern, atol=TIGHT, rtol=0, msg=name)
    report = interpret.explain(model, extractor, clips, analyzers=["rollout", "attention_entropy"])
    out = tmp_path / "report.html"
    report.render(out)
    html = out.read_text(encoding="utf-8")
    assert "audio_0" in html and "audio_23" in html
    # token-removal evidence does not apply to audio, and the report says so rather than showing none
    assert trace.encoded.reads_media and report.evidence is None
    assert "removing tokens applies to text inputs, and this model reads pixels or audio" in html
    saved = load_trace(save_trace(trace, tmp_path / "t.safetensors"))
    assert torch.equal(saved.encoded.input_values, trace.encoded.input_values)
    assert torch.equal(saved.encoded.sample_mask, trace.encoded.sample_mask)


def test_encoded_rows_and_moves_keep_the_audio() -> None:
    encoded = prepare(capturable_for(tiny_speech("hubert")), feature_extractor(), audio_clips())
    row = encoded.rows(torch.tensor([1]))
    assert torch.equal(row.input_values, encoded.input_values[1:]) and torch.equal(row.sample_mask, encoded.sample_mask[1:])
    moved = encoded.to("cpu")
    assert moved.input_values is not None and moved.sample_mask is not None
    with pytest.raises(InputError, match="sample_mask"):
        Encoded(attention_mask=encoded.attention_mask, tokens=encoded.tokens, special=encoded.special,
                input_values=encoded.input_values, sample_mask=encoded.sample_mask[:, :10])


def test_interpret_models_lists_the_claimed_types_with_the_speech_adapter(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path))
    types = ["wav2vec2", "hubert", "data2vec-audio", "unispeech", "unispeech-sat", "wav2vec2-conformer", "wavlm",
             "sew", "sew-d", "omniasr_audio", "omniasr_ctc"]
    result = CliRunner().invoke(cli, ["models", *types, "--refresh", "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    rows = {row["model_type"]: row for row in json.loads(result.stdout)}
    for model_type in types:
        row = rows[model_type]
        # SEW-D's own code makes a CPU constant for its masked softmax, which the meta device cannot meet
        probed_on = "cpu" if model_type == "sew-d" else "meta"
        assert (row["status"], row["adapter"], row["kind"], row["probed_on"]) == ("supported", "speech", "encoder",
                                                                                   probed_on), row
        assert "blocks.{i}.attn.hook_pattern" in row["offered"]
    assert set(speech.ADAPTER.model_types) == {*types, "moonshine", "omniasr_audio", "omniasr_ctc", "speech-encoder-decoder"}


def test_the_probe_runs_on_the_meta_device() -> None:
    with torch.device("meta"):
        model = transformers.Wav2Vec2Model(transformers.Wav2Vec2Config()).eval()  # 95M parameters, no memory
    capturable = capturable_for(model)
    assert capturable.adapter == "speech" and capturable.n_layers == 12 and capturable.n_heads == 12
    assert speech.probe_samples(model) == 2048  # 6 frames; 1024 samples make 2 (a 400-sample window, stride 320)


@pytest.mark.parametrize(("inputs", "processor", "match"), [
    ("hello", "extractor", "takes audio, not text"),
    (["a clip", "another"], "extractor", "takes audio, not text"),
    (torch.zeros(1, 1, 400), "extractor", r"shape \(1, 1, 400\) is not understood.*\[1, samples\]"),
    (torch.zeros(400), "extractor", r"shape \(400,\) is not understood"),
    (torch.zeros(2, 400, dtype=torch.int16), "extractor", "not float; convert integer samples"),
    ([np.zeros(400, dtype=np.int16)], "extractor", "1-D float array"),
    ([np.zeros((2, 400), dtype=np.float32)], "extractor", "1-D float array"),
    ([np.zeros(9, dtype=np.float32)], "extractor", "too short for one frame"),
    (torch.zeros(1, 9), None, "9 samples is too short for one frame"),
    ([np.zeros(400, dtype=np.float32)], None, "need the model's feature extractor"),
    ([], "extractor", "not understood"),
])
def test_bad_audio_is_refused_in_one_line(inputs, processor, match) -> None:
    model = tiny_speech("wav2vec2")
    with pytest.raises(InputError, match=match) as err:
        interpret.collect(model, feature_extractor() if processor else None, inputs)
    assert "\n" not in str(err.value)


def test_text_only_options_are_refused() -> None:
    model = tiny_speech("wav2vec2")
    with pytest.raises(InputError, match="max_length does not apply to audio"):
        interpret.collect(model, feature_extractor(), audio_clips(), max_length=4)
    with pytest.raises(InputError, match="decoder inputs do not apply"):
        interpret.collect(model, feature_extractor(), audio_clips(), decoder_inputs=["a"])


def _sew(kind: str, kernel: str, seed: int = 0) -> Any:
    """Return a tiny SEW or SEW-D classifier (`squeeze_factor` 2) run with attention `kernel`."""
    config_class, head = {"sew": (transformers.SEWConfig, transformers.SEWForSequenceClassification),
                          "sew-d": (transformers.SEWDConfig, transformers.SEWDForSequenceClassification)}[kind]
    torch.manual_seed(seed)
    config = config_class(**_small(), squeeze_factor=2, feat_extract_norm="layer", num_labels=3)
    config._attn_implementation = kernel
    return head(config).eval()


SEW_RUNS = [("sew", "sdpa"), ("sew", "eager"), ("sew-d", "eager")]  # SEW-D has no SDPA path


@pytest.mark.parametrize(("kind", "kernel"), SEW_RUNS, ids=[f"{k}-{i}" for k, i in SEW_RUNS])
def test_sew_positions_are_the_pooled_frames_and_patterns_equal_eager(kind, kernel) -> None:
    """SEW and SEW-D attend over the feature encoder's frames average-pooled `squeeze_factor` at a time: 39 and 24
    frames make 19 and 12 positions (a partial last pair dropped; a pair with one real frame is real)."""
    model = _sew(kind, kernel)
    assert adapter_for(model).name == "speech"
    trace = interpret.collect(model, feature_extractor(), audio_clips(), names="*")
    encoded = trace.encoded
    frames = model._get_feat_extract_output_lengths(torch.tensor(CLIP_SAMPLES))
    assert frames.tolist() == [39, 24] and encoded.pos == 39 // 2 and encoded.lengths == [19, 12]
    eager = _sew(kind, "eager")
    eager.load_state_dict(model.state_dict())
    with torch.no_grad():
        reference = eager(**model_inputs(encoded), output_attentions=True)
        plain = model(**model_inputs(encoded))
    assert torch.equal(trace.output.logits, plain.logits)
    assert len(reference.attentions) == 2
    for layer, attention in enumerate(reference.attentions):
        assert attention.shape == (2, 4, encoded.pos, encoded.pos)
        # the model's own mask is the capture's: it gives no key beyond a clip's positions any weight, and every
        # key within them some
        for example, length in enumerate(encoded.lengths):
            assert (attention[example, :, :, length:] == 0).all() and (attention[example, :, :, :length] > 0).all()
        mask = encoded.attention_mask.bool()
        expected = attention.masked_fill(~(mask[:, None, :, None] & mask[:, None, None, :]), 0)
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], expected, atol=TIGHT, rtol=0)


def test_sew_pooled_mask_follows_the_models_max_pool() -> None:
    model = _sew("sew", "eager")
    sample_mask = torch.zeros(3, 400, dtype=torch.long)
    for row, samples in enumerate((400, 250, 245)):
        sample_mask[row, :samples] = 1
    frames = model._get_feat_extract_output_lengths(torch.tensor([400, 250, 245])).tolist()
    assert frames == [39, 24, 23]  # 23 frames: 11 whole pairs and a pair with one real frame
    mask = speech.pooled_mask(model, 2, 19, sample_mask)
    assert mask.sum(-1).tolist() == [19, 12, 12]
    assert speech.pooled_lengths(model, 2, torch.tensor([400, 250, 245])).tolist() == [19, 12, 11]


def test_sew_rollout_and_a_report(tmp_path) -> None:
    model = _sew("sew-d", "eager")
    report = interpret.explain(model, feature_extractor(), audio_clips(), analyzers=["rollout"])
    path = tmp_path / "sew-d.html"
    report.render(path)
    assert "audio_18" in path.read_text(encoding="utf-8") and "audio_19" not in path.read_text(encoding="utf-8")


def _small() -> dict[str, Any]:
    return {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
            "conv_dim": (16, 16), "conv_kernel": (10, 3), "conv_stride": (5, 2), "num_conv_pos_embeddings": 4,
            "num_conv_pos_embedding_groups": 2}


def _wavlm(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    config = transformers.WavLMConfig(**_small(), num_buckets=8, max_bucket_distance=16, num_labels=3,
                                      feat_extract_norm="layer")
    return transformers.WavLMForSequenceClassification(config).eval()


def test_wavlm_patterns_are_the_per_head_weights_of_its_multi_head_attention_forward() -> None:
    """WavLM computes its attention with torch's `F.multi_head_attention_forward`, its gated relative position
    bias as the mask, and returns the weights averaged over heads. The reference for each head is that same torch
    function called on the very arguments WavLM gave it, with `average_attn_weights=False`; the model's own
    (averaged) output_attentions must be the captured patterns' mean over heads."""
    model = _wavlm()
    calls: list[Tensor] = []
    original = transformers.models.wavlm.modeling_wavlm.WavLMAttention.torch_multi_head_self_attention

    def per_head(self: Any, hidden_states: Tensor, attention_mask: Any, gated_position_bias: Tensor) -> Any:
        query = hidden_states.transpose(0, 1)
        _, weights = F.multi_head_attention_forward(
            query, query, query, self.embed_dim, self.num_heads, torch.empty([0]),
            torch.cat((self.q_proj.bias, self.k_proj.bias, self.v_proj.bias)), None, None, False, self.dropout,
            self.out_proj.weight, self.out_proj.bias, self.training,
            attention_mask.ne(1) if attention_mask is not None else None, need_weights=True,
            attn_mask=gated_position_bias, use_separate_proj_weight=True, q_proj_weight=self.q_proj.weight,
            k_proj_weight=self.k_proj.weight, v_proj_weight=self.v_proj.weight, average_attn_weights=False)
        calls.append(weights)
        return original(self, hidden_states, attention_mask, gated_position_bias)

    reference = _wavlm()
    trace = interpret.collect(model, feature_extractor(), audio_clips(), names="*")
    encoded = trace.encoded
    assert encoded.lengths == [39, 24] and trace.meta.n_layers == 2
    with pytest.MonkeyPatch.context() as patch, torch.no_grad():  # the reference copy only, not the capture
        patch.setattr(transformers.models.wavlm.modeling_wavlm.WavLMAttention, "torch_multi_head_self_attention",
                      per_head)
        output = reference(input_values=encoded.input_values, attention_mask=encoded.sample_mask,
                           output_attentions=True, output_hidden_states=True)
    mask = encoded.attention_mask.bool()
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    for layer in range(2):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"]
        torch.testing.assert_close(pattern, calls[layer].masked_fill(~keep, 0), atol=TIGHT, rtol=0)
        averaged = output.attentions[layer][:, 0].masked_fill(~keep[:, 0], 0)
        torch.testing.assert_close(pattern.mean(1), averaged, atol=TIGHT, rtol=0)
        # each block's output is the model's own hidden state after it
        torch.testing.assert_close(trace[f"blocks.{layer}.hook_resid_post"], output.hidden_states[layer + 1],
                                   atol=1e-6, rtol=0)
    with torch.no_grad():
        plain = model(input_values=encoded.input_values, attention_mask=encoded.sample_mask)
    assert torch.equal(trace.output.logits, plain.logits)
    # torch's function takes the output projection's weights and applies them itself: no module call to hook
    reason = capturable_for(model).unsupported["blocks.0.attn.hook_z"]
    assert "inside torch's multi_head_attention_forward" in reason


def test_wavlm_rollout_a_report_and_its_gradient_capture(tmp_path) -> None:
    model = _wavlm()
    trace = interpret.collect(model, feature_extractor(), audio_clips())
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert np.isfinite(rollout).all() and np.abs(rollout[1, 24:]).max() == 0
    context = run_context(trace, model, feature_extractor())
    captured = context.capture(trace.encoded, ["*hook_pattern"])
    grads = torch.autograd.grad(captured.score.sum(), [captured[name] for name in sorted(captured.tensors)])
    assert all(torch.isfinite(grad).all() and grad.abs().sum() > 0 for grad in grads)
    report = interpret.explain(model, feature_extractor(), audio_clips(), analyzers=["rollout", "attention_entropy"])
    report.render(tmp_path / "wavlm.html")
    assert "audio_38" in (tmp_path / "wavlm.html").read_text(encoding="utf-8")


# OmniASR: a wav2vec2-style encoder that takes its waveform channels-first, [batch, 1, samples], with the sample
# mask as `padding_mask` (its feature extractor returns both so).
def _omniasr(kind: str, kernel: str, seed: int = 0) -> Any:
    audio = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
             "conv_dim": [16, 16], "conv_kernel": [10, 3], "conv_stride": [5, 2], "num_conv_pos_embeddings": 4,
             "num_conv_pos_embedding_groups": 2}
    torch.manual_seed(seed)
    if kind == "omniasr_ctc":
        model = transformers.OmniASRForCTC(transformers.OmniASRCTCConfig(audio_config=audio, vocab_size=10))
    else:
        model = transformers.OmniASRAudioModel(transformers.OmniASRAudioConfig(**audio))
    model.config._attn_implementation = kernel
    return model.eval()


OMNIASR_RUNS = [(kind, kernel) for kind in ("omniasr_ctc", "omniasr_audio") for kernel in ("sdpa", "eager")]


@pytest.mark.parametrize(("kind", "kernel"), OMNIASR_RUNS, ids=[f"{k}-{i}" for k, i in OMNIASR_RUNS])
def test_omniasr_takes_its_waveform_channels_first_and_patterns_equal_eager(kind, kernel) -> None:
    model = _omniasr(kind, kernel)
    extractor = transformers.OmniASRFeatureExtractor(sampling_rate=SAMPLING_RATE)
    trace = interpret.collect(model, extractor, audio_clips(), names="*")
    encoded = trace.encoded
    raw = extractor(audio_clips(), sampling_rate=SAMPLING_RATE, padding="longest", return_tensors="pt")
    assert raw["input_values"].shape == (2, 1, 400)  # the extractor's own layout, held as [batch, samples]
    torch.testing.assert_close(encoded.input_values, raw["input_values"][:, 0], atol=0, rtol=0)
    assert torch.equal(encoded.sample_mask, raw["padding_mask"].long())
    # the positions and each clip's real ones: the model's own subsampling and output mask
    audio = model.get_encoder() if kind == "omniasr_ctc" else model
    assert encoded.pos == int(audio._get_subsampling_output_length(torch.tensor([400]))[0]) == 39
    assert encoded.lengths == audio._get_output_attention_mask(raw["padding_mask"], target_length=39).sum(-1).tolist()
    inputs = {"input_values": raw["input_values"], "padding_mask": raw["padding_mask"]}
    eager = _omniasr(kind, "eager")
    eager.load_state_dict(model.state_dict())
    with torch.no_grad():
        reference = eager(**inputs, output_attentions=True)
        plain = model(**inputs)
    output = "logits" if kind == "omniasr_ctc" else "last_hidden_state"
    assert torch.equal(getattr(trace.output, output), getattr(plain, output))
    mask = encoded.attention_mask.bool()
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    assert len(reference.attentions) == 2
    for layer, attention in enumerate(reference.attentions):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention.masked_fill(~keep, 0),
                                   atol=TIGHT, rtol=0)


def test_omniasr_rollout_and_a_report(tmp_path) -> None:
    model = _omniasr("omniasr_ctc", "sdpa")
    report = interpret.explain(model, transformers.OmniASRFeatureExtractor(sampling_rate=SAMPLING_RATE), audio_clips(),
                               analyzers=["rollout", "attention_entropy"])
    path = tmp_path / "omniasr.html"
    report.render(path)
    assert "audio_38" in path.read_text(encoding="utf-8")
