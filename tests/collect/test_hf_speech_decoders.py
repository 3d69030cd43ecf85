"""Speech encoder-decoders through the `speech` adapter: raw waveforms, `input_values` [batch, samples] with the
feature extractor's sample mask, the encoder's frames as positions (`audio_i`), the decoder side text given as
`decoder_inputs`. Moonshine's frames come after its three strided convolutions (64 × 3 × 2 samples apart);
SpeechEncoderDecoderModel pairs a wav2vec2-family encoder with any text decoder cross-attending to it, as the
speech-translation checkpoints do.

References are independent of the capture: the eager model's own `output_attentions` on every side; the frame
count of the model's own (scalar) `_get_feat_extract_output_lengths`, clip by clip, or the encoder's; the frame
mask as Moonshine's encoder code forms it, restated plainly (every 384th sample's mask), or the wav2vec2 encoder's
own `_get_feature_vector_attention_mask`; the model's own zero weight to padded frames.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers as T
from hf_tiny import SAMPLING_RATE, assert_encoder_decoder_patterns, audio_clips, built_with, eager_copy, word_tokenizer

import interpret
from interpret.capture.hf import catalog, speech
from interpret.errors import InputError

TIGHT = 1e-6
CLIPS = (8000, 5000)  # 0.5 s and 0.31 s: 19 frames, the second clip padded
WAV2VEC2_CLIPS = (400, 250)  # 39 and 24 frames of the wav2vec2 encoder below, the second clip padded
STRIDE = 64 * 3 * 2
_DECODER_IDS = torch.tensor([[1, 5, 6], [1, 7, 0]])


def _moonshine() -> Any:
    return T.MoonshineForConditionalGeneration(T.MoonshineConfig(
        vocab_size=len(word_tokenizer()), hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
        encoder_num_key_value_heads=4, decoder_num_key_value_heads=4, max_position_embeddings=64, pad_token_id=0))


def _speech_encoder_decoder() -> Any:
    encoder = T.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=4,
                               num_conv_pos_embedding_groups=2, feat_extract_norm="layer")
    decoder = T.BertConfig(vocab_size=len(word_tokenizer()), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=64, is_decoder=True, add_cross_attention=True,
                           pad_token_id=0)
    config = T.SpeechEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id = 1, 0
    return T.SpeechEncoderDecoderModel(config=config)


def _extractor() -> Any:
    return T.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SAMPLING_RATE, padding_value=0.0,
                                      do_normalize=False, return_attention_mask=True)


def _captured_and_references(build: Any, kernel: str, clips: tuple[int, ...]) -> tuple[Any, Any, Any, Any]:
    """Return (model, its trace of every hook on `clips` with the decoder ids, the eager copy's output with
    attentions, the model's own output without a key/value cache, as the capture runs it) on the trace's inputs.

    (With a cache the decoder multiplies other shapes, which on some CPUs rounds a logit one unit differently.)"""
    model = built_with(build, kernel)
    trace = interpret.collect(model, _extractor(), audio_clips(clips), decoder_inputs=_DECODER_IDS, names="*")
    encoded = trace.encoded
    assert (trace.meta.adapter, trace.meta.kind) == ("speech", "encoder-decoder")
    inputs = {"input_values": encoded.input_values, "attention_mask": encoded.sample_mask,
              "decoder_input_ids": encoded.decoder.input_ids, "decoder_attention_mask": encoded.decoder.attention_mask}
    with torch.no_grad():
        return model, trace, eager_copy(model)(**inputs, output_attentions=True), model(**inputs, use_cache=False)


# model type -> (builder, clip lengths, last frame of the longer clip)
MODELS = {"moonshine": (_moonshine, CLIPS, 18), "speech-encoder-decoder": (_speech_encoder_decoder, WAV2VEC2_CLIPS, 38)}


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_patterns_equal_the_eager_output_attentions_on_every_side(kernel: str) -> None:
    model, trace, output, plain = _captured_and_references(_moonshine, kernel, CLIPS)
    encoded = trace.encoded
    # the model's own frame count of the batch (its function takes one length at a time)
    assert encoded.pos == model.model._get_feat_extract_output_lengths(max(CLIPS)) == 19
    # the frame mask as the encoder forms it: the sample mask of every 384th sample, cut to the frames; so the
    # second clip's real frames are the 14 that start inside it, not the 11 its length alone makes
    assert encoded.lengths == [19, 14] and model.model._get_feat_extract_output_lengths(CLIPS[1]) == 11
    # the frame mask as the encoder forms it: the sample mask of every 384th sample, cut to the frames
    expected_mask = encoded.sample_mask[:, ::STRIDE][:, :encoded.pos]
    assert torch.equal(encoded.attention_mask, expected_mask.long())
    assert torch.equal(trace.output.logits, plain.logits)
    for attention in output.encoder_attentions:  # the model itself gives padded frames no weight
        real = encoded.lengths[1]
        assert (attention[1, :, :, real:] == 0).all() and (attention[1, :, :, :real] > 0).all()
    assert_encoder_decoder_patterns(trace, output, TIGHT)


def test_frame_counts_and_masks_use_the_models_own_functions() -> None:
    model = built_with(_moonshine, "eager")
    lengths = speech.frame_lengths(model, torch.tensor([8000, 5000, 1000]))
    assert lengths.tolist() == [model.model._get_feat_extract_output_lengths(n) for n in (8000, 5000, 1000)]
    sample_mask = torch.zeros(2, 8000, dtype=torch.long)
    sample_mask[0], sample_mask[1, :5000] = 1, 1
    assert speech.frame_mask(model, 19, sample_mask).sum(-1).tolist() == [19, 14]  # the first sample of frame 13: 4992
    # the encoder's own mask agrees: it gives frames 11..13 of the second clip weight (they start inside the clip)
    assert speech.strided_mask(model, 19, sample_mask).tolist() == speech.frame_mask(model, 19, sample_mask).tolist()


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_a_speech_encoder_decoder_s_patterns_equal_the_eager_output_attentions_on_every_side(kernel: str) -> None:
    model, trace, output, plain = _captured_and_references(_speech_encoder_decoder, kernel, WAV2VEC2_CLIPS)
    encoded = trace.encoded
    encoder = model.get_encoder()
    assert encoded.pos == int(encoder._get_feat_extract_output_lengths(torch.tensor(max(WAV2VEC2_CLIPS)))) == 39
    expected_mask = encoder._get_feature_vector_attention_mask(encoded.pos, encoded.sample_mask)
    assert torch.equal(encoded.attention_mask, expected_mask.long()) and encoded.lengths == [39, 24]
    assert torch.equal(trace.output.logits, plain.logits)
    assert_encoder_decoder_patterns(trace, output, TIGHT)


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_rollout_and_a_report_on_the_decoders_decision(model_type: str, tmp_path) -> None:
    build, clips, last = MODELS[model_type]
    report = interpret.explain(built_with(build, "sdpa"), _extractor(), audio_clips(clips), analyzers=["rollout"],
                               target=interpret.Subject(decoder_inputs=_DECODER_IDS))
    path = tmp_path / f"{model_type}.html"
    report.render(path)
    assert f"audio_{last}" in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_it_needs_decoder_inputs_and_is_listed(model_type: str) -> None:
    build, clips, _ = MODELS[model_type]
    with pytest.raises(InputError, match="needs decoder inputs") as err:
        interpret.collect(built_with(build, "sdpa"), _extractor(), audio_clips(clips))
    assert "\n" not in str(err.value)
    row = catalog.describe(model_type)
    assert (row.status, row.adapter, row.kind) == ("supported", "speech", "encoder-decoder"), row
