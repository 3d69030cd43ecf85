"""The longest text the toolkit tokenizes, in UTF-8 bytes, checked before any tokenizer sees it.

Tokenizing takes time in proportion to the text, whatever the model keeps of it: MiniLM's tokenizer took 6.5 s
for 1 MB on a busy two-core machine, so a 20 MB line held a command for minutes before its token count could
be refused. A text is therefore measured in bytes first, against a bound that follows from the model's
token limit: `BYTES_PER_TOKEN` bytes for each token the model reads. English averages about 4 bytes a token
and no script comes near 256, so only a text padded with what a tokenizer drops (runs of spaces, control
characters) or reads as one token (a word WordPiece turns into one [UNK]) can be refused while its tokens
would fit. A model without a token limit is bounded as one of `NO_LIMIT_TOKENS` tokens (1 MiB).

No torch and no numpy: the command line checks this before it imports either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from interpret.errors import InputError

BYTES_PER_TOKEN = 256
NO_LIMIT_TOKENS = 4096


def byte_bound(token_limit: int | None) -> int:
    """Return the most UTF-8 bytes one text may have for a model that reads at most `token_limit` tokens."""
    return BYTES_PER_TOKEN * (token_limit or NO_LIMIT_TOKENS)


def check_text_bytes(texts: Sequence[str], token_limit: int | None, name: Callable[[int], str] = lambda i: f"text {i}") -> None:
    """Raise InputError naming the first text longer than `byte_bound(token_limit)` bytes (`name(i)` names text i)."""
    bound = byte_bound(token_limit)
    for i, text in enumerate(texts):
        if len(text) * 4 <= bound:  # a character is at most 4 bytes: no need to encode
            continue
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > bound:
            reads = f"reads at most {token_limit} tokens" if token_limit else f"has no token limit (counted as {NO_LIMIT_TOKENS})"
            raise InputError(
                f"{name(i)} is {size:,} bytes, more than the {bound:,} a text may have ({BYTES_PER_TOKEN} bytes for each"
                f" token: the model {reads}); it is refused before tokenizing, so shorten it or split it into several texts."
            )
