"""SpeechEncoderDecoderModel (a wav2vec2-family encoder on raw waveforms with any text decoder cross-attending to
it, as the speech-translation checkpoints pair them) through the `speech` adapter: positions the encoder's frames
(`audio_i`), the decoder side text given as `decoder_inputs`.

References are independent of the capture: the eager model's own `output_attentions` on every side (padding
masked), the encoder's own `_get_feat_extract_output_lengths` and `_get_feature_vector_attention_mask`.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers as T
from hf_tiny import (
    SAMPLING_RATE, assert_encoder_decoder_patterns, audio_clips, built_with, eager_copy, word_tokenizer,
)

import interpret
from interpret.capture.hf import catalog
from interpret.errors import InputError

TIGHT = 1e-6
CLIPS = (400, 250)  # 39 and 24 frames of the encoder below, the second clip padded
_DECODER_IDS = torch.tensor([[1, 5, 6], [1, 7, 0]])


def _model() -> Any:
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
                                      do_normalize=True, return_attention_mask=True)


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_patterns_equal_the_eager_output_attentions_on_every_side(kernel: str) -> None:
    model = built_with(_model, kernel)
    trace = interpret.collect(model, _extractor(), audio_clips(CLIPS), decoder_inputs=_DECODER_IDS, names="*")
    encoded = trace.encoded
    assert (trace.meta.adapter, trace.meta.kind) == ("speech", "encoder-decoder")
    encoder = model.get_encoder()
    assert encoded.pos == int(encoder._get_feat_extract_output_lengths(torch.tensor(max(CLIPS)))) == 39
    expected_mask = encoder._get_feature_vector_attention_mask(encoded.pos, encoded.sample_mask)
    assert torch.equal(encoded.attention_mask, expected_mask.long()) and encoded.lengths == [39, 24]
    assert encoded.tokens[0][:2] == ["audio_0", "audio_1"]
    inputs = {"input_values": encoded.input_values, "attention_mask": encoded.sample_mask,
              "decoder_input_ids": encoded.decoder.input_ids, "decoder_attention_mask": encoded.decoder.attention_mask}
    with torch.no_grad():
        output = eager_copy(model)(**inputs, output_attentions=True)
        plain = model(**inputs)
    assert torch.equal(trace.output.logits, plain.logits)
    assert_encoder_decoder_patterns(trace, output, TIGHT)


def test_rollout_and_a_report_on_the_decoders_decision(tmp_path) -> None:
    model = built_with(_model, "sdpa")
    report = interpret.explain(model, _extractor(), audio_clips(CLIPS), analyzers=["rollout"],
                               target=interpret.Subject(decoder_inputs=_DECODER_IDS))
    path = tmp_path / "speech-encoder-decoder.html"
    report.render(path)
    assert "audio_38" in path.read_text(encoding="utf-8")


def test_it_needs_decoder_inputs_and_is_listed() -> None:
    with pytest.raises(InputError, match="needs decoder inputs") as err:
        interpret.collect(built_with(_model, "sdpa"), _extractor(), audio_clips(CLIPS))
    assert "\n" not in str(err.value)
    row = catalog.describe("speech-encoder-decoder")
    assert (row.status, row.adapter, row.kind) == ("supported", "speech", "encoder-decoder"), row
