"""The two fused calls of the streamed readouts — each row's A·V and log-sum-exp, and Aᵀ·r in the transposed
direction — against the plain float64 statement (the explicit softmax matrix): through `transposed`'s public
functions (the CPU flash kernel here; the Triton kernels on CUDA) and through the Triton kernels themselves
(`interpret.streaming.triton_attention`: on the CPU in Triton's interpreter, TRITON_INTERPRET=1 from
tests/conftest.py; compiled under INTERPRET_TEST_DEVICE=cuda). Causal and not, value widths 1 (a rollout
row), 64 (d_head: attention × gradient) and 65 (entropy's [K | 1_S]), bfloat16 and float32 queries and keys,
scores large enough that exp(score) overflows float32, grouped-query keys. Skipped where Triton is not
installed (`pip install -e ".[triton]"`)."""

from __future__ import annotations

import importlib

import pytest
import torch
from hf_tiny import TEST_DEVICE

from interpret.streaming.transposed import fused_attention, transposed_product

pytest.importorskip("triton")

TOLERANCE = 1e-5


kernels = importlib.import_module("interpret.streaming.triton_attention")
# Off CUDA, tests/conftest.py sets TRITON_INTERPRET=1 before anything imports Triton.
assert kernels.INTERPRETED == (not TEST_DEVICE.startswith("cuda")), "Triton was imported before tests/conftest.py ran"


