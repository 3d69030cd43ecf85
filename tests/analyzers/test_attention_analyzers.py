"""Rollout and flow as analyzers: padding, readouts, modes, encoder-decoder, and agreement with the maths."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fake_traces import random_pattern_trace
from flow_reference import reference_flow

import interpret
from interpret.errors import AnalyzerError
from interpret.plugins import rollout_math
from interpret.reference import EncoderClassifier, EncoderDecoder, TransformerConfig
from interpret.reference.vocab import word_tokenizer

WORDS = "the cat sat on mat a dog saw ! marker".split()


@pytest.fixture(scope="module")
def padded_trace():
    torch.manual_seed(0)
    tokenizer = word_tokenizer(WORDS)
    config = TransformerConfig(d_model=32, n_heads=4, n_layers=3, d_mlp=64, vocab_size=len(tokenizer), max_positions=32)
    model = EncoderClassifier(config).eval()
    texts = ["the cat sat on the mat", "a dog saw !"]
    return interpret.collect(model, tokenizer, texts), [interpret.collect(model, tokenizer, t) for t in texts]


def test_padded_batch_equals_each_example_alone(padded_trace) -> None:
    batch, singles = padded_trace
    for name, key in (("rollout", "rollout"), ("flow", "flow")):
        together = interpret.analyze(batch, name, params={"rows": "all"})[key]
        for b, single in enumerate(singles):
            alone = interpret.analyze(single, name, params={"rows": "all"})[key][0]
            n = alone.shape[0]
            np.testing.assert_allclose(together[b, :n, :n], alone, atol=1e-12)
            assert (together[b, n:] == 0).all() and (together[b, :, n:] == 0).all()


def test_rollout_readout_rows_and_streaming_agree() -> None:
    trace = random_pattern_trace(batch=2, layers=3, heads=2, pos=7)
    full = interpret.analyze(trace, "rollout")
    streamed = interpret.analyze(trace, "rollout", params={"rows": "readout", "readout": "0,3"})
    # Two readout positions weigh one half each: the readout is the mean of their rollout rows.
    np.testing.assert_allclose(streamed["readout"], full["rollout"][:, [0, 3]].mean(1), atol=1e-12)
    np.testing.assert_allclose(full["readout"], full["rollout"][:, 0], atol=0)
    assert "rollout" not in streamed.arrays and streamed.readout is streamed["readout"]


def test_rollout_matches_the_maths_with_every_option() -> None:
    trace = random_pattern_trace(batch=1, layers=3, heads=2, pos=6)
    params = {"residual": 0.3, "head_fusion": "max", "discard_ratio": 0.2, "readout": "2"}
    result = interpret.analyze(trace, "rollout", params=params)
    pattern = trace.stack("attn.hook_pattern").double().cpu().numpy()[0]
    augmented = rollout_math.augmented_attention(
        pattern, head_fusion="max", residual_weight=0.3, discard_ratio=0.2, keep=[2]
    )
    expected = augmented[2] @ augmented[1] @ augmented[0]
    np.testing.assert_allclose(result["rollout"][0], expected, atol=1e-12)
    np.testing.assert_allclose(result["rollout"][0].sum(-1), 1.0, atol=1e-12)


def test_decoder_readout_defaults_to_the_last_token() -> None:
    trace = random_pattern_trace(batch=1, layers=2, heads=2, pos=5, causal=True)
    result = interpret.analyze(trace, "rollout")
    np.testing.assert_allclose(result["readout"][0], result["rollout"][0, -1])
    assert np.allclose(np.triu(result["rollout"][0], 1), 0)


def test_flow_equals_the_networkx_statement() -> None:
    trace = random_pattern_trace(batch=1, layers=3, heads=2, pos=6, seed=3)
    pattern = trace.stack("attn.hook_pattern").double().cpu().numpy()[0]
    augmented = rollout_math.add_residual(rollout_math.fuse_heads(pattern, "mean"), 0.5)
    raw = reference_flow(augmented)  # max-flow per pair, as networkx states it
    result = interpret.analyze(trace, "flow", params={"rows": "all", "normalize": "none"})
    np.testing.assert_allclose(result["flow"][0], raw, atol=1e-9)
    paper = interpret.analyze(trace, "flow", params={"rows": "all"})  # the paper's: each row over its sum
    np.testing.assert_allclose(paper["flow"][0], raw / raw.sum(-1, keepdims=True), atol=1e-12)
    np.testing.assert_allclose(paper.readout[0], paper["flow"][0, 0], atol=0)
    scipy = interpret.analyze(trace, "flow", params={"rows": "all", "solver": "scipy", "normalize": "none"})
    np.testing.assert_allclose(scipy["flow"], result["flow"], atol=1e-6)


def test_bad_readout_is_one_line() -> None:
    trace = random_pattern_trace(batch=1, layers=2, heads=2, pos=5)
    with pytest.raises(AnalyzerError, match="readout position 9 is not a real token"):
        interpret.analyze(trace, "rollout", params={"readout": "9"})
    with pytest.raises(AnalyzerError, match="start_layer=5 was not captured"):
        interpret.analyze(trace, "rollout", params={"start_layer": 5})


def test_encoder_decoder_rollout_and_flow() -> None:
    torch.manual_seed(0)
    tokenizer = word_tokenizer(WORDS)
    config = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, n_decoder_layers=2, d_mlp=64, vocab_size=len(tokenizer), max_positions=32
    )
    model = EncoderDecoder(config).eval()
    trace = interpret.collect(model, tokenizer, ["the cat sat", "a dog saw the mat"], decoder_inputs=["a", "the cat"])
    dec_lengths = trace.encoded.decoder.lengths
    for model_given in (None, model):  # with the model, the decision reads the last decoder token too
        rollout = interpret.analyze(trace, "rollout", model=model_given, tokenizer=tokenizer)
        for b, n_dec in enumerate(dec_lengths):
            np.testing.assert_allclose(rollout["readout"][b], rollout["cross"][b, n_dec - 1])
        assert rollout.ok
    flow = interpret.analyze(trace, "flow")
    assert flow["readout"].shape == (2, trace.encoded.pos) and flow.ok


def test_discard_works_on_any_memory_layout() -> None:
    pattern = random_pattern_trace(batch=1, layers=2, heads=2, pos=6).stack("attn.hook_pattern").double().cpu().numpy()[0]
    fortran = np.asfortranarray(pattern)
    c_order = rollout_math.augmented_attention(pattern, discard_ratio=0.3, keep=[0])
    f_order = rollout_math.augmented_attention(fortran, discard_ratio=0.3, keep=[0])
    np.testing.assert_array_equal(c_order, f_order)
    assert (c_order == 0).sum() > (rollout_math.augmented_attention(pattern, keep=[0]) == 0).sum()


def test_per_layer_ends_in_the_rollout_and_starts_with_the_identity() -> None:
    trace = random_pattern_trace(batch=2, layers=3, heads=2, pos=5)
    result = interpret.analyze(trace, "rollout", params={"per_layer": True, "start_layer": 1})
    per_layer = result["per_layer"]  # [batch, layer, query, key]
    assert per_layer.shape == (2, 3, 5, 5)
    np.testing.assert_array_equal(per_layer[:, -1], result["rollout"])
    np.testing.assert_array_equal(per_layer[:, 0], np.broadcast_to(np.eye(5), (2, 5, 5)))
    pattern = trace.stack("attn.hook_pattern").double().cpu().numpy()
    np.testing.assert_allclose(per_layer, rollout_math.cumulative(rollout_math.augmented_attention(pattern[:, 1:]), 1), atol=1e-14)


@pytest.mark.parametrize("rows", ["readout", "all"])
def test_flow_over_examples_on_several_threads_is_bit_identical(padded_trace, monkeypatch, rows) -> None:
    """Examples solved on two threads (each on one) give every digit the one-thread run gives."""
    from interpret.runtime import threads

    batch, _ = padded_trace
    trace = random_pattern_trace(batch=5, layers=3, heads=2, pos=7)
    for source in (batch, trace):
        params = {"rows": rows, "readout": "0"}
        serial = interpret.analyze(source, "flow", params=params)
        calls: list[int] = []
        threads_for = threads.threads_for

        def two(work: int, requested: int | None = None) -> int:
            count = 2 if requested is None else min(2, requested)
            calls.append(count)
            return count

        monkeypatch.setattr(threads, "threads_for", two)
        spread = interpret.analyze(source, "flow", params=params)
        monkeypatch.setattr(threads, "threads_for", threads_for)
        assert calls and calls[0] == 2  # the examples were split over two threads
        for key in serial.arrays:
            assert serial[key].tobytes() == spread[key].tobytes(), key
        assert serial.checks == spread.checks
