"""`blocks.{i}.attn.hook_lse`, each query row's log Σ_key exp(score): the fused SDPA kernel's own when it served
the call (no mask tensor), restated from the kernel's inputs otherwise (padding, the eager kernel), equal in both
cases to a float64 log-sum-exp of the captured scores; capturing it leaves the model's output bit-identical;
streaming rollout reads it, and refuses a model whose attention it does not restate (OPT's queries scaled before
the kernel), saying what to do instead."""

from __future__ import annotations

import numpy as np
import pytest
import importlib

import torch
from hf_tiny import TEXTS, tiny_model, word_tokenizer

import interpret
from interpret.errors import HookNameError, ResultError
from interpret.plugins._streaming import STREAMED_REMEDY
from interpret.request import Limits
from interpret.streaming.capture import REQUIRES, real_positions

TOLERANCE = 1e-5


def _expected_lse(trace, name: str, b: int, positions: np.ndarray) -> torch.Tensor:
    """Return log Σ_key exp(score) [head, n] in float64 over example b's real rows and keys, from its scores."""
    index = torch.as_tensor(positions)
    scores = trace[name.replace("hook_lse", "hook_attn_scores")][b].cpu().double()[:, index][:, :, index]
    return torch.logsumexp(scores, dim=-1)


CASES = ["one text (the kernel's)", "padded batch (restated)", "eager kernel (restated)"]


# Mistral's sliding window is a mask the kernel is given: its lse is always restated.
@pytest.mark.parametrize(("family", "case"), [(family, case) for family in ("gpt2", "llama", "bert") for case in CASES]
                         + [("mistral", case) for case in CASES[1:]])
