"""attention_entropy's chunked float64 statistics against a plain float64 statement of the formulas.

Reference: H = −Σ_k p·log p over real keys with 0·log 0 = 0 (`torch.special.entr` on float64), averaged over
real query rows; the attention on special keys Σ_{k special} p, averaged the same way.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from interpret.plugins import attention_entropy as module
from interpret.plugins.attention_entropy import attention_entropy, head_statistics

DEVICE = os.environ.get("INTERPRET_TEST_DEVICE", "cpu")  # cuda: the statistics' accelerator steps


def _patterns(batch: int, layers: int, heads: int, n: int, real: torch.Tensor) -> list[torch.Tensor]:
    """Return float32 softmax patterns [batch, head, query, key] per layer, padding keys exactly zero."""
    out = []
    for _ in range(layers):
        scores = torch.randn(batch, heads, n, n) * 3
        scores = scores.masked_fill(~real[:, None, None, :], torch.finfo(torch.float32).min)
        out.append(torch.softmax(scores, -1).to(DEVICE))
    return out


def _reference(layers: list[torch.Tensor], real: torch.Tensor, special: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    batch, heads = layers[0].shape[:2]
    entropy = np.zeros((batch, len(layers), heads))
    on_special = np.zeros((batch, len(layers), heads))
    for b in range(batch):
        keep = real[b]
        for index, layer in enumerate(layers):
            p = layer[b].double()[:, keep][:, :, keep]  # [head, n_real, n_real]
            entropy[b, index] = torch.special.entr(p).sum(-1).mean(-1).cpu().numpy()
            on_special[b, index] = p[..., special[b][keep]].sum(-1).mean(-1).cpu().numpy()
    return entropy, on_special


@pytest.mark.parametrize("chunk", [1, 4096, 1 << 18])  # one example per step, a few, all at once
def test_head_statistics_match_the_float64_reference(monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", chunk)
    monkeypatch.setattr(module, "DEVICE_CHUNK_ELEMENTS", chunk)  # its steps under INTERPRET_TEST_DEVICE=cuda
    batch, n = 5, 9
    real = torch.ones(batch, n, dtype=torch.bool)
    real[1, 6:] = False  # padded examples beside full ones: the einsum and the plain-sum paths both run
    real[3, 4:] = False
    special = torch.zeros(batch, n, dtype=torch.bool)
    special[:, 0] = True
    special[0, n - 1] = True
    special[1, 5] = True
    layers = _patterns(batch, 3, 4, n, real)
    layers[0][2, 1, 3] = 0.0  # exact zeros in a real row: 0·log 0 = 0
    layers[0][2, 1, 3, 2] = 1.0
    entropy, on_special, row_error = head_statistics(layers, real.to(DEVICE), special.to(DEVICE))
    expected_entropy, expected_special = _reference(layers, real, special)
    np.testing.assert_allclose(entropy.cpu().numpy(), expected_entropy, rtol=1e-10, atol=0)
    np.testing.assert_allclose(on_special.cpu().numpy(), expected_special, rtol=1e-10, atol=0)
    assert entropy.dtype == torch.float64 and entropy.shape == (batch, 3, 4)
    assert 0.0 < row_error < 1e-6  # float32 rows sum to one up to rounding
    assert entropy[2, 0, 1] == pytest.approx(expected_entropy[2, 0, 1], rel=1e-12)


def test_uniform_and_one_hot_rows_have_known_entropies() -> None:
    real = torch.tensor([[True, True, True, True, False]])
    layer = torch.zeros(1, 2, 5, 5)
    layer[0, 0, :, :4] = 0.25  # uniform over the 4 real keys: log 4
    layer[0, 1, :, 2] = 1.0  # all on one key: 0
    entropy, on_special, _ = head_statistics([layer], real, torch.tensor([[False, False, True, False, False]]))
    np.testing.assert_allclose(entropy[0, 0].cpu().numpy(), [math.log(4), 0.0], rtol=1e-15)
    np.testing.assert_allclose(on_special[0, 0].cpu().numpy(), [0.25, 1.0], rtol=1e-15)


def test_a_nan_in_a_real_row_reaches_the_results_and_the_row_sum_check(monkeypatch) -> None:
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", 1)  # the NaN sits in the first of several steps
    monkeypatch.setattr(module, "DEVICE_CHUNK_ELEMENTS", 1)
    real = torch.ones(3, 4, dtype=torch.bool)
    layers = _patterns(3, 2, 2, 4, real)
    layers[1][0, 1, 2, 3] = float("nan")
    entropy, _, row_error = head_statistics(layers, real.to(DEVICE))
    assert math.isnan(row_error)
    assert torch.isnan(entropy[0, 1, 1]) and not torch.isnan(entropy[1:]).any()


def test_attention_entropy_takes_a_stacked_pattern_of_any_float_dtype() -> None:
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    layers = _patterns(2, 2, 3, 6, real)
    stacked = torch.stack(layers, 1)
    expected, _ = _reference(layers, real, torch.zeros_like(real))
    for pattern in (stacked, stacked.double()):
        np.testing.assert_allclose(attention_entropy(pattern, real.to(DEVICE)).cpu().numpy(), expected, rtol=1e-10, atol=0)
