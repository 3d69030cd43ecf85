"""Streaming attention entropy equals `attention_entropy` over the full patterns (entropy and attention on special
tokens, per example, layer and head) on tiny GPT-2, Llama (grouped-query, rotary), BERT and Mistral (a sliding
window), padded batches included, a head at a time or all at once; each row's entropy equals the plain float64 statement; a wrong mask
is caught by the lse check on every row; a streamed run of the default set runs it in place of
`attention_entropy`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hf_tiny import TEXTS, tiny_model, word_tokenizer

import interpret
from interpret.request import Limits
from interpret.streaming.capture import REQUIRES, layers_from_trace, real_positions
from interpret.streaming.entropy import row_statistics
from interpret.streaming.pattern import pattern_rows

TOLERANCE = 1e-5


def _trace(family: str, texts=TEXTS):
    model = tiny_model(family)
    tokenizer = word_tokenizer()
    return model, tokenizer, interpret.collect(model, tokenizer, texts, names=["*attn.hook_pattern", *REQUIRES])


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "mistral"])
@pytest.mark.parametrize("block_mib", [1, 64])
def test_streaming_entropy_equals_the_full_analyzer(family: str, block_mib: int) -> None:
    model, tokenizer, trace = _trace(family)
    full = interpret.analyze(trace, "attention_entropy", model=model, tokenizer=tokenizer)
    streamed = interpret.analyze(trace, "attention_entropy", strategy="streamed", params={"block_mib": block_mib})
    for name in ("entropy", "special_attention", "n_real"):
        assert streamed[name].shape == full[name].shape
        assert np.abs(streamed[name] - full[name]).max() <= TOLERANCE, name
    assert float(full["entropy"].min()) > 0 and float(full["special_attention"].max()) > 0  # not a trivial case
    assert streamed.checks["lse_error"].value <= 1e-6
    assert streamed.head_map is not None and streamed.head_map.array == "entropy"


def test_row_entropies_equal_the_plain_statement_and_a_wrong_mask_is_caught() -> None:
    torch.manual_seed(3)
    words = "the cat sat on mat a dog saw red blue".split()
    text = " ".join(words[i] for i in torch.randint(len(words), (58,)).tolist())
    _, _, trace = _trace("llama", texts=[text])
    layer = layers_from_trace(trace, "test")[0][1]
    pattern = trace["blocks.1.attn.hook_pattern"][0].double()  # [head, n, n]
    positions = real_positions(trace)[0]
    keys = torch.zeros(len(positions), dtype=torch.bool)
    keys[[0, 5]] = True
    plain = -torch.special.xlogy(pattern, pattern).sum(-1)  # −Σ p log p, 0·log 0 = 0
    entropy, on_keys, error = row_statistics(layer, keys, chunk_bytes=1)  # one head at a time
    assert float((entropy - plain).abs().max()) <= TOLERANCE
    assert float((on_keys - pattern[..., keys].sum(-1)).abs().max()) <= TOLERANCE
    assert error <= 1e-6
    _, _, wrong = row_statistics(dataclasses.replace(layer, causal=False), keys, chunk_bytes=1 << 20)
    assert wrong > 1e-2


def test_a_sliding_window_narrower_than_the_input_is_restated_in_blocks() -> None:
    """Mistral's window of 4 keys: each row's entropy from blocks of rebuilt rows equals the plain float64
    statement over the captured pattern; restated without the window the kept lse refuses it."""
    _, _, trace = _trace("mistral", texts=["the cat sat on the mat and the dog saw the red ball"])
    assert trace.meta.windows == (4, 4)
    layer = layers_from_trace(trace, "test")[0][1]
    assert layer.windowed
    pattern = trace["blocks.1.attn.hook_pattern"][0].double()
    assert layer.key_span(6, 9) == (3, 9)  # rows 6..8 see keys 3..8 at most: the block is built over those alone
    assert float(pattern[:, 6:9, :3].abs().max()) == 0.0
    assert float((pattern_rows(layer, 6, 9).double() - pattern[:, 6:9, 3:9]).abs().max()) <= 1e-6
    keys = torch.zeros(layer.n, dtype=torch.bool)
    keys[[0, 3]] = True
    for chunk_bytes in (1, 1 << 20):  # a row per block, and every row at once
        entropy, on_keys, error = row_statistics(layer, keys, chunk_bytes=chunk_bytes)
        assert float((entropy - -torch.special.xlogy(pattern, pattern).sum(-1)).abs().max()) <= TOLERANCE
        assert float((on_keys - pattern[..., keys].sum(-1)).abs().max()) <= TOLERANCE
        assert error <= 1e-6
    _, _, wrong = row_statistics(dataclasses.replace(layer, window=0), keys, chunk_bytes=1 << 20)
    assert wrong > 1e-3


def test_a_streamed_default_run_reports_entropy_from_the_streaming_version() -> None:
    from interpret.analysis.defaults import DEFAULT_ANALYZERS

    model, tokenizer = tiny_model("llama"), word_tokenizer()
    report = interpret.explain(model, tokenizer, list(TEXTS[:2]), limits=Limits(streaming="on"), evidence=False)
    ran = {section.result.analyzer: section.result.strategy for section in report.sections if section.kind == "analyzer"}
    assert ran["attention_entropy"] == "streamed"
    assert "attention_entropy" in DEFAULT_ANALYZERS
    full = interpret.explain(model, tokenizer, list(TEXTS[:2]), ["attention_entropy"], evidence=False)
    entropy = {section.result.strategy: section.result["entropy"] for section in (*report.sections, *full.sections)
               if section.kind == "analyzer" and "entropy" in section.result.arrays}
    assert np.abs(entropy["streamed"] - entropy["full"]).max() <= TOLERANCE