def _inputs(dtype: torch.dtype, width: int, seed: int, heads: int = 3, key_heads: int = 3, n: int = 100, d: int = 32):
    """Return q [heads, n, d] (scores up to ~1e3: exp overflows float32 without the lse), k [key_heads, n, d],
    values [heads, n, width] (signed), on the test device."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(heads, n, d, generator=generator) * 40.0
    k = torch.randn(key_heads, n, d, generator=generator)
    values = torch.randn(heads, n, width, generator=generator)
    return q.to(TEST_DEVICE, dtype), k.to(TEST_DEVICE, dtype), values.to(TEST_DEVICE)


def _statement(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (softmax(q·kᵀ·scale + mask) [head, n, n], log Σ_j exp(s_ij) [head, n]) in float64 on the CPU."""
    q, k = q.cpu().double(), k.cpu().double().repeat_interleave(q.shape[0] // k.shape[0], 0)
    scores = q @ k.transpose(1, 2) * scale
    if causal:
        n = q.shape[1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1), torch.logsumexp(scores, dim=-1)


def _tolerance(q: torch.Tensor, k: torch.Tensor, scale: float) -> float:
    """1e-5, or 4 float32 ulps of the largest score where that is larger: the float32 score s carries a rounding
    of a few ulps of |s|, which moves exp(s) by as much relative (both paths start from the same q and k)."""
    k = k.cpu().double().repeat_interleave(q.shape[0] // k.shape[0], 0)
    largest = float((q.cpu().double() @ k.transpose(1, 2)).abs().max()) * scale
    return max(TOLERANCE, 4 * largest * 2.0**-24)


def _assert_close(got: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, tolerance: float) -> None:
    """Every entry within `tolerance` of Σ |terms| (`bound`): relative, also where signed terms cancel."""
    got = got.cpu().double()
    assert got.shape == expected.shape and torch.isfinite(got).all()
    assert float(((got - expected).abs() / bound.clamp(min=1e-30)).max()) <= tolerance


@pytest.mark.parametrize("path", ["public", "triton"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("width", [1, 64, 65])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_transposed_sums_equal_the_plain_statement(path: str, dtype: torch.dtype, width: int, causal: bool) -> None:
    q, k, values = _inputs(dtype, width, seed=width + causal)
    scale = q.shape[-1] ** -0.5
    pattern, lse = _statement(q, k, causal, scale)
    assert float(lse.max()) > 88.8  # exp of the largest score overflows float32
    row_lse = lse.float().to(TEST_DEVICE)
    if path == "public":
        got = transposed_product(q, k, row_lse, values, causal=causal, scale=scale)
        assert got.dtype == torch.float64
    else:
        got = kernels.transposed(q, k, row_lse, values, causal, scale)
        assert got.dtype == torch.float32
    plain = values.cpu().double()
    expected = pattern.transpose(1, 2) @ plain  # (Aᵀ r)_j = Σ_i A_ij r_i
    _assert_close(got, expected, pattern.transpose(1, 2) @ plain.abs(), _tolerance(q, k, scale))


@pytest.mark.parametrize("path", ["public", "triton"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("width", [1, 64, 65])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_rows_equal_the_plain_statement(path: str, dtype: torch.dtype, width: int, causal: bool) -> None:
    q, k, values = _inputs(dtype, width, seed=10 + width + causal)
    scale = q.shape[-1] ** -0.5
    pattern, lse = _statement(q, k, causal, scale)
    call = fused_attention if path == "public" else kernels.attention_rows
    out, got_lse = call(q, k, values, causal, scale)
    assert out.dtype == got_lse.dtype == torch.float32
    tolerance = _tolerance(q, k, scale)
    plain = values.cpu().double()
    _assert_close(out, pattern @ plain, pattern @ plain.abs(), tolerance)
    _assert_close(got_lse, lse, lse.abs().clamp(min=1.0), tolerance)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_the_kernels_share_key_and_value_heads_in_groups(causal: bool) -> None:
    """Grouped-query keys (4 query heads on 2 key heads) and one value head for all: as the repeated heads give."""
    q, k, values = _inputs(torch.bfloat16, 1, seed=3, heads=4, key_heads=2, n=70)
    values = values[:1]  # [1, n, 1]: the same row for every head
    scale = 0.1
    pattern, lse = _statement(q, k, causal, scale)
    plain = values.cpu().double().expand(4, -1, -1)
    tolerance = _tolerance(q, k, scale)
    got = kernels.transposed(q, k, lse.float().to(TEST_DEVICE), values, causal, scale)
    _assert_close(got, pattern.transpose(1, 2) @ plain, pattern.transpose(1, 2) @ plain.abs(), tolerance)
    out, got_lse = kernels.attention_rows(q, k, values, causal, scale)
    _assert_close(out, pattern @ plain, pattern @ plain.abs(), tolerance)
    _assert_close(got_lse, lse, lse.abs().clamp(min=1.0), tolerance)


def test_what_the_kernels_take() -> None:
    q, k, values = _inputs(torch.bfloat16, 8, seed=4, n=16)
    assert kernels.qualifies(q, k, values) and kernels.qualifies(q, k, values[:1])
    assert not kernels.qualifies(q, k.float(), values)  # q and k of one dtype
    assert not kernels.qualifies(q, k[:2], values)  # 3 query heads on 2 key heads: not whole groups
    assert not kernels.qualifies(q, k, values.double())
    assert not kernels.qualifies(q, k[:, :8], values)  # n keys for n queries
    wide = torch.zeros(1, 16, kernels.MAX_WIDTH + 1, device=q.device, dtype=q.dtype)
    assert not kernels.qualifies(wide, wide, values[:1])


@pytest.mark.skipif(not TEST_DEVICE.startswith("cuda"), reason="the dispatch to Triton happens on CUDA only")
def test_cuda_inputs_go_to_the_triton_kernels() -> None:
    """On CUDA the public functions give the Triton kernels' numbers, bit for bit (same launch)."""
    q, k, values = _inputs(torch.bfloat16, 65, seed=5)
    scale = q.shape[-1] ** -0.5
    out, lse = fused_attention(q, k, values, True, scale)
    expected_out, expected_lse = kernels.attention_rows(q, k, values, True, scale)
    assert torch.equal(out, expected_out) and torch.equal(lse, expected_lse)
    product = transposed_product(q, k, lse, values, causal=True, scale=scale)
    assert torch.equal(product, kernels.transposed(q, k, lse, values, True, scale).double())
