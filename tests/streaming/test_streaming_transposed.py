"""The fused path of streaming rollout: Σ_h A_hᵀ·r from two attention calls (each row's log-sum-exp, then the
transposed direction) equals the plain float64 statement over the full softmax, also with scores large enough
that exp(score) overflows float32, and so do attention × gradient's column sums (signed values, d_head wide); and streaming rollout through it equals the `rollout` analyzer (rows of the
full patterns) on tiny GPT-2, Llama (grouped-query, rotary) and BERT, padded batches included, as it equals the
blockwise path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_tiny import TEXTS, tiny_model, word_tokenizer

import interpret
from interpret.analysis.run import run_context
from interpret.plugins._attention import readout_weights
from interpret.streaming.capture import REQUIRES, layers_from_trace, real_positions
from interpret.streaming.readout import rollout_readout
from interpret.streaming.transposed import gradient_column_sums, row_normalisers, transposed_sums

TOLERANCE = 1e-5
ONE_ROW = 1  # block_bytes so small that every block is one row: every layer whose row has 2+ weights is fused


def _full_pattern(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """Return softmax(q·kᵀ·scale + mask) [head, n, n] in float64 (the plain statement)."""
    scores = q.double() @ k.double().transpose(1, 2) * scale
    if causal:
        n = q.shape[1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("magnitude", [1.0, 40.0])  # 40: scores up to ~1e3, exp overflows float32
def test_transposed_sums_equal_the_plain_statement(causal: bool, magnitude: float) -> None:
    generator = torch.Generator().manual_seed(0)
    heads, n, d_head = 4, 203, 16
    q, k, v = (torch.randn(heads, n, d_head, generator=generator) for _ in range(3))
    q = q * magnitude
    scale = d_head**-0.5
    pattern = _full_pattern(q, k, causal, scale)
    # Both sides start from float32 q and k; the kernel's float32 score s carries a rounding of a few ulps of
    # |s|, which moves every exp(s) by that much relative: 1e-5, or 4 ulps of the largest score when larger.
    largest = float((q.double() @ k.double().transpose(1, 2)).abs().max()) * scale
    tolerance = max(TOLERANCE, 4 * largest * 2.0**-24)
    out, lse = row_normalisers(q, k, v, causal=causal, scale=scale)
    assert float(lse.max()) > (50.0 if magnitude > 1 else 0.0)
    assert torch.allclose(out.double(), pattern @ v.double(), atol=tolerance * float(v.abs().max()), rtol=0)
    vector = torch.rand(n, generator=generator, dtype=torch.float64)
    vector /= vector.sum()
    expected = torch.einsum("hij,i->j", pattern, vector)
    got = transposed_sums(q, k, lse, vector, causal=causal, scale=scale)
    assert got.dtype == torch.float64
    assert torch.isfinite(got).all()
    assert float((got - expected).abs().max()) <= tolerance * float(expected.abs().max())


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("magnitude", [1.0, 40.0])
def test_gradient_column_sums_equal_the_plain_statement(causal: bool, magnitude: float) -> None:
    """Σ_h Σ_i w_i·A_ij·∂score/∂A_ij with ∂score/∂A_ij = g_i·v_j, against the full float64 pattern; signed
    gradients and weights, so the sums cancel as real ones do."""
    generator = torch.Generator().manual_seed(2)
    heads, n, d_head = 3, 150, 16
    q, k, v, g = (torch.randn(heads, n, d_head, generator=generator) for _ in range(4))
    q = q * magnitude
    scale = d_head**-0.5
    pattern = _full_pattern(q, k, causal, scale)  # [head, n, n]
    weights = torch.randn(n, generator=generator, dtype=torch.float64)
    pattern_grad = g.double() @ v.double().transpose(1, 2)  # ∂score/∂A [head, n, n]
    expected = torch.einsum("i,hij->j", weights, pattern * pattern_grad)
    z = (pattern @ v.double()).float()
    largest = float((q.double() @ k.double().transpose(1, 2)).abs().max()) * scale
    tolerance = max(TOLERANCE, 4 * largest * 2.0**-24)
    got, error = gradient_column_sums(q, k, v, z, g, weights, causal=causal, scale=scale, chunk_bytes=1)  # a head at a time
    assert got.dtype == torch.float64 and torch.isfinite(got).all()
    # Each term is bounded by Σ_i |w_i|·A_ij·|g_i·v_j|: the error is relative to that, not to a cancelled sum.
    bound = torch.einsum("i,hij->j", weights.abs(), (pattern * pattern_grad).abs())
    assert float(((got - expected).abs() / bound.clamp(min=1e-12)).max()) <= tolerance
    assert float((got - expected).abs().max()) <= tolerance * float(expected.abs().max())
    assert error <= tolerance
    wrong, wrong_error = gradient_column_sums(q, k, v, z, g, weights, causal=not causal, scale=scale, chunk_bytes=1 << 20)
    assert wrong_error > 1e-2  # the output check sees a mask that is not the model's


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_fused_rollout_equals_the_rollout_analyzer_and_the_blocks(family: str) -> None:
    model = tiny_model(family)
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern", *REQUIRES])
    full = interpret.analyze(trace, "rollout", params={"rows": "all", "residual": 0.4}, model=model, tokenizer=tokenizer)
    ctx = run_context(trace, model, tokenizer)
    layers = layers_from_trace(trace, "test")
    for b, positions in enumerate(real_positions(trace)):
        for readout in ("auto", (0, -1), tuple(range(len(positions)))):  # the decision's rows; two rows; every row
            weights = readout_weights(readout, ctx.targets[b], positions)
            expected = full["readout"][b][positions] if readout == "auto" else weights @ _rollout(trace, b, positions)
            fused, error = rollout_readout(layers[b], weights, residual=0.4, block_bytes=ONE_ROW)
            blocks, _ = rollout_readout(layers[b], weights, residual=0.4, block_bytes=ONE_ROW, method="blocks")
            assert np.abs(fused - expected).max() <= TOLERANCE
            assert np.abs(fused - blocks).max() <= TOLERANCE
            assert error <= 1e-6  # restated rows' log-sum-exps against the captured ones, first and last block


def _rollout(trace, b: int, positions: np.ndarray) -> np.ndarray:
    """Return rollout [n, n] (residual 0.4, mean fusion) of example b from its captured patterns, float64."""
    index = torch.as_tensor(positions)
    product = np.eye(len(positions))
    for layer in trace.layers("attn.hook_pattern"):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"][b].cpu()[:, index][:, :, index].double().mean(0).cpu().numpy()
        augmented = 0.4 * np.eye(len(positions)) + 0.6 * pattern
        augmented /= augmented.sum(-1, keepdims=True)
        product = augmented @ product
    return product


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_the_analyzer_with_every_method_equals_the_rollout_analyzer_on_a_longer_input(family: str) -> None:
    torch.manual_seed(1)
    words = "the cat sat on mat a dog saw red blue".split()
    texts = [" ".join(words[i] for i in torch.randint(len(words), (size,)).tolist()) for size in (60, 41)]
    model = tiny_model(family)
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, texts, names=["*attn.hook_pattern", *REQUIRES])
    for readout in ("auto", (0, 30, -1)):
        full = interpret.analyze(trace, "rollout", params={"readout": readout}, model=model, tokenizer=tokenizer)
        for method in ("auto", "fused", "blocks"):
            streamed = interpret.analyze(
                trace, "rollout", strategy="streamed", params={"method": method, "readout": readout}, model=model, tokenizer=tokenizer,
            )
            assert np.abs(streamed["readout"] - full["readout"]).max() <= TOLERANCE, (readout, method)
            assert streamed.checks["lse_error"].value <= 1e-6


def test_an_unknown_method_is_refused() -> None:
    from interpret.plugins.rollout import RolloutParams

    with pytest.raises(ValueError, match="head_fusion"):
        RolloutParams(method="fused", head_fusion="max")
    with pytest.raises(ValueError, match="method"):
        rollout_readout([], np.ones(1), method="fast")


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_kernel_records_keep_the_model_output_and_give_the_full_rollout(family: str) -> None:
    from interpret.capture.kernel import kernel_records
    from interpret.streaming.kernel import KernelLayers

    model = tiny_model(family)
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, [TEXTS[0]], names=["*attn.hook_pattern"])
    full = interpret.analyze(trace, "rollout", params={"rows": "readout", "residual": 0.4}, model=model, tokenizer=tokenizer)
    ids = trace.encoded.input_ids
    original = torch.nn.functional.scaled_dot_product_attention
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with kernel_records() as records:
            recorded = model(input_ids=ids).logits
    assert torch.nn.functional.scaled_dot_product_attention is original
    assert records.fallback is None and len(records.calls) == trace.meta.n_layers
    assert torch.equal(plain, recorded)  # the model's output is the one SDPA gives, bit for bit
    positions = real_positions(trace)[0]
    weights = readout_weights("auto", run_context(trace, model, tokenizer).targets[0], positions)
    layers = KernelLayers(records, 0, ids.device)
    for method, block_bytes in (("auto", ONE_ROW), ("fused", 1 << 26), ("blocks", ONE_ROW)):
        row, error = rollout_readout(layers, weights, residual=0.4, block_bytes=block_bytes, method=method)
        assert np.abs(row - full["readout"][0][positions]).max() <= TOLERANCE, method
        assert error <= 1e-6  # rows restated from q and k against the lse the kernel returned


def test_kernel_records_fall_back_on_a_mask_and_restore_sdpa_when_the_forward_raises() -> None:
    from interpret.capture.kernel import kernel_records
    from interpret.streaming.kernel import KernelLayers

    model = tiny_model("llama")
    tokenizer = word_tokenizer()
    encoded = tokenizer(list(TEXTS[:2]), padding=True, return_tensors="pt").to(model.device)
    original = torch.nn.functional.scaled_dot_product_attention
    with torch.no_grad(), kernel_records() as records:
        model(**encoded)
    assert records.fallback is not None and "mask" in records.fallback
    with pytest.raises(ValueError, match="unusable"):
        KernelLayers(records, 0, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="on purpose"), kernel_records():
        raise RuntimeError("the forward fails on purpose")
    assert torch.nn.functional.scaled_dot_product_attention is original
