"""Our attention against PyTorch's, and the invariants of its pattern (rows sum to 1, exact zeros)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from interpret.hooks import count_hooks, hook_session, stamp_names
from interpret.reference import (
    MultiHeadAttention,
    TransformerConfig,
    attention_allowed,
    from_torch,
    masked_softmax,
    scaled_dot_product_attention,
    to_torch,
)

ATOL = 1e-5
D_MODEL, HEADS = 16, 4


def run_capturing(
    module: nn.Module, names: list[str], call: Callable[[], Any]
) -> tuple[Any, dict[str, Tensor]]:
    """Return (call(), {name: tensor seen by that hook point}), with every hook removed afterwards."""
    points = stamp_names(module)
    store: dict[str, Tensor] = {}
    with hook_session() as session:
        for name in names:
            session.add(points[name], lambda mod, args, out, name=name: store.__setitem__(name, out))
        result = call()
    assert count_hooks(module) == 0
    return result, store


def padding(lengths: list[int], pos: int) -> Tensor:
    return (torch.arange(pos)[None, :] < torch.tensor(lengths)[:, None]).long()


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("masks", ["none", "padding", "causal", "both"])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch(packed: bool, masks: str, bias: bool) -> None:
    batch, pos = 3, 6
    if packed:
        theirs = nn.MultiheadAttention(D_MODEL, HEADS, bias=bias, batch_first=True).eval()
        ours = from_torch(theirs)
    else:
        ours = MultiHeadAttention(
            TransformerConfig(d_model=D_MODEL, n_heads=HEADS, packed_qkv=False, bias=bias)
        )
        theirs = to_torch(ours).eval()
    assert isinstance(ours, MultiHeadAttention) and ours.config.packed_qkv == packed
    x = torch.randn(batch, pos, D_MODEL)
    mask = padding([6, 4, 2], pos) if masks in ("padding", "both") else None
    causal = masks in ("causal", "both")
    expected, expected_weights = theirs(
        x,
        x,
        x,
        key_padding_mask=None if mask is None else mask == 0,
        attn_mask=torch.ones(pos, pos, dtype=torch.bool).triu(1) if causal else None,
        need_weights=True,
        average_attn_weights=False,
    )
    allowed = attention_allowed(mask, batch=batch, n_query=pos, n_key=pos, causal=causal)
    out, seen = run_capturing(ours, ["hook_pattern"], lambda: ours(x, allowed=allowed))
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(seen["hook_pattern"], expected_weights, atol=ATOL, rtol=0)


def test_cross_attention_matches_torch() -> None:
    theirs = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    ours = from_torch(theirs)
    query, memory = torch.randn(2, 3, D_MODEL), torch.randn(2, 5, D_MODEL)
    mask = padding([5, 2], 5)
    expected, weights = theirs(query, memory, memory, key_padding_mask=mask == 0, average_attn_weights=False)
    allowed = attention_allowed(mask, batch=2, n_query=3, n_key=5)
    out, seen = run_capturing(
        ours, ["hook_pattern", "hook_k", "hook_q"], lambda: ours(query, memory, allowed=allowed)
    )
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(seen["hook_pattern"], weights, atol=ATOL, rtol=0)
    assert seen["hook_q"].shape == (2, 3, HEADS, D_MODEL // HEADS)
    assert seen["hook_k"].shape == (2, 5, HEADS, D_MODEL // HEADS)


@pytest.mark.parametrize("causal", [False, True])
def test_functional_attention_matches_torch_sdpa(causal: bool) -> None:
    q, k, v = (torch.randn(2, 5, 3, 8) for _ in range(3))  # [batch, pos, head, d_head]
    mask = padding([5, 3], 5)
    allowed = attention_allowed(mask, batch=2, n_query=5, n_key=5, causal=causal)
    z, pattern = scaled_dot_product_attention(q, k, v, allowed)
    expected = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=allowed
    ).transpose(1, 2)
    torch.testing.assert_close(z, expected, atol=ATOL, rtol=0)
    assert pattern.shape == (2, 3, 5, 5)


def _pattern_of(config: TransformerConfig, x: Tensor, allowed: Tensor) -> tuple[Tensor, Tensor]:
    torch.manual_seed(1)
    attention = MultiHeadAttention(config)
    _, seen = run_capturing(
        attention, ["hook_pattern", "hook_attn_scores"], lambda: attention(x, allowed=allowed)
    )
    return seen["hook_pattern"], seen["hook_attn_scores"]


@pytest.mark.parametrize("scoring", ["scaled_dot", "dot", "additive"])
@pytest.mark.parametrize("causal", [False, True])
def test_pattern_invariants(scoring: str, causal: bool) -> None:
    lengths, pos = [7, 5, 3], 7
    mask = padding(lengths, pos)
    allowed = attention_allowed(mask, batch=3, n_query=pos, n_key=pos, causal=causal)
    config = TransformerConfig(d_model=D_MODEL, n_heads=HEADS, scoring=scoring)
    pattern, scores = _pattern_of(config, torch.randn(3, pos, D_MODEL), allowed)
    assert torch.isfinite(pattern).all()
    for row, length in enumerate(lengths):
        real = pattern[row, :, :length]  # real queries
        torch.testing.assert_close(real.sum(-1), torch.ones_like(real.sum(-1)), atol=1e-6, rtol=0)
        assert (pattern[row, :, :, length:] == 0).all()  # padded keys exactly 0
        assert torch.isneginf(scores[row, :, :, length:]).all()
    if causal:
        upper = torch.triu(torch.ones(pos, pos, dtype=torch.bool), diagonal=1)
        assert (pattern[..., upper] == 0).all()
        assert torch.isneginf(scores[..., upper]).all()


def test_dot_scores_are_scaled_dot_times_sqrt_d_head() -> None:
    x = torch.randn(2, 5, D_MODEL)
    allowed = attention_allowed(None, batch=2, n_query=5, n_key=5)
    _, scaled = _pattern_of(TransformerConfig(d_model=D_MODEL, n_heads=HEADS), x, allowed)
    _, plain = _pattern_of(TransformerConfig(d_model=D_MODEL, n_heads=HEADS, scoring="dot"), x, allowed)
    torch.testing.assert_close(plain, scaled * math.sqrt(D_MODEL // HEADS), atol=ATOL, rtol=1e-5)


def test_additive_scores_match_the_formula() -> None:
    attention = MultiHeadAttention(TransformerConfig(d_model=D_MODEL, n_heads=HEADS, scoring="additive"))
    x = torch.randn(1, 4, D_MODEL)
    _, seen = run_capturing(attention, ["hook_q", "hook_k", "hook_attn_scores"], lambda: attention(x))
    q, k, scores = seen["hook_q"], seen["hook_k"], seen["hook_attn_scores"]
    head, i, j = 2, 1, 3
    hidden = torch.tanh(
        q[0, i, head] @ attention.score_query[head] + k[0, j, head] @ attention.score_key[head]
    )
    expected = hidden @ attention.score_vector[head]
    torch.testing.assert_close(scores[0, head, i, j], expected, atol=ATOL, rtol=0)


def test_row_without_allowed_key_is_zero_not_nan() -> None:
    scores = torch.randn(1, 2, 3, 4, requires_grad=True)
    allowed = torch.ones(1, 1, 3, 4, dtype=torch.bool)
    allowed[..., 1, :] = False  # query 1 may see nothing
    pattern = masked_softmax(scores, allowed)
    assert (pattern[:, :, 1] == 0).all()
    torch.testing.assert_close(pattern[:, :, [0, 2]].sum(-1), torch.ones(1, 2, 2))
    (pattern * torch.randn_like(pattern)).sum().backward()
    assert scores.grad is not None and torch.isfinite(scores.grad).all()


def test_window_with_padding_leaves_no_nan() -> None:
    config = TransformerConfig(d_model=D_MODEL, n_heads=HEADS)
    # Left padding with a causal window of 1: the first real-less rows have no key at all.
    mask = torch.tensor([[0, 0, 0, 1, 1]])
    allowed = attention_allowed(mask, batch=1, n_query=5, n_key=5, causal=True, window=1)
    pattern, _ = _pattern_of(config, torch.randn(1, 5, D_MODEL), allowed)
    assert torch.isfinite(pattern).all()
    assert (pattern[0, :, :3] == 0).all()


def test_zero_gate_on_head_equals_zeroing_its_output_columns() -> None:
    attention = MultiHeadAttention(TransformerConfig(d_model=D_MODEL, n_heads=HEADS)).eval()
    x = torch.randn(2, 5, D_MODEL)
    d_head, head = D_MODEL // HEADS, 1
    plain = attention(x)
    gate = torch.ones(HEADS)
    with hook_session() as session:
        session.add(attention.hook_z, lambda mod, args, out: out * gate[:, None])
        ones = attention(x)
        gate[head] = 0.0
        gated = attention(x)
    assert count_hooks(attention) == 0
    torch.testing.assert_close(ones, plain, atol=0, rtol=0)  # an all-ones gate changes nothing
    with torch.no_grad():
        attention.out_proj.weight[:, head * d_head : (head + 1) * d_head] = 0.0
    torch.testing.assert_close(gated, attention(x), atol=ATOL, rtol=0)
    assert not torch.allclose(gated, plain)


def test_hook_replacing_the_pattern_changes_the_output() -> None:
    attention = MultiHeadAttention(TransformerConfig(d_model=D_MODEL, n_heads=HEADS)).eval()
    x = torch.randn(1, 4, D_MODEL)
    seen: dict[str, Tensor] = {}
    with hook_session() as session:
        session.add(attention.hook_pattern, lambda mod, args, out: torch.full_like(out, 0.25))
        session.add(attention.hook_v, lambda mod, args, out: seen.setdefault("v", out))
        out = attention(x)
    mean_v = seen["v"].mean(dim=1, keepdim=True).expand(-1, 4, -1, -1)  # a uniform pattern averages values
    torch.testing.assert_close(out, attention.out_proj(mean_v.flatten(-2)), atol=ATOL, rtol=0)
    assert not torch.allclose(out, attention(x))
