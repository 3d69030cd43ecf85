"""A word-level tokenizer built in memory, for toy models and tiny test models of any family."""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from interpret.errors import ConfigError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)


def word_tokenizer(
    words: Sequence[str],
    *,
    model_max_length: int = 512,
    lowercase: bool = False,
    add_cls_sep: bool = True,
) -> PreTrainedTokenizerFast:
    """Return a fast word-level tokenizer: ids 0-4 are [PAD] [UNK] [CLS] [SEP] [MASK], then `words` in order.

    Text is split on whitespace and punctuation ("hi!" is "hi", "!"); unknown words become [UNK]. With
    `add_cls_sep` every text is wrapped as [CLS] ... [SEP] (pairs as [CLS] a [SEP] b [SEP]); padding is on
    the right with [PAD] = 0, and texts longer than `model_max_length` tokens are refused by `encode`.
    """
    vocab: dict[str, int] = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for word in words:
        if not isinstance(word, str) or not word or any(char.isspace() for char in word):
            raise ConfigError(
                f"vocabulary word {word!r} is not allowed; give non-empty words without spaces."
            )
        if word in SPECIAL_TOKENS:
            raise ConfigError(
                f"vocabulary word {word!r} is a special token; drop it from words ({SPECIAL_TOKENS})."
            )
        vocab.setdefault(word.lower() if lowercase else word, len(vocab))
    if model_max_length < 3:
        raise ConfigError(f"model_max_length={model_max_length} leaves no room for text; use at least 3.")
    core = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK))
    if lowercase:
        core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    if add_cls_sep:
        core.post_processor = processors.TemplateProcessing(
            single=f"{CLS} $A {SEP}",
            pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
            special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token=UNK,
        pad_token=PAD,
        cls_token=CLS,
        sep_token=SEP,
        mask_token=MASK,
        model_max_length=model_max_length,
        padding_side="right",
    )


def vocabulary_words(tokenizer: PreTrainedTokenizerFast) -> list[str]:
    """Return the non-special words of a `word_tokenizer`, in id order (what rebuilds it)."""
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return [token for token, _ in by_id if token not in SPECIAL_TOKENS]
