"""Speech encoders on log-mel features through the `features` adapter: Parakeet and LASR (Fast Conformer
encoders, bare or with a CTC head) and Wav2Vec2-BERT; `input_features` [batch, frame, feature] with a frame mask,
positions the frames after the model's own subsampling (`audio_0`, ...).

References are independent of the capture: the eager model's own `output_attentions` on the same features and
mask; the model's own subsampling of each clip's length; the clip run alone (where the model itself ignores the
padding, the capture must too, and where it does not, the capture follows the model).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from click.testing import CliRunner
from hf_tiny import SAMPLING_RATE, assert_encoder_decoder_patterns, audio_clips, built_with, eager_copy, word_tokenizer

import interpret
from interpret.capture.api import capturable_for, prepare
from interpret.capture.hf import features, speech
from interpret.cli.main import cli
from interpret.errors import InputError
from interpret.files.trace_io import load_trace, save_trace

TIGHT = 1e-6
PADDING = 1e-5
MELS = 16
_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}


def _parakeet_encoder() -> Any:
    return T.ParakeetEncoderConfig(**_SIZES, num_mel_bins=MELS, subsampling_conv_channels=8, subsampling_factor=4,
                                   conv_kernel_size=3)


def _lasr_encoder() -> Any:
    return T.LasrEncoderConfig(**_SIZES, num_mel_bins=MELS, subsampling_conv_channels=8, conv_kernel_size=3)


# name -> (model builder from a config's attention implementation, its feature extractor)
MODELS: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "parakeet_ctc": (lambda: T.ParakeetForCTC(T.ParakeetCTCConfig(encoder_config=_parakeet_encoder().to_dict(),
                                                                  vocab_size=10)),
                     lambda: T.ParakeetFeatureExtractor(feature_size=MELS)),
    "parakeet_encoder": (lambda: T.ParakeetEncoder(_parakeet_encoder()), lambda: T.ParakeetFeatureExtractor(feature_size=MELS)),
    "lasr_ctc": (lambda: T.LasrForCTC(T.LasrCTCConfig(encoder_config=_lasr_encoder().to_dict(), vocab_size=10)),
                 lambda: T.LasrFeatureExtractor(feature_size=MELS)),
    # Wav2Vec2-BERT: no subsampling; its extractor stacks two 8-bin frames into one of 16
    "wav2vec2-bert": (lambda: T.Wav2Vec2BertForSequenceClassification(T.Wav2Vec2BertConfig(
        **_SIZES, feature_projection_input_dim=MELS, conv_depthwise_kernel_size=3, num_labels=3)),
        lambda: T.SeamlessM4TFeatureExtractor(feature_size=MELS // 2, num_mel_bins=MELS // 2)),
}
RUNS = [(name, kernel) for name in MODELS for kernel in ("sdpa", "eager")]
CLIPS = (4000, 2500)  # 0.25 s and 0.16 s: the second padded by the extractors that return a frame mask


def _model(name: str, kernel: str) -> Any:
    return built_with(MODELS[name][0], kernel)



def _extractor(name: str) -> Any:
    return MODELS[name][1]()


def _output(output: Any) -> torch.Tensor:
    return output.logits if getattr(output, "logits", None) is not None else output.last_hidden_state


def _feed(encoded: Any) -> dict[str, torch.Tensor]:
    inputs = {"input_features": encoded.input_features}
    if encoded.sample_mask is not None:
        inputs["attention_mask"] = encoded.sample_mask
    return inputs


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_patterns_equal_the_eager_output_attentions_and_the_output_is_untouched(name: str, kernel: str) -> None:
    model = _model(name, kernel)
    trace = interpret.collect(model, _extractor(name), audio_clips(CLIPS), names="*")
    encoded = trace.encoded
    assert encoded.input_features.shape[-1] == MELS and encoded.tokens[0][:2] == ["audio_0", "audio_1"]
    with torch.no_grad():
        reference = eager_copy(model)(**_feed(encoded), output_attentions=True)
        plain = model(**_feed(encoded))
    assert torch.equal(_output(trace.output), _output(plain))
    assert len(reference.attentions) == trace.meta.n_layers == 2
    mask = encoded.attention_mask.bool()
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    for layer, attention in enumerate(reference.attentions):
        expected = attention.float().masked_fill(~keep, 0)
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], expected, atol=TIGHT, rtol=0)


@pytest.mark.parametrize("name", list(MODELS))
def test_positions_are_the_frames_after_the_models_own_subsampling(name: str) -> None:
    model = _model(name, "eager")
    extractor = _extractor(name)
    encoded = prepare(capturable_for(model, extractor), extractor, audio_clips(CLIPS))
    raw = extractor(audio_clips(CLIPS), sampling_rate=extractor.sampling_rate, padding="longest", return_tensors="pt")
    torch.testing.assert_close(encoded.input_features, raw["input_features"].float(), atol=0, rtol=0)
    with torch.no_grad():  # the model's own sequence length is the number of positions
        hidden = model(**_feed(encoded), output_hidden_states=True).hidden_states[-1]
    assert encoded.pos == hidden.shape[1]
    if "attention_mask" in raw:  # each clip's real positions: the model's subsampling of its real frames
        frames = raw["attention_mask"].long().sum(-1)
        assert encoded.lengths == features.frame_lengths(model, frames).tolist()
        assert encoded.lengths[1] < encoded.lengths[0]
        torch.testing.assert_close(encoded.sample_mask, raw["attention_mask"].long(), atol=0, rtol=0)


@pytest.mark.parametrize("name", ["parakeet_ctc", "wav2vec2-bert"])
def test_a_padded_clip_is_captured_as_the_model_reads_it(name: str) -> None:
    """Where the model's own output for a padded clip equals the clip alone, so do the patterns; where the model
    reads the padding (a convolution module over padded frames), the patterns differ as its output does."""
    model = _model(name, "eager")
    extractor = _extractor(name)
    both = interpret.collect(model, extractor, audio_clips(CLIPS))
    alone = interpret.collect(model, extractor, [audio_clips(CLIPS)[1]])
    real = alone.encoded.pos
    assert both.encoded.lengths[1] == real
    with torch.no_grad():
        padded_out = model(**_feed(both.encoded), output_hidden_states=True).hidden_states[-1][1, :real]
        alone_out = model(**_feed(alone.encoded), output_hidden_states=True).hidden_states[-1][0]
    model_ignores_padding = torch.allclose(padded_out, alone_out, atol=PADDING, rtol=0)
    patterns_equal = all(
        torch.allclose(both[key][1, :, :real, :real], alone[key][0], atol=PADDING, rtol=0) for key in both.names()
    )
    assert patterns_equal == model_ignores_padding
    assert (both[both.names()[0]][1, :, :, real:] == 0).all()  # padded positions get no attention


def test_rollout_a_report_a_saved_trace_and_the_listing(tmp_path, monkeypatch) -> None:
    model = _model("parakeet_ctc", "sdpa")
    extractor = _extractor("parakeet_ctc")
    trace = interpret.collect(model, extractor, audio_clips(CLIPS))
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert np.isfinite(rollout).all() and (rollout >= 0).all()
    assert np.abs(rollout[1, trace.encoded.lengths[1]:]).max() == 0  # padded positions get nothing
    saved = load_trace(save_trace(trace, tmp_path / "t.safetensors"))
    assert torch.equal(saved.encoded.input_features, trace.encoded.input_features)
    assert torch.equal(saved.encoded.sample_mask, trace.encoded.sample_mask) and saved.encoded.reads_media
    report = interpret.explain(model, extractor, audio_clips(CLIPS), analyzers=["rollout", "attention_entropy"])
    path = tmp_path / "parakeet.html"
    report.render(path)
    html = path.read_text(encoding="utf-8")
    assert "audio_0" in html and report.evidence is None

    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["models", *MODELS, "lasr_encoder", "speech_to_text", "--format", "json"])
    assert result.exit_code == 0, result.output
    for row in json.loads(result.stdout):
        kind = "encoder-decoder" if row["model_type"] == "speech_to_text" else "encoder"
        assert (row["status"], row["adapter"], row["kind"]) == ("supported", "features", kind), row


# Transducers: a Fast Conformer encoder under an LSTM prediction network and a joint network (no attention).
_BLANK = 10


def _nemotron_encoder() -> Any:
    return T.NemotronAsrStreamingEncoderConfig(**_SIZES, num_mel_bins=MELS, subsampling_conv_channels=8,
                                               subsampling_factor=4, conv_kernel_size=3, sliding_window=5,
                                               default_num_lookahead_tokens=1)


_PREDICTION = {"vocab_size": _BLANK + 1, "blank_token_id": _BLANK, "decoder_hidden_size": 16, "num_decoder_layers": 1}
TRANSDUCERS: dict[str, Callable[[], Any]] = {
    "parakeet_rnnt": lambda: T.ParakeetForRNNT(T.ParakeetRNNTConfig(encoder_config=_parakeet_encoder().to_dict(),
                                                                    **_PREDICTION)),
    "parakeet_tdt": lambda: T.ParakeetForTDT(T.ParakeetTDTConfig(encoder_config=_parakeet_encoder().to_dict(),
                                                                 **_PREDICTION)),
    "nemotron3_5_asr": lambda: T.Nemotron3_5AsrForRNNT(T.Nemotron3_5AsrConfig(
        encoder_config=_nemotron_encoder().to_dict(), **_PREDICTION, num_prompts=4, prompt_intermediate_size=16,
        default_prompt_id=1)),
    "nemotron_asr_streaming_encoder": lambda: T.NemotronAsrStreamingEncoder(_nemotron_encoder()),
}
TRANSDUCER_RUNS = [(name, kernel) for name in TRANSDUCERS for kernel in ("sdpa", "eager")]


def _sdpa_applied(model: Any, monkeypatch: Any, **inputs: Any) -> list[torch.Tensor]:
    """Return the probabilities [batch, head, query, key] that each SDPA call of the model's forward applied: a
    plain float64 softmax of its own queries, keys, scale and mask, read from torch's function as it is called."""
    applied: list[torch.Tensor] = []
    kernel = torch.nn.functional.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
        assert not is_causal and dropout_p == 0.0
        scores = query.double() @ key.double().transpose(-1, -2) * (scale or query.shape[-1] ** -0.5)
        if attn_mask is not None:
            bool_mask = attn_mask.dtype == torch.bool
            scores = scores.masked_fill(~attn_mask, float("-inf")) if bool_mask else scores + attn_mask
        applied.append(torch.softmax(scores, dim=-1).nan_to_num(0.0))
        return kernel(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                      **kwargs)

    with monkeypatch.context() as patch, torch.no_grad():
        patch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
        model(**inputs)
    return applied


