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


# decoder family (tests/hf_tiny.MATRIX) → the tokenizer it ships with
SHIPPED = {
    "gpt2": lambda: byte_level(transformers.GPT2TokenizerFast),
    "gpt_bigcode": lambda: byte_level(transformers.GPT2TokenizerFast),
    "phi": lambda: byte_level(transformers.CodeGenTokenizerFast),
    "llama": sentencepiece_bpe,
    "mistral": sentencepiece_bpe,
    "mixtral": sentencepiece_bpe,
    "phi3": sentencepiece_bpe,
}