def test_the_captured_lse_equals_the_log_sum_exp_of_the_scores(family: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model(family, "eager" if case.startswith("eager") else "sdpa")
    texts = [TEXTS[0]] if case.startswith("one") else list(TEXTS)
    if case.startswith("one"):  # the fused kernel serves every call: nothing is restated
        def restated(*args, **kwargs):
            raise AssertionError("the lse was restated although the fused kernel returned it")
        monkeypatch.setattr(importlib.import_module("interpret.capture.hf.attention"), "restated_lse", restated)
    trace = interpret.collect(model, word_tokenizer(), texts, names=["*attn.hook_attn_scores", *REQUIRES])
    names = [name for name in trace.names() if name.endswith("hook_lse")]
    assert len(names) == trace.meta.n_layers
    for name in names:
        lse = trace[name]
        assert lse.dtype == torch.float32 and lse.shape == (trace.encoded.batch, trace.meta.n_heads, trace.encoded.pos)
        for b, positions in enumerate(real_positions(trace)):
            expected = _expected_lse(trace, name, b, positions)
            got = lse[b].cpu().double()[:, torch.as_tensor(positions)]
            assert float((got - expected).abs().max()) <= TOLERANCE * max(1.0, float(expected.abs().max())), name


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_capturing_the_lse_keeps_the_model_output_bit_identical(family: str) -> None:
    model = tiny_model(family)
    tokenizer = word_tokenizer()
    original = torch.nn.functional.scaled_dot_product_attention
    trace = interpret.collect(model, tokenizer, [TEXTS[0]], names=list(REQUIRES))
    with torch.no_grad():
        plain = model(input_ids=trace.encoded.input_ids).logits
    assert torch.equal(trace.output.logits, plain)
    assert torch.nn.functional.scaled_dot_product_attention is original


def test_attention_it_does_not_restate_is_refused_by_streaming_rollout_saying_what_to_do() -> None:
    model = tiny_model("opt")  # queries scaled before a kernel called with scale 1: the scale is not the kernel's
    tokenizer = word_tokenizer()
    text = "the cat sat on the mat and the dog saw the red ball"
    with pytest.raises(ResultError, match="lse_error") as refused:
        interpret.explain(model, tokenizer, text, ["rollout"], limits=Limits(streaming="on"), evidence=False)
    assert str(refused.value).endswith(STREAMED_REMEDY)  # what to do, not a defect to report
    assert "Report this" not in str(refused.value)


def test_the_reference_model_offers_the_lse_only_when_asked() -> None:
    from interpret.reference import EncoderClassifier, TransformerConfig
    from interpret.reference import word_tokenizer as reference_tokenizer

    tokenizer = reference_tokenizer("the cat sat on mat a dog".split())
    torch.manual_seed(0)
    config = TransformerConfig(d_model=16, n_heads=2, n_layers=2, d_mlp=32, vocab_size=len(tokenizer), max_positions=16)
    model = EncoderClassifier(config).eval()
    trace = interpret.collect(model, tokenizer, ["the cat sat", "a dog sat on the mat"],
                              names=["*attn.hook_attn_scores", "*attn.hook_lse"])
    for layer in range(2):
        for b, positions in enumerate(real_positions(trace)):
            name = f"blocks.{layer}.attn.hook_lse"
            got = trace[name][b].double()[:, torch.as_tensor(positions)]
            assert torch.allclose(got, _expected_lse(trace, name, b, positions), atol=1e-6, rtol=0)
    assert not any(module.hook_lse._forward_hooks for module in model.modules() if hasattr(module, "hook_lse"))


def test_deberta_names_why_it_has_no_lse() -> None:
    model = tiny_model("deberta-v2", "eager")
    with pytest.raises(HookNameError, match="softmax inside the module"):
        interpret.collect(model, word_tokenizer(), [TEXTS[0]], names=["*attn.hook_lse"])


def test_an_offloaded_trace_is_on_the_host_and_streams_to_the_same_readout() -> None:
    model = tiny_model("llama")
    tokenizer = word_tokenizer()
    kept = interpret.collect(model, tokenizer, list(TEXTS), names=list(REQUIRES))
    offloaded = interpret.collect(model, tokenizer, list(TEXTS), names=list(REQUIRES), offload=True)
    assert kept.names() == offloaded.names()
    for name in kept.names():
        tensor = offloaded[name]
        assert tensor.device.type == "cpu"
        if kept[name].device.type == "cuda":  # INTERPRET_TEST_DEVICE=cuda: pinned host copies
            assert tensor.is_pinned()
        assert torch.equal(tensor, kept[name].cpu()), name
    on_device = interpret.analyze(kept, "rollout", strategy="streamed", model=model, tokenizer=tokenizer)
    from_host = interpret.analyze(offloaded, "rollout", strategy="streamed", model=model, tokenizer=tokenizer)
    assert np.array_equal(on_device["readout"], from_host["readout"])


def test_a_capture_with_gradients_refuses_offload_in_one_line() -> None:
    from interpret.capture.api import capturable_for
    from interpret.capture.engine import capture, select_sites
    from interpret.errors import CaptureError
    from interpret.capture.api import prepare

    model = tiny_model("llama")
    tokenizer = word_tokenizer()
    capturable = capturable_for(model, tokenizer)
    encoded = prepare(capturable, tokenizer, [TEXTS[0]]).to(model.device)
    sites = select_sites(capturable, ["*attn.hook_q"], None)
    with pytest.raises(CaptureError, match="drop offload=") as caught:
        capture(capturable, encoded, sites, grad=True, offload=True)
    assert "\n" not in str(caught.value)


def _kernel_inputs(heads: int = 4, kv_heads: int = 2, n: int = 9, d: int = 8, batch: int = 2):
    torch.manual_seed(5)
    query = torch.randn(batch, heads, n, d) * 2.0
    key = torch.randn(batch, kv_heads, n, d) * 2.0
    return query, key


@pytest.mark.parametrize("case", ["4d padding mask", "2d mask, causal, window", "position bias", "sinks", "scaling"])
def test_the_fused_lse_equals_the_log_sum_exp_of_the_restated_scores(case: str) -> None:
    """On the CPU the lse of a call the fused kernel did not serve comes from the flash kernel given the same
    additive mask (`attention._fused_lse`): equal to log Σ exp of `attention_scores` (the restated scores the
    patterns are made from) on every row, fully masked padding rows included."""
    attention = importlib.import_module("interpret.capture.hf.attention")
    recompute = importlib.import_module("interpret.capture.hf.recompute")
    query, key = _kernel_inputs()
    module = torch.nn.Module()
    padding = torch.ones(2, 9, dtype=torch.bool)
    padding[1, :3] = False  # left padding: rows 0..2 of example 1 see no key under the 4D mask
    kwargs: dict = {}
    mask: torch.Tensor | None = None
    if case == "4d padding mask":
        causal = torch.ones(9, 9, dtype=torch.bool).tril()
        mask = causal[None, None] & padding[:, None, None, :] & padding[:, None, :, None]
    elif case == "2d mask, causal, window":
        mask, kwargs = padding.long(), {"is_causal": True, "sliding_window": 3}
    elif case == "position bias":
        kwargs = {"position_bias": torch.randn(1, 4, 9, 9)}
    elif case == "sinks":
        kwargs = {"s_aux": torch.tensor([-1.0, 0.0, 1.0, 2.0]), "is_causal": True}
    else:
        kwargs = {"scaling": 0.05, "is_causal": True}
    got = attention.restated_lse(module, query, key, mask, kwargs)
    expected = recompute.with_sink(torch.logsumexp(recompute.attention_scores(module, query, key, mask, kwargs), -1),
                                   recompute.sink_logits(kwargs))
    assert got.shape == expected.shape == (2, 4, 9)
    scale = expected.abs().clamp(min=1.0)
    assert float(((got - expected).abs() / scale).max()) <= 1e-6, case