@pytest.mark.parametrize(("name", "kernel"), TRANSDUCER_RUNS, ids=[f"{n}-{k}" for n, k in TRANSDUCER_RUNS])
def test_a_transducers_encoder_patterns_equal_the_kernels_at_the_first_decoding_step(name, kernel, monkeypatch) -> None:
    """The transducer runs at its first decoding step (the prediction network reads the blank token it starts
    from); its output is the joint network's logits for every frame, as the model's own forward makes them.

    The reference is what the running kernel applied: eager `output_attentions`, or under SDPA a plain softmax of
    the kernel's own arguments. (Nemotron's streaming encoder applies its chunked limited-context mask under SDPA,
    while transformers' eager path for it weights other keys: the two kernels disagree, and the capture follows
    the one that runs.)"""
    model = built_with(TRANSDUCERS[name], kernel)
    extractor = T.ParakeetFeatureExtractor(feature_size=MELS)
    trace = interpret.collect(model, extractor, audio_clips(CLIPS), names="*")
    encoded = trace.encoded
    assert trace.meta.adapter == "features" and trace.meta.kind == "encoder" and encoded.decoder is None
    start = {} if name.endswith("encoder") else {"decoder_input_ids": torch.full((2, 1), _BLANK)}
    with torch.no_grad():
        plain = model(**_feed(encoded), **start)
        reference = (eager_copy(model)(**_feed(encoded), **start, output_attentions=True).attentions
                     if kernel == "eager" else _sdpa_applied(model, monkeypatch, **_feed(encoded), **start))
    assert torch.equal(_output(trace.output), _output(plain))
    if start:  # logits [batch, frame, vocab (+ the TDT's durations)]
        assert trace.output.logits.shape[:2] == (2, encoded.pos) and trace.output.logits.shape[2] >= _BLANK + 1
    assert len(reference) == trace.meta.n_layers == 2
    mask = encoded.attention_mask.bool()
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    for layer, attention in enumerate(reference):
        attention = attention.float()
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention.masked_fill(~keep, 0),
                                   atol=TIGHT, rtol=0)


