"""Text for people: tokens as the words they spell, subwords grouped into words, and printable one-line text.

Tokenizers mark word boundaries in their own ways, which a report must not show raw:
- byte-level BPE (GPT-2, RoBERTa, Llama 3): every byte is mapped to a printable character (a space is `Ġ`, a
  newline `Ċ`) by GPT-2's `bytes_to_unicode` table (Radford et al. 2019, encoder.py); a token is a run of
  such characters, possibly only part of a multi-byte UTF-8 character;
- SentencePiece (T5, Llama 2): `▁` (U+2581) stands for a space before a word; unknown bytes may be spelled
  `<0x0A>` (byte fallback);
- WordPiece (BERT): a token that continues a word starts with `##`.
`display_tokens` turns each token into what a person reads (the raw token stays in exports), `word_spans` and
`words` group subword positions into words, and `aggregate` sums (or takes the max of) token scores per word.
`printable` escapes control and bidirectional-override characters in anything the CLI prints.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from functools import cache
from typing import Any, Literal, get_args

import numpy as np
from jaxtyping import Float

from interpret.errors import ConfigError, InputError, suggest

Scheme = Literal["byte_bpe", "sentencepiece", "wordpiece", "plain"]
SCHEMES: tuple[str, ...] = get_args(Scheme)
Aggregation = Literal["sum", "max"]

SENTENCEPIECE_SPACE = "\u2581"  # ▁
WORDPIECE_PREFIX = "##"
# Whitespace a token may consist of, drawn as a visible sign so that no chip or cell is blank.
VISIBLE_WHITESPACE = {" ": "\u2423", "\n": "\u21b5", "\r": "\u240d", "\t": "\u21e5"}  # ␣ ↵ ␍ ⇥
# Characters that can reorder or hide the text around them: the bidi embeddings, overrides and isolates, the
# directional marks, and the Arabic letter mark (Unicode UAX #9, table 1).
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_BYTE_WHITESPACE = ("\u0120", "\u010a", "\u0109", "\u010d")  # Ġ Ċ ĉ č: space, newline, tab, CR as byte characters
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


# ---------- which scheme a tokenizer uses ----------


def token_scheme(tokenizer: Any) -> Scheme:
    """Return how the tokenizer marks words: "byte_bpe", "sentencepiece", "wordpiece" or "plain".

    Read from the tokenizers backend's decoder, pre-tokenizer and model (a transformers tokenizer's
    `backend_tokenizer`, or a `tokenizers.Tokenizer`); a slow Python tokenizer is recognised by its
    `byte_encoder` / `sp_model` / `wordpiece_tokenizer`. Anything else (a word-level tokenizer, None) is
    "plain": its tokens are shown as they are.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is None and hasattr(tokenizer, "pre_tokenizer") and hasattr(tokenizer, "decoder"):
        backend = tokenizer  # a tokenizers.Tokenizer itself
    if backend is not None:
        types = _component_types(backend.decoder) | _component_types(backend.pre_tokenizer)
        model = type(backend.model).__name__
        if "ByteLevel" in types:
            return "byte_bpe"
        if "WordPiece" in types or model == "WordPiece":
            return "wordpiece"
        if "Metaspace" in types or f"Replace:{SENTENCEPIECE_SPACE}" in types or model == "Unigram":
            return "sentencepiece"
        return "plain"
    if hasattr(tokenizer, "byte_encoder"):
        return "byte_bpe"
    if hasattr(tokenizer, "sp_model"):
        return "sentencepiece"
    if hasattr(tokenizer, "wordpiece_tokenizer"):
        return "wordpiece"
    return "plain"


def _component_types(component: Any) -> set[str]:
    """Return the types in a decoder / pre-tokenizer, nested Sequences included (Replace with its pattern)."""
    if component is None:
        return set()
    try:
        state = json.loads(component.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return {type(component).__name__}
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str):
                found.add(kind)
                if kind == "Replace":
                    pattern = node.get("pattern", {})
                    found.add(f"Replace:{pattern.get('String', '') if isinstance(pattern, dict) else ''}")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(state)
    return found


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ConfigError(
            f"token scheme {scheme!r} is unknown; use one of {', '.join(SCHEMES)}.{suggest(scheme, SCHEMES)}"
        )


