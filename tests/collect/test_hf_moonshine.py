"""Moonshine through the `speech` adapter: an encoder-decoder on raw waveforms, `input_values` [batch, samples]
with the feature extractor's sample mask, positions the frames after its three strided convolutions (64 × 3 × 2
samples apart), its decoder side text given as `decoder_inputs`.

References are independent of the capture: the eager model's own `output_attentions` on every side; the frame
count of the model's own (scalar) `_get_feat_extract_output_lengths`, clip by clip; the frame mask as the
encoder's code forms it, restated plainly (every 384th sample's mask); the model's own zero weight to padded
frames.
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
STRIDE = 64 * 3 * 2
_DECODER_IDS = torch.tensor([[1, 5, 6], [1, 7, 0]])


def _moonshine() -> Any:
    return T.MoonshineForConditionalGeneration(T.MoonshineConfig(
        vocab_size=len(word_tokenizer()), hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
        encoder_num_key_value_heads=4, decoder_num_key_value_heads=4, max_position_embeddings=64, pad_token_id=0))


def _extractor() -> Any:
    return T.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SAMPLING_RATE, padding_value=0.0,
                                      do_normalize=False, return_attention_mask=True)


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_patterns_equal_the_eager_output_attentions_on_every_side(kernel: str) -> None:
    model = built_with(_moonshine, kernel)
    trace = interpret.collect(model, _extractor(), audio_clips(CLIPS), decoder_inputs=_DECODER_IDS, names="*")
    encoded = trace.encoded
    assert (trace.meta.adapter, trace.meta.kind) == ("speech", "encoder-decoder")
    # the model's own frame count of the batch (its function takes one length at a time)
    assert encoded.pos == model.model._get_feat_extract_output_lengths(max(CLIPS)) == 19
    # the frame mask as the encoder forms it: the sample mask of every 384th sample, cut to the frames; so the
    # second clip's real frames are the 14 that start inside it, not the 11 its length alone makes
    assert encoded.lengths == [19, 14] and model.model._get_feat_extract_output_lengths(CLIPS[1]) == 11
    # the frame mask as the encoder forms it: the sample mask of every 384th sample, cut to the frames
    expected_mask = encoded.sample_mask[:, ::STRIDE][:, :encoded.pos]
    assert torch.equal(encoded.attention_mask, expected_mask.long())
    inputs = {"input_values": encoded.input_values, "attention_mask": encoded.sample_mask,
              "decoder_input_ids": encoded.decoder.input_ids, "decoder_attention_mask": encoded.decoder.attention_mask}
    with torch.no_grad():
        output = eager_copy(model)(**inputs, output_attentions=True)
        plain = model(**inputs)
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


def test_rollout_and_a_report_on_the_decoders_decision(tmp_path) -> None:
    model = built_with(_moonshine, "sdpa")
    report = interpret.explain(model, _extractor(), audio_clips(CLIPS), analyzers=["rollout"],
                               target=interpret.Subject(decoder_inputs=_DECODER_IDS))
    path = tmp_path / "moonshine.html"
    report.render(path)
    assert "audio_18" in path.read_text(encoding="utf-8")


def test_it_needs_decoder_inputs_and_is_listed() -> None:
    with pytest.raises(InputError, match="needs decoder inputs") as err:
        interpret.collect(built_with(_moonshine, "sdpa"), _extractor(), audio_clips(CLIPS))
    assert "\n" not in str(err.value)
    row = catalog.describe("moonshine")
    assert (row.status, row.adapter, row.kind) == ("supported", "speech", "encoder-decoder"), row