def test_a_transducer_starts_from_its_generation_configs_start_token_and_refuses_decoder_inputs() -> None:
    model = built_with(TRANSDUCERS["parakeet_rnnt"], "eager")
    assert features.start_token(model) == _BLANK
    model.generation_config.decoder_start_token_id = 3
    assert features.start_token(model) == 3
    with pytest.raises(InputError, match="decoder inputs do not apply") as err:
        interpret.collect(model, T.ParakeetFeatureExtractor(feature_size=MELS), audio_clips(CLIPS),
                          decoder_inputs=torch.ones(2, 1, dtype=torch.long))
    assert "\n" not in str(err.value)


def test_a_transducer_is_explained_with_rollout_and_a_report(tmp_path) -> None:
    model = built_with(TRANSDUCERS["parakeet_tdt"], "sdpa")
    report = interpret.explain(model, T.ParakeetFeatureExtractor(feature_size=MELS), audio_clips(CLIPS),
                               analyzers=["rollout", "attention_entropy"])
    path = tmp_path / "tdt.html"
    report.render(path)
    assert "audio_0" in path.read_text(encoding="utf-8")


# Canary and Cohere ASR: a Parakeet encoder under a Transformer decoder that reads text.
def _decoder_sizes() -> dict[str, Any]:
    return {**_SIZES, "num_key_value_heads": 4, "head_dim": 8, "vocab_size": len(word_tokenizer()),
            "max_position_embeddings": 64}


