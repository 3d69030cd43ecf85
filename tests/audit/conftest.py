"""The tiny reference classifier and word tokenizer of the audit tests (a module may define its own `tokenizer` and
`model`, which then take precedence)."""

from __future__ import annotations

import pytest
import torch

from interpret.reference import EncoderClassifier, TransformerConfig
from interpret.reference.vocab import word_tokenizer

WORDS = "the cat sat on mat a dog saw good bad red blue".split()


@pytest.fixture(scope="module")
def tokenizer():
    """A word tokenizer over WORDS, inputs cut at 16 tokens."""
    return word_tokenizer(WORDS, model_max_length=16)


@pytest.fixture(scope="module")
def model(tokenizer) -> EncoderClassifier:
    """A seeded 2-layer, 4-head reference classifier over `tokenizer`'s vocabulary."""
    torch.manual_seed(0)
    config = TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer),
                               max_positions=16, n_classes=2)
    return EncoderClassifier(config).eval()
