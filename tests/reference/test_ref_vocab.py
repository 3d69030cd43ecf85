"""The in-memory word-level tokenizer and its use through interpret.inputs.encode."""

from __future__ import annotations

import pytest
import torch

from interpret.errors import ConfigError, InputError
from interpret.inputs import encode, model_limit
from interpret.reference import word_tokenizer
from interpret.reference.vocab import vocabulary_words


def test_special_ids_and_words() -> None:
    tokenizer = word_tokenizer(["the", "cat", "the", "!"])
    assert [
        tokenizer.pad_token_id,
        tokenizer.unk_token_id,
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
    ] == [0, 1, 2, 3]
    assert tokenizer.convert_tokens_to_ids(["the", "cat", "!"]) == [5, 6, 7]
    assert len(tokenizer) == 8 and vocabulary_words(tokenizer) == ["the", "cat", "!"]
    assert tokenizer.padding_side == "right"


def test_encode_pads_right_and_marks_specials() -> None:
    tokenizer = word_tokenizer(["the", "cat", "sat", "!"], model_max_length=10)
    encoded = encode(tokenizer, ["the cat sat!", "the dog"])
    assert encoded.tokens == [
        ["[CLS]", "the", "cat", "sat", "!", "[SEP]"],
        ["[CLS]", "the", "[UNK]", "[SEP]", "[PAD]", "[PAD]"],
    ]
    assert encoded.attention_mask.tolist() == [[1] * 6, [1, 1, 1, 1, 0, 0]]
    assert encoded.special.tolist() == [
        [True, False, False, False, False, True],
        [True, False, False, True, True, True],
    ]
    assert encoded.input_ids.dtype == torch.long


def test_limit_and_pairs() -> None:
    tokenizer = word_tokenizer(["a"], model_max_length=4)
    assert model_limit(tokenizer, None) == 4
    with pytest.raises(InputError, match="at most 4"):
        encode(tokenizer, "a a a a", limit=model_limit(tokenizer, None))
    pair = tokenizer("a", "a a")
    assert tokenizer.convert_ids_to_tokens(pair["input_ids"]) == ["[CLS]", "a", "[SEP]", "a", "a", "[SEP]"]


def test_lowercase_option_and_bad_words() -> None:
    assert word_tokenizer(["Cat"], lowercase=True)("CAT")["input_ids"] == [2, 5, 3]
    with pytest.raises(ConfigError, match="'two words'"):
        word_tokenizer(["two words"])
    with pytest.raises(ConfigError, match=r"'\[PAD\]'"):
        word_tokenizer(["[PAD]"])