ASR_ENCODER_DECODERS: dict[str, Callable[[], Any]] = {
    "canary": lambda: T.CanaryForConditionalGeneration(T.CanaryConfig(
        encoder_config=_parakeet_encoder().to_dict(),
        decoder_config={"model_type": "canary_decoder", **_decoder_sizes()},
        vocab_size=len(word_tokenizer()))),
    "cohere_asr": lambda: T.CohereAsrForConditionalGeneration(T.CohereAsrConfig(
        encoder_config=_parakeet_encoder().to_dict(), **_decoder_sizes())),
}
ASR_RUNS = [(name, kernel) for name in ASR_ENCODER_DECODERS for kernel in ("sdpa", "eager")]
_DECODER_IDS = torch.tensor([[2, 5, 6], [2, 7, 0]])


@pytest.mark.parametrize(("name", "kernel"), ASR_RUNS, ids=[f"{n}-{k}" for n, k in ASR_RUNS])
def test_a_parakeet_encoder_under_a_text_decoder_equals_eager_on_every_side(name: str, kernel: str) -> None:
    model = built_with(ASR_ENCODER_DECODERS[name], kernel)
    extractor = T.ParakeetFeatureExtractor(feature_size=MELS)
    trace = interpret.collect(model, extractor, audio_clips(CLIPS), decoder_inputs=_DECODER_IDS, names="*")
    encoded = trace.encoded
    assert trace.meta.kind == "encoder-decoder" and encoded.decoder.tokens[0] == ["2", "5", "6"]
    # the encoder's own subsampling, not the unused length function Cohere ASR's top model keeps
    frames = extractor(audio_clips(CLIPS), sampling_rate=extractor.sampling_rate, padding="longest",
                       return_tensors="pt")["attention_mask"].long().sum(-1)
    assert encoded.lengths == model.get_encoder()._get_subsampling_output_length(frames).tolist()
    with torch.no_grad():
        output = eager_copy(model)(**_feed(encoded), decoder_input_ids=encoded.decoder.input_ids,
                                   decoder_attention_mask=encoded.decoder.attention_mask, output_attentions=True)
    torch.testing.assert_close(trace.output.logits, output.logits, atol=TIGHT, rtol=0)
    assert_encoder_decoder_patterns(trace, output, TIGHT)


def test_text_decoder_inputs_need_a_tokenizer_not_a_feature_extractor() -> None:
    model = built_with(ASR_ENCODER_DECODERS["canary"], "eager")
    with pytest.raises(InputError, match="text input needs a tokenizer") as err:
        interpret.collect(model, T.ParakeetFeatureExtractor(feature_size=MELS), audio_clips(CLIPS),
                          decoder_inputs=["the cat", "a dog"])
    assert "\n" not in str(err.value)