# ---------- tokens as people read them ----------


def display_tokens(tokens: Sequence[str], scheme: str) -> list[str]:
    """Return each token as a person reads it: [pos] → [pos] strings.

    Subword markers are removed (`Ġ`/`▁` before a word, `##` inside one), byte-level characters become the
    text they encode (a byte that is only part of a character shows as `\\xNN`), a token of whitespace shows
    as visible signs (␣ ↵ ␍ ⇥), and control and bidi characters are escaped (`printable`). Special tokens
    ([CLS], <s>, <|endoftext|>) are kept as they are.
    """
    _check_scheme(scheme)
    return [_visible(_piece(token, scheme), strip_boundary=scheme in ("byte_bpe", "sentencepiece")) for token in tokens]


def _piece(token: str, scheme: str) -> str:
    """Return the text a token stands for, its word-boundary marker turned into a space (or dropped: `##`)."""
    if scheme == "byte_bpe":
        return _byte_text(token)
    if scheme == "sentencepiece":
        return _byte_fallback(token).replace(SENTENCEPIECE_SPACE, " ")
    if scheme == "wordpiece":
        continues = token.startswith(WORDPIECE_PREFIX) and token != WORDPIECE_PREFIX
        return token[len(WORDPIECE_PREFIX) :] if continues else token
    return token


def _byte_text(token: str) -> str:
    """Return the text a byte-level token encodes; a token with characters outside the byte table is kept."""
    decoder = _unicode_to_byte()
    if not token or any(char not in decoder for char in token):
        return token  # an added or special token, not a run of byte characters
    return bytes(decoder[char] for char in token).decode("utf-8", errors="backslashreplace")


def _byte_fallback(token: str) -> str:
    """Return a SentencePiece token with a byte-fallback piece `<0xNN>` of an ASCII byte as that character."""
    match = _BYTE_FALLBACK.fullmatch(token)
    if match and int(match.group(1), 16) < 0x80:
        return chr(int(match.group(1), 16))
    return token


@cache
def _unicode_to_byte() -> dict[str, int]:
    """Return GPT-2's `bytes_to_unicode` table inverted: printable character → byte.

    Bytes that are printable Latin-1 characters (!..~, ¡..¬, ®..ÿ) map to themselves; the other 68 map, in
    byte order, to U+0100, U+0101, ... (so a space, 0x20, is U+0120 `Ġ` and a newline, 0x0A, is U+010A `Ċ`).
    """
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(byte): byte for byte in kept}
    shifted = [byte for byte in range(256) if byte not in set(kept)]
    table.update({chr(256 + n): byte for n, byte in enumerate(shifted)})
    return table


def _visible(text: str, *, strip_boundary: bool) -> str:
    """Return text for a chip or cell: one leading word-boundary space dropped, line breaks and tabs (and the
    spaces of a token that is only whitespace) drawn as visible signs, control and bidi characters escaped."""
    blank = not text.strip()
    if strip_boundary and not blank and text.startswith(" "):
        text = text[1:]
    signs = VISIBLE_WHITESPACE if blank else {char: sign for char, sign in VISIBLE_WHITESPACE.items() if char != " "}
    return printable("".join(signs.get(char, char) for char in text))


# ---------- words ----------


def word_spans(word_ids: Sequence[int | None]) -> list[tuple[int, int]]:
    """Return the [start, stop) position span of each word: runs of equal word ids, None (special) left out.

    word_ids: [pos] as a fast tokenizer's `Encoding.word_ids()` gives them. A new span starts wherever the id
    changes, so the second text of a pair (whose ids start again at 0) gets spans of its own.
    """
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for position, word in enumerate([*word_ids, None]):
        if start is not None and (word is None or word != word_ids[start]):
            spans.append((start, position))
            start = None
        if start is None and word is not None:
            start = position
    return spans


