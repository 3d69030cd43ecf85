"""Word-level scores beside the token scores: on a WordPiece tokenizer (MiniLM) and a byte-level BPE tokenizer
(GPT-2's class, trained in memory), every subword's score goes to the word the tokenizer's own `word_ids()`
puts it in — summed by default, the largest with words=max."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from gradient_cases import minilm
from hf_tiny import tiny_config
from shipped_tokenizers import byte_level

import interpret

TEXTS = ["An unbelievably honest film, naïve and moving.", "The service was slow 😀"]


def _gpt2_case():
    tokenizer = byte_level()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(tiny_config("gpt2", vocab_size=len(tokenizer))).eval().double()
    return model, tokenizer, None


def _minilm_case():
    case = minilm()
    return case.model, case.tokenizer, case.head


@pytest.mark.parametrize("make", [_minilm_case, _gpt2_case], ids=["wordpiece", "byte_bpe"])
@pytest.mark.parametrize("how", ["sum", "max"])
def test_every_subword_goes_to_its_word(make, how: str) -> None:
    model, tokenizer, head = make()
    trace = interpret.collect(model, tokenizer, TEXTS)
    result = interpret.analyze(trace, "input_x_gradient", model=model, tokenizer=tokenizer, head=head,
                               params={"words": how})
    longest = 0
    for b, text in enumerate(TEXTS):
        word_ids = tokenizer(text).word_ids()  # the tokenizer's own grouping, [CLS]/[SEP] as None
        assert trace.encoded.input_ids[b, : len(word_ids)].tolist() == tokenizer(text)["input_ids"]
        groups: dict[int, list[float]] = {}
        for position, word in enumerate(word_ids):
            if word is not None:
                groups.setdefault(word, []).append(result["readout"][b, position])
        expected = [sum(v) if how == "sum" else max(v) for _, v in sorted(groups.items())]
        count = len(expected)
        longest = max(longest, *(len(v) for v in groups.values()))
        np.testing.assert_allclose(result["word_readout"][b, :count], expected, atol=1e-12, rtol=0)
        assert not result["word_readout"][b, count:].any()
        starts = [min(p for p, w in enumerate(word_ids) if w == word) for word in sorted(groups)]
        assert result["word_start"][b, :count].tolist() == starts
    assert longest > 1  # some word is made of several subwords