def test_interpret_models_lists_the_asr_models(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    kinds = {**{name: "encoder" for name in (*TRANSDUCERS, *STACKING, "nemotron_asr_streaming")},
             **{name: "encoder-decoder" for name in ASR_ENCODER_DECODERS}}
    result = CliRunner().invoke(cli, ["models", *kinds, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {row["model_type"] for row in rows} == set(kinds)
    for row in rows:
        assert (row["status"], row["adapter"], row["kind"]) == ("supported", "features", kinds[row["model_type"]]), row


# Nemotron 3's audio encoders: frames stacked 4 at a time (the last group zero-padded) and projected, no length
# function; the model masks a position by its first frame's mask.
STACKING: dict[str, Callable[[], Any]] = {
    name: (lambda model, config: lambda: model(config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        num_mel_bins=MELS, subsampling_factor=4)))(model, config)
    for name, model, config in (
        ("nemotron3_diarization_audio", T.Nemotron3DiarizationAudioModel, T.Nemotron3DiarizationAudioConfig),
        ("nemotron3_5_transcribe_asr_audio", T.Nemotron3_5TranscribeAsrAudioModel,
         T.Nemotron3_5TranscribeAsrAudioConfig))
}
STACKING_RUNS = [(name, kernel) for name in STACKING for kernel in ("sdpa", "eager")]


@pytest.mark.parametrize(("name", "kernel"), STACKING_RUNS, ids=[f"{n}-{k}" for n, k in STACKING_RUNS])
def test_stacked_frames_are_the_positions_and_patterns_equal_eager(name: str, kernel: str) -> None:
    model = built_with(STACKING[name], kernel)
    extractor = T.ParakeetFeatureExtractor(feature_size=MELS)
    trace = interpret.collect(model, extractor, audio_clips(CLIPS), names="*")
    encoded = trace.encoded
    assert speech.stacking(model) == 4
    frames = encoded.sample_mask.sum(-1).tolist()
    assert encoded.input_features.shape[1] == 26 and frames == [25, 15]
    with torch.no_grad():
        reference = eager_copy(model)(**_feed(encoded), output_attentions=True)
        plain = model(**_feed(encoded))
    # 26 frames make ceil(26 / 4) = 7 positions, as the model's own output has; a position is real where its
    # first frame is (frames 0, 4, 8, 12 of the 15-frame clip): the model gives the others no weight
    assert encoded.pos == plain.last_hidden_state.shape[1] == 7 and encoded.lengths == [7, 4]
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    mask = encoded.attention_mask.bool()
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    assert len(reference.attentions) == 2
    for layer, attention in enumerate(reference.attentions):
        assert (attention[1, :, :, 4:] == 0).all() and (attention[1, :, :, :4] > 0).all()
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention.masked_fill(~keep, 0),
                                   atol=TIGHT, rtol=0)


def test_a_saved_model_loads_with_its_feature_extractor(tmp_path) -> None:
    directory = tmp_path / "w2v-bert"
    _model("wav2vec2-bert", "eager").save_pretrained(directory)
    _extractor("wav2vec2-bert").save_pretrained(directory)
    model, extractor = interpret.load(directory, device="cpu")
    assert isinstance(extractor, T.SeamlessM4TFeatureExtractor)
    assert capturable_for(model, extractor).adapter == "features"
    trace = interpret.collect(model, extractor, audio_clips(CLIPS))
    with torch.no_grad():
        reference = eager_copy(_model("wav2vec2-bert", "eager"))(**_feed(trace.encoded), output_attentions=True)
    mask = trace.encoded.attention_mask.bool()
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    for layer, attention in enumerate(reference.attentions):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention.masked_fill(~keep, 0),
                                   atol=TIGHT, rtol=0)


def test_the_probe_runs_on_the_meta_device() -> None:
    with torch.device("meta"):
        model = T.ParakeetForCTC(T.ParakeetCTCConfig()).eval()  # the released shape: 8× subsampling, 80 mel bins
    capturable = capturable_for(model)
    assert capturable.adapter == "features" and features.feature_size(model) == 80
    assert speech.probe_samples(model) == 32  # 8× subsampling: 32 frames make 4 positions, 16 make 2


