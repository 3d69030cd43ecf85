"""`as_encoded`: what a user passes (text, texts, ids, embeddings, an Encoded; a decoder side; continuations) becomes
one checked Encoded, with one refusal per mistake, word for word as `collect` gives it."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from hf_tiny import DECODER_TEXTS, TEXTS, word_tokenizer

from interpret.errors import InputError
from interpret.inputs import Encoded, as_encoded, encode, from_ids

IDS = torch.tensor([[2, 5, 6, 7, 8, 3], [2, 9, 10, 11, 3, 0]])


def _encoded(inputs: Any, kind: str = "encoder", max_positions: int | None = 16, **options: Any) -> Encoded:
    return as_encoded(word_tokenizer(), inputs, kind=kind, max_positions=max_positions, **options)


def test_tensors_are_cut_to_max_length_and_marked_truncated() -> None:
    for given in (IDS, torch.randn(2, 6, 4)):
        cut = _encoded(given, max_length=4)
        kept = cut.input_ids if given.dtype == torch.long else cut.inputs_embeds
        assert torch.equal(kept, given[:, :4]) and cut.pos == 4 and cut.truncated == (True, True)
        assert cut.tokens == [row[:4] for row in _encoded(given).tokens]
        whole = _encoded(given, max_length=6)
        assert whole.pos == 6 and whole.truncated == ()
    assert _encoded(IDS).tokens[0] == ["[CLS]", "the", "cat", "sat", "on", "[SEP]"]


def test_each_side_of_an_encoder_decoder() -> None:
    both = _encoded(TEXTS, kind="encoder-decoder", decoder_inputs=DECODER_TEXTS, continuations=["the cat", "a dog"])
    alone = encode(word_tokenizer(), DECODER_TEXTS, limit=16, continuations=["the cat", "a dog"])
    assert torch.equal(both.input_ids, encode(word_tokenizer(), TEXTS, limit=16).input_ids) and both.continuation == ()
    assert torch.equal(both.decoder.input_ids, alone.input_ids) and both.decoder.continuation == (2, 2)
    given = from_ids(IDS)
    assert _encoded(given, kind="decoder") is given


@pytest.mark.parametrize(("inputs", "options", "message"), [
    (TEXTS, {"kind": "encoder-decoder"},
     "an encoder-decoder model needs decoder inputs; pass decoder_inputs= (text or ids; CLI: --decoder-text)."),
    (TEXTS, {"kind": "decoder", "decoder_inputs": DECODER_TEXTS},
     "decoder inputs were given but this is a decoder model; drop them (CLI: --decoder-text)."),
    (TEXTS, {"kind": "encoder-decoder", "decoder_inputs": DECODER_TEXTS[:1]},
     "decoder inputs have 1 examples but the encoder inputs 2; give one decoder input per example."),
    (IDS, {"continuations": "a dog"}, "a continuation follows a text; give the inputs as text to add one."),
    ({"text": TEXTS}, {}, "text pairs are given as {'text': texts, 'text_pair': texts}; 'text_pair' is missing."),
    ({TEXTS[0]}, {}, "inputs of type set are not understood; pass text, a list of texts, text pairs, a tensor of token ids"
     " [batch, pos], embeddings [batch, pos, d_model] or an Encoded."),
    (IDS, {"max_positions": 5}, "the input has 6 positions but the model accepts at most 5; shorten it or pass max_length=5."),
    (from_ids(IDS), {"max_positions": 5, "max_length": 5},
     "the input has 6 positions but the model accepts at most 5; shorten it or pass max_length=5."),
    (torch.randn(2, 6, 4), {"max_positions": 5}, "the input has 6 positions but the model accepts at most 5;"),
    (IDS[0], {"max_length": 4}, "token ids must be an integer tensor [batch, pos]; got torch.int64 of shape (6,)."),
    (IDS.bool(), {"max_length": 4}, "token ids must be an integer tensor [batch, pos]; got torch.bool of shape (2, 6)."),
    (torch.randn(2, 6), {"max_length": 4}, "embeddings must be a float tensor [batch, pos, d_model]; got torch.float32 of shape (2, 6)."),
])
def test_refusals(inputs: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match="^" + re.escape(message)):
        _encoded(inputs, **options)


def test_text_needs_a_tokenizer() -> None:
    with pytest.raises(InputError, match=r"^text input needs a tokenizer; pass tokenizer= or give a tensor of token ids\.$"):
        as_encoded(None, "the cat", kind="encoder", max_positions=8)


def test_reads_media_tells_tokens_from_pixels_and_audio() -> None:
    """Evidence removes tokens, so it asks `reads_media` whether the model reads tokens at all."""
    text = encode(word_tokenizer(), TEXTS)
    assert not text.reads_media
    one = {"attention_mask": torch.ones(1, 2, dtype=torch.long), "tokens": [["a", "b"]],
           "special": torch.zeros(1, 2, dtype=torch.bool)}
    assert Encoded(**one, pixel_values=torch.zeros(1, 3, 4, 4)).reads_media
    assert Encoded(**one, input_features=torch.zeros(1, 8, 16)).reads_media
    assert Encoded(**one, input_values=torch.zeros(1, 400)).reads_media


def test_rows_keep_every_input_the_model_reads() -> None:
    """`rows` is the batch an analyzer feeds back to the model: audio features, a feature mask and a dual encoder's
    image side go with their examples (the gradient methods on Whisper re-run the model from these rows)."""
    features = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)  # [batch, frame, feature]
    frame_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    pixels = torch.randn(2, 3, 8, 8)
    image = Encoded(attention_mask=torch.ones(2, 5, dtype=torch.long), tokens=[["p"] * 5] * 2,
                    special=torch.zeros(2, 5, dtype=torch.bool), pixel_values=pixels)
    encoded = Encoded(attention_mask=torch.tensor([[1, 1], [1, 0]]), tokens=[["a", "b"]] * 2,
                      special=torch.zeros(2, 2, dtype=torch.bool), input_features=features, sample_mask=frame_mask,
                      image=image)
    row = encoded.rows(torch.tensor([1]))
    assert torch.equal(row.input_features, features[1:]) and torch.equal(row.sample_mask, frame_mask[1:])
    assert torch.equal(row.image.pixel_values, pixels[1:]) and row.image.batch == 1
    with pytest.raises(InputError, match=r"sample_mask must be \[batch, samples\]"):
        Encoded(attention_mask=torch.ones(2, 2, dtype=torch.long), tokens=[["a", "b"]] * 2,
                special=torch.zeros(2, 2, dtype=torch.bool), input_features=features, sample_mask=frame_mask[:, :2])