def marker_word_ids(tokens: Sequence[str], scheme: str, special: Sequence[bool] | None = None) -> list[int | None]:
    """Return word ids [pos] read from the tokens' own markers, for tokenizers whose word_ids() do not split
    words (Llama's SentencePiece-style BPE calls the whole text word 0).

    A word starts at a token that begins with whitespace (`Ġ`, `Ċ`, `ĉ` byte-level; `▁` SentencePiece) or does
    not begin with `##` (WordPiece), and after a special token; special tokens get None. So punctuation joins
    the word before it unless the tokenizer put a space before it. "plain": every token is a word.
    """
    _check_scheme(scheme)
    ids: list[int | None] = []
    word = -1
    previous_special = True
    for position, token in enumerate(tokens):
        if special is not None and special[position]:
            ids.append(None)
            previous_special = True
            continue
        if scheme == "byte_bpe":
            starts = token.startswith(_BYTE_WHITESPACE)
        elif scheme == "sentencepiece":
            starts = token.startswith(SENTENCEPIECE_SPACE)
        elif scheme == "wordpiece":
            starts = not token.startswith(WORDPIECE_PREFIX)
        else:
            starts = True
        if starts or previous_special:
            word += 1
        ids.append(word)
        previous_special = False
    return ids


def words(tokens: Sequence[str], word_ids: Sequence[int | None], scheme: str) -> list[str]:
    """Return the words the spans of `word_ids` spell, one per span of `word_spans(word_ids)`, as people read them.

    A byte-level word is decoded from all its bytes together, so a character split across tokens (an emoji)
    comes out whole.
    """
    _check_scheme(scheme)
    if len(tokens) != len(word_ids):
        raise InputError(f"{len(tokens)} tokens but {len(word_ids)} word ids; give one word id per token.")
    out = []
    for start, stop in word_spans(word_ids):
        pieces = tokens[start:stop]
        if scheme == "byte_bpe" and all(char in _unicode_to_byte() for token in pieces for char in token):
            text = bytes(_unicode_to_byte()[char] for token in pieces for char in token).decode(
                "utf-8", errors="backslashreplace"
            )
        else:
            text = "".join(_piece(token, scheme) for token in pieces)
        out.append(_visible(text, strip_boundary=scheme in ("byte_bpe", "sentencepiece")))
    return out


def aggregate(
    scores: Float[np.ndarray, "*batch pos"], groups: Sequence[tuple[int, int]], how: str = "sum"
) -> Float[np.ndarray, "*batch word"]:
    """Return the scores of each group of positions: [*batch, pos] → [*batch, word].

    groups: the [start, stop) span of each word (`word_spans`). how: "sum" (the default: a word's share of an
    additive attribution is the sum of its tokens') or "max" (the largest token score, for scores that do
    not add up, such as attention weights). A NaN among the grouped scores is an error, not a value.
    """
    if how not in get_args(Aggregation):
        raise ConfigError(
            f"how={how!r} is not an aggregation; use 'sum' or 'max'.{suggest(str(how), get_args(Aggregation))}"
        )
    scores = np.asarray(scores)
    n = scores.shape[-1]
    index: list[int] = []
    starts: list[int] = []
    for start, stop in groups:
        if not 0 <= start < stop <= n:
            raise InputError(
                f"word span ({start}, {stop}) is empty or outside the {n} positions; give spans from word_spans()."
            )
        starts.append(len(index))
        index.extend(range(start, stop))
    if not starts:
        return np.zeros((*scores.shape[:-1], 0), dtype=scores.dtype)
    gathered = scores[..., index]
    bad = np.isnan(gathered)
    if bad.any():
        position = index[int(np.argwhere(bad)[0][-1])]
        raise InputError(f"the score at position {position} is NaN; a word's score needs every token's score.")
    reduce = np.add if how == "sum" else np.maximum
    return reduce.reduceat(gathered, starts, axis=-1)


# ---------- printable text for the terminal ----------


def printable(text: str) -> str:
    """Return `text` with every character that a terminal would act on, or that reorders text, escaped.

    Escaped as `\\xNN` / `\\uNNNN`: C0 and C1 controls and DEL (ESC starts a terminal escape sequence; CR and
    BS overwrite what was printed), line and paragraph separators, lone surrogates, and the bidi controls
    (an RLO makes the rest of the line read backwards). Everything else, a backslash included, is kept.
    """
    return "".join(_escape(char) if _unsafe(char) else char for char in text)


def _unsafe(char: str) -> bool:
    return char in BIDI_CONTROLS or unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