@pytest.mark.parametrize(("inputs", "with_extractor", "match"), [
    ("hello", True, "takes audio, not text"),
    (torch.zeros(2, 40, MELS + 1), False, rf"shape \(2, 40, {MELS + 1}\).*\[batch, frame, {MELS}\]"),
    (torch.zeros(2, 40, MELS, dtype=torch.int64), False, "takes float"),
    (torch.zeros(2, 400), True, r"shape \(2, 400\) is not understood"),
    ([np.zeros(400, dtype=np.float32)], False, "need the model's feature extractor"),
    (torch.zeros(0, 40, MELS), False, r"shape \(0, 40, 16\).*takes float"),
])
def test_bad_audio_is_refused_in_one_line(inputs, with_extractor, match) -> None:
    with pytest.raises(InputError, match=match) as err:
        interpret.collect(_model("parakeet_ctc", "sdpa"), _extractor("parakeet_ctc") if with_extractor else None, inputs)
    assert "\n" not in str(err.value)


def test_a_raw_waveform_extractor_is_refused_for_a_log_mel_model() -> None:
    waveform = T.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SAMPLING_RATE)
    with pytest.raises(InputError, match="returned input_values.*not input_features"):
        interpret.collect(_model("parakeet_ctc", "sdpa"), waveform, audio_clips(CLIPS))


# Speech2Text: an encoder-decoder on log-mel features (a 4× convolutional subsampling); its decoder reads text.
_DECODER_TEXTS = ["the cat sat", "a dog"]


def _speech2text() -> Any:
    vocab = len(word_tokenizer())
    return T.Speech2TextForConditionalGeneration(T.Speech2TextConfig(
        vocab_size=vocab, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, input_feat_per_channel=MELS,
        input_channels=1, conv_channels=16, conv_kernel_sizes=[5, 5], num_conv_layers=2, max_source_positions=200,
        max_target_positions=64, pad_token_id=0, bos_token_id=2, eos_token_id=3, decoder_start_token_id=2))


def _s2t_processor(directory) -> Any:
    """Save Speech2Text's feature extractor and a tokenizer to `directory` and return what `interpret.load` reads
    back from them: a Speech2TextProcessor holding both."""
    T.Speech2TextFeatureExtractor(feature_size=MELS, num_mel_bins=MELS).save_pretrained(directory)
    word_tokenizer().save_pretrained(directory)
    return T.AutoProcessor.from_pretrained(directory)


def test_speech2text_patterns_equal_the_eager_attentions_on_every_side(tmp_path) -> None:
    model = built_with(_speech2text, "eager")
    directory = tmp_path / "s2t"
    model.save_pretrained(directory)
    processor = _s2t_processor(directory)
    loaded, read = interpret.load(directory, device="cpu")
    assert type(read).__name__ == "Speech2TextProcessor"  # an encoder-decoder gets both halves
    trace = interpret.collect(loaded, read, audio_clips(CLIPS), decoder_inputs=_DECODER_TEXTS)
    encoded = trace.encoded
    assert capturable_for(loaded, read).adapter == "features" and encoded.decoder is not None
    frames = processor.feature_extractor(audio_clips(CLIPS), sampling_rate=SAMPLING_RATE, padding="longest",
                                         return_tensors="pt")["attention_mask"].long().sum(-1)
    assert encoded.lengths == features.frame_lengths(model, frames).tolist()
    with torch.no_grad():
        output = model(**_feed(encoded), decoder_input_ids=encoded.decoder.input_ids,
                       decoder_attention_mask=encoded.decoder.attention_mask, output_attentions=True)
    assert torch.equal(trace.output.logits, output.logits)
    assert_encoder_decoder_patterns(trace, output, TIGHT)
    report = interpret.explain(loaded, read, audio_clips(CLIPS), analyzers=["rollout"],
                               target=interpret.Subject(decoder_inputs=_DECODER_TEXTS))
    report.render(tmp_path / "s2t.html")
    assert "audio_0" in (tmp_path / "s2t.html").read_text(encoding="utf-8")


def test_speech2text_needs_one_decoder_input_per_clip(tmp_path) -> None:
    model = built_with(_speech2text, "eager")
    model.save_pretrained(tmp_path)  # the processor's class is read from the model's config
    processor = _s2t_processor(tmp_path)
    assert type(processor).__name__ == "Speech2TextProcessor"
    with pytest.raises(InputError, match="needs decoder inputs") as err:
        interpret.collect(model, processor, audio_clips(CLIPS))
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="decoder inputs have 1 examples but the encoder.s input 2"):
        interpret.collect(model, processor, audio_clips(CLIPS), decoder_inputs=["the cat"])
