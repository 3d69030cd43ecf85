"""Masks (padding, causal, window bands) and position embeddings, with their one-line input errors."""

from __future__ import annotations

import math

import pytest
import torch

from interpret.errors import InputError
from interpret.reference import (
    Encoder,
    PositionalEmbedding,
    TransformerConfig,
    attention_allowed,
    causal_allowed,
    padding_allowed,
    sinusoidal_table,
    window_allowed,
)


def _message(excinfo: pytest.ExceptionInfo[InputError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_causal_mask_is_lower_triangle() -> None:
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_allowed(3, 3), expected)


def test_window_bands() -> None:
    band = window_allowed(5, 5, 1)
    expected = torch.tensor(
        [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 1, 1]],
        dtype=torch.bool,
    )
    assert torch.equal(band, expected)
    causal_band = window_allowed(5, 5, 2, causal=True)
    for i in range(5):
        for j in range(5):
            assert bool(causal_band[i, j]) == (i - 2 <= j <= i)
    assert torch.equal(window_allowed(4, 4, 0), torch.eye(4, dtype=torch.bool))


def test_combined_mask_shape_and_logic() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    allowed = attention_allowed(mask, batch=2, n_query=4, n_key=4, causal=True, window=1)
    assert allowed.shape == (2, 1, 4, 4) and allowed.dtype == torch.bool
    expected = causal_allowed(4, 4) & window_allowed(4, 4, 1) & (mask != 0)[:, None, None, :]
    assert torch.equal(allowed, expected)
    assert attention_allowed(None, batch=2, n_query=3, n_key=5).shape == (1, 1, 3, 5)


def test_padding_mask_accepts_bool_and_int() -> None:
    ints = torch.tensor([[1, 0]])
    assert torch.equal(padding_allowed(ints, 1, 2), padding_allowed(ints.bool(), 1, 2))


@pytest.mark.parametrize("shape", [(2, 5), (3, 4), (2, 4, 1)])
def test_wrong_mask_shape_is_one_line_error(shape: tuple[int, ...]) -> None:
    with pytest.raises(InputError) as excinfo:
        attention_allowed(torch.ones(shape, dtype=torch.long), batch=2, n_query=4, n_key=4)
    message = _message(excinfo)
    assert str(shape) in message and "(2, 4)" in message


def test_wrong_mask_shape_through_a_model() -> None:
    model = Encoder(TransformerConfig(d_model=16, n_heads=2, vocab_size=10))
    with pytest.raises(InputError) as excinfo:
        model(torch.ones(2, 6, dtype=torch.long), attention_mask=torch.ones(2, 5, dtype=torch.long))
    assert "(2, 5)" in _message(excinfo) and "(2, 6)" in str(excinfo.value)


def test_causal_needs_square() -> None:
    with pytest.raises(InputError) as excinfo:
        attention_allowed(None, batch=1, n_query=3, n_key=4, causal=True)
    assert "3 queries and 4 keys" in _message(excinfo)


def test_sinusoidal_table_values() -> None:
    table = sinusoidal_table(50, 8)
    assert table.shape == (50, 8)
    torch.testing.assert_close(table[0], torch.tensor([0.0, 1.0] * 4))
    position, pair = 7, 2  # columns 4 and 5 share the angle p / 10000^(4/8)
    angle = position / 10000 ** (2 * pair / 8)
    torch.testing.assert_close(table[position, 4], torch.tensor(math.sin(angle)))
    torch.testing.assert_close(table[position, 5], torch.tensor(math.cos(angle)))
    assert sinusoidal_table(4, 5).shape == (4, 5)  # odd width works


def test_too_long_sequence_names_length_and_limit() -> None:
    positions = PositionalEmbedding(TransformerConfig(d_model=8, n_heads=2, max_positions=6))
    assert positions(6).shape == (6, 8)
    with pytest.raises(InputError) as excinfo:
        positions(7)
    message = _message(excinfo)
    assert "7 positions" in message and "max_positions=6" in message


@pytest.mark.parametrize("kind", ["sinusoidal", "learned", "none"])
def test_model_refuses_too_long_input(kind: str) -> None:
    model = Encoder(TransformerConfig(d_model=8, n_heads=2, vocab_size=10, max_positions=5, positions=kind))
    model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(InputError) as excinfo:
        model(torch.zeros(1, 9, dtype=torch.long))
    assert "9 positions" in _message(excinfo) and "max_positions=5" in str(excinfo.value)


def test_learned_positions_are_trained_and_used() -> None:
    config = TransformerConfig(d_model=8, n_heads=2, vocab_size=10, positions="learned", max_positions=6)
    model = Encoder(config)
    ids = torch.tensor([[3, 3, 3, 3]])
    out = model(ids)
    assert not torch.allclose(out[0, 0], out[0, 1])  # same token, different positions
    (out * torch.randn_like(out)).sum().backward()  # a plain sum of LayerNorm outputs is constant
    grad = model.pos_embed.table.grad
    assert grad is not None and grad[:4].abs().sum() > 0 and (grad[4:] == 0).all()
    assert "pos_embed.table" in model.state_dict()
    sinusoidal = Encoder(TransformerConfig(d_model=8, n_heads=2, vocab_size=10))
    assert not any(
        name.startswith("pos_embed") for name in sinusoidal.state_dict()
    )  # a function, not weights
