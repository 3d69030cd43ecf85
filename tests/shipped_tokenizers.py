"""The tokenizer classes decoder families really ship with, built in memory (no hub), pad token and all.

GPT-2, StarCoder (gpt_bigcode) and Phi ship byte-level BPE tokenizers (GPT2TokenizerFast,
CodeGenTokenizerFast) without a pad token; Llama, Mistral, Mixtral and Phi-3 ship LlamaTokenizerFast
(SentencePiece-style BPE), also without one, padding on the left. The vocabularies are trained here on a
few sentences with the `tokenizers` library, so every test text tokenizes into real subwords.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = (
    "the cat sat on the mat, and the dog ran!",
    "The service was slow, but the food was wonderful.",
    "a quiet morning by the river; nobody came.",
    "naïve café owners serve crème brûlée 😀 daily",
    "unbelievably long words tokenize into pieces\nand lines end",
    "tabs\tand  double spaces too",
)


def _vocab_and_merges(core: Tokenizer) -> tuple[dict[str, int], list[tuple[str, str]]]:
    merges = [tuple(merge) for merge in json.loads(core.to_str())["model"]["merges"]]
    return core.get_vocab(), merges  # type: ignore[return-value]


def byte_level(cls: Any = transformers.GPT2TokenizerFast, corpus: Sequence[str] = CORPUS, vocab_size: int = 400) -> Any:
    """Return a `cls` (a GPT-2-style byte-level BPE class) whose vocabulary and merges were trained on `corpus`;
    its only special token is <|endoftext|> (bos, eos and unk, as GPT-2 ships it), and it has no pad token."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]
    )
    core.train_from_iterator(list(corpus), trainer)
    vocab, merges = _vocab_and_merges(core)
    return cls(vocab=vocab, merges=merges)


def sentencepiece_bpe(corpus: Sequence[str] = CORPUS, vocab_size: int = 300) -> Any:
    """Return a LlamaTokenizerFast (▁-marked BPE, <unk>/<s>/</s>, no pad token, left padding) trained on `corpus`."""
    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"])
    core.train_from_iterator(list(corpus), trainer)
    vocab, merges = _vocab_and_merges(core)
    return transformers.LlamaTokenizerFast(vocab=vocab, merges=merges)


FALCON_SPECIALS = [">>TITLE<<", ">>ABSTRACT<<", ">>INTRODUCTION<<", ">>SUMMARY<<", ">>COMMENT<<", ">>ANSWER<<",
                   ">>QUESTION<<", ">>DOMAIN<<", ">>PREFIX<<", ">>SUFFIX<<", ">>MIDDLE<<", "<|endoftext|>"]


def falcon(corpus: Sequence[str] = CORPUS, vocab_size: int = 400) -> Any:
    """Return Falcon's tokenizer as it ships: a generic PreTrainedTokenizerFast over byte-level BPE, its eleven
    `>>NAME<<` specials first and <|endoftext|> (id 11) as the end of sequence, no pad token."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=FALCON_SPECIALS
    )
    core.train_from_iterator(list(corpus), trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")


def mpnet(corpus: Sequence[str] = CORPUS) -> Any:
    """Return an MPNetTokenizerFast (WordPiece, lower-cased) with MPNet's special ids: <s> 0, <pad> 1 (the padding
    index MPNet's position embeddings hard-code), </s> 2, <unk> 3, then [UNK] and the corpus's words, <mask> last."""
    splitter = pre_tokenizers.BertPreTokenizer()
    words = sorted({word for text in corpus for word, _ in splitter.pre_tokenize_str(text.lower())})
    vocab = {token: index for index, token in enumerate(["<s>", "<pad>", "</s>", "<unk>", "[UNK]", *words, "<mask>"])}
    return transformers.MPNetTokenizerFast(vocab=vocab)


def wordpiece(corpus: Sequence[str] = CORPUS) -> Any:
    """Return a BertTokenizerFast (WordPiece, lower-cased) with BERT's special ids: [PAD] 0, [UNK] 1, [CLS] 2,
    [SEP] 3, [MASK] 4, then the corpus's words; it gives segment ids (token_type_ids) for text pairs."""
    splitter = pre_tokenizers.BertPreTokenizer()
    words = sorted({word for text in corpus for word, _ in splitter.pre_tokenize_str(text.lower())})
    vocab = {token: index for index, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    return transformers.BertTokenizerFast(vocab=vocab)


def sentencepiece_unigram(corpus: Sequence[str] = CORPUS, vocab_size: int = 120) -> Any:
    """Return an AlbertTokenizerFast (SentencePiece-style unigram, lower-cased) trained on `corpus`, with ALBERT's
    special ids: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4."""
    core = Tokenizer(models.Unigram())
    core.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"],
                                      unk_token="<unk>")
    core.train_from_iterator([text.lower() for text in corpus], trainer)
    vocab = [tuple(piece) for piece in json.loads(core.to_str())["model"]["vocab"]]
    return transformers.AlbertTokenizerFast(vocab=vocab)


# the families of tests/hf_tiny.MATRIX that ship a tokenizer of their own, and ALBERT, MPNet and Falcon
SHIPPED_BY = {"albert": sentencepiece_unigram, "mpnet": mpnet, "falcon": falcon}

# decoder family (tests/hf_tiny.MATRIX) → the tokenizer it ships with
SHIPPED = {
    "gpt2": lambda: byte_level(transformers.GPT2TokenizerFast),
    "gpt_bigcode": lambda: byte_level(transformers.GPT2TokenizerFast),
    "phi": lambda: byte_level(transformers.CodeGenTokenizerFast),
    "llama": sentencepiece_bpe,
    "mistral": sentencepiece_bpe,
    "mixtral": sentencepiece_bpe,
    "phi3": sentencepiece_bpe,
    "falcon": falcon,
}
