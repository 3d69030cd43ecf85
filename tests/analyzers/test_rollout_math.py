"""Known-answer tests of plugins/rollout_math.py against independent NumPy statements of the papers."""

from __future__ import annotations

import numpy as np
import pytest

from interpret.errors import ConfigError
from interpret.plugins import rollout_math


def _softmax_pattern(shape: tuple[int, ...], seed: int, *, causal: bool = False) -> np.ndarray:
    """Return random row-stochastic attention of `shape` [..., query, key], causal when asked."""
    scores = np.random.default_rng(seed).normal(scale=2.0, size=shape)
    if causal:
        n = shape[-1]
        scores = np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, scores)
    pattern = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return pattern / pattern.sum(axis=-1, keepdims=True)


def _paper_rollout(pattern: np.ndarray, residual: float, start: int = 0) -> np.ndarray:
    """The paper on its own: per layer Â = (w·I + (1 − w)·mean_h A) / row sums, then Ã_l = Â_l · Ã_{l−1}."""
    n_layer, _, n, _ = pattern.shape
    joint = np.eye(n)
    for layer in range(start, n_layer):
        attention = sum(pattern[layer, head] for head in range(pattern.shape[1])) / pattern.shape[1]
        augmented = residual * np.eye(n) + (1 - residual) * attention
        for row in range(n):
            augmented[row] = augmented[row] / augmented[row].sum()
        joint = augmented @ joint
    return joint


def _rollout(pattern: np.ndarray, *, start_layer: int = 0, readout=None, streaming: bool | None = None, **augment) -> np.ndarray:
    """What the rollout analyzer forms: Â of the layers from `start_layer` on (`augmented_attention`), chained,
    all rows or the readout's (streamed unless told otherwise)."""
    augmented = rollout_math.augmented_attention(pattern[..., start_layer:, :, :, :], **augment)
    rows = None if readout is None else rollout_math.readout_positions(readout, pattern.shape[-1])
    return rollout_math.chain(augmented, rows, readout is not None if streaming is None else streaming)


def test_identity_attention_rolls_out_to_identity() -> None:
    pattern = np.broadcast_to(np.eye(5), (3, 2, 5, 5)).copy()
    for fusion in rollout_math.HEAD_FUSIONS:
        np.testing.assert_array_equal(_rollout(pattern, head_fusion=fusion), np.eye(5))


def test_single_layer_is_the_residual_augmented_row_normalised_matrix() -> None:
    pattern = _softmax_pattern((1, 3, 4, 4), seed=1)
    weight = 0.3
    mean = pattern[0].mean(axis=0)
    expected = weight * np.eye(4) + (1 - weight) * mean
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(_rollout(pattern, residual_weight=weight), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("residual", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("start", [0, 2])
def test_equals_the_paper_statement(seed: int, residual: float, start: int) -> None:
    pattern = _softmax_pattern((4, 3, 7, 7), seed=seed)
    got = _rollout(pattern, residual_weight=residual, start_layer=start)
    np.testing.assert_allclose(got, _paper_rollout(pattern, residual, start), rtol=0, atol=1e-13)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("discard", [0.0, 0.3, 0.9])
def test_rows_sum_to_one(fusion: str, discard: float) -> None:
    pattern = _softmax_pattern((2, 4, 3, 9, 9), seed=3)
    got = _rollout(pattern, head_fusion=fusion, discard_ratio=discard)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    assert got.min() >= 0.0


def test_max_and_min_fusion_are_the_elementwise_extremes() -> None:
    pattern = _softmax_pattern((3, 4, 5, 5), seed=4)
    for fusion, reduce in (("max", np.max), ("min", np.min)):
        fused = reduce(pattern, axis=1)
        augmented = 0.5 * np.eye(5) + 0.5 * fused
        augmented /= augmented.sum(axis=-1, keepdims=True)
        expected = augmented[2] @ augmented[1] @ augmented[0]
        np.testing.assert_allclose(_rollout(pattern, head_fusion=fusion), expected, atol=1e-14)
    with pytest.raises(ConfigError, match="median"):
        rollout_math.fuse_heads(pattern, "median")


def test_discard_drops_the_intended_entries() -> None:
    fused = np.random.default_rng(5).permutation(36).reshape(1, 6, 6).astype(float) + 1.0  # distinct, no zeros
    dropped = rollout_math.discard_lowest(fused, 0.25, keep=[2])
    n_drop = int(36 * 0.25)
    assert np.count_nonzero(dropped == 0) == n_drop
    np.testing.assert_array_equal(dropped == 0, fused <= np.sort(fused, axis=None)[n_drop - 1])
    # A protected diagonal entry among the smallest survives, and one entry fewer is dropped.
    fused[0, 2, 2] = 0.5
    dropped = rollout_math.discard_lowest(fused, 0.25, keep=[2])
    assert dropped[0, 2, 2] == 0.5
    assert np.count_nonzero(dropped == 0) == n_drop - 1


def test_discard_keeps_rows_normalised_and_the_readout_row() -> None:
    pattern = _softmax_pattern((3, 2, 8, 8), seed=6)
    augmented = rollout_math.augmented_attention(pattern, discard_ratio=0.95, keep=[0])
    np.testing.assert_allclose(augmented.sum(axis=-1), 1.0, atol=1e-12)
    # 95% of 64 entries go; rows emptied by the discard still carry their residual (the identity).
    assert np.all(np.diagonal(augmented, axis1=-2, axis2=-1) > 0)


def test_streaming_equals_the_full_rollout() -> None:
    pattern = _softmax_pattern((2, 5, 3, 11, 11), seed=7)
    full = _rollout(pattern, residual_weight=0.4, discard_ratio=0.2, readout=[0, -1, 4], streaming=False, keep=[0, -1, 4])
    streamed = _rollout(pattern, residual_weight=0.4, discard_ratio=0.2, readout=[0, -1, 4], keep=[0, -1, 4])
    assert streamed.shape == (2, 3, 11)
    np.testing.assert_allclose(streamed, full, rtol=0, atol=1e-12)
    everything = _rollout(pattern, residual_weight=0.4)
    np.testing.assert_allclose(_rollout(pattern, residual_weight=0.4, readout=3)[:, 0], everything[:, 3])
    # All rows with the readout's entries protected: row 4 is the streamed readout row 4.
    kept = _rollout(pattern, residual_weight=0.4, discard_ratio=0.2, keep=[0, -1, 4])
    np.testing.assert_allclose(kept[:, [0, 10, 4]], streamed, rtol=0, atol=1e-12)


def test_causal_attention_rolls_out_lower_triangular() -> None:
    pattern = _softmax_pattern((4, 2, 6, 6), seed=8, causal=True)
    got = _rollout(pattern)
    np.testing.assert_array_equal(np.triu(got, 1), 0.0)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-12)


def test_batch_axis_matches_each_example() -> None:
    pattern = _softmax_pattern((3, 2, 2, 5, 5), seed=9)
    batched = _rollout(pattern)
    assert batched.shape == (3, 5, 5)
    for b in range(3):
        np.testing.assert_allclose(batched[b], _rollout(pattern[b]), atol=1e-15)


def test_per_layer_is_cumulative() -> None:
    pattern = _softmax_pattern((4, 2, 5, 5), seed=10)
    cumulative = rollout_math.cumulative(rollout_math.augmented_attention(pattern[1:]), 1)[:, [0, 2]]
    assert cumulative.shape == (4, 2, 5)
    np.testing.assert_array_equal(cumulative[0], np.eye(5)[[0, 2]])
    for layer in range(1, 4):
        cut = _rollout(pattern[: layer + 1], start_layer=1, streaming=False)
        np.testing.assert_allclose(cumulative[layer], cut[[0, 2]], atol=1e-14)


def test_padded_queries_stay_zero() -> None:
    pattern = _softmax_pattern((2, 2, 5, 5), seed=11)
    pattern[..., 3:, :] = 0.0  # positions 3 and 4 are padding: no attention from them, none to them
    pattern[..., :, 3:] = 0.0
    pattern /= np.where(pattern.sum(-1, keepdims=True) > 0, pattern.sum(-1, keepdims=True), 1.0)
    got = _rollout(pattern)
    assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(got[3:], 0.0)
    np.testing.assert_array_equal(got[:, 3:], 0.0)
    np.testing.assert_allclose(got[:3].sum(axis=-1), 1.0, atol=1e-12)


def test_bad_parameters_name_the_value() -> None:
    pattern = _softmax_pattern((2, 1, 3, 3), seed=12)
    with pytest.raises(ConfigError, match="readout position 3"):
        _rollout(pattern, readout=3)
    with pytest.raises(ConfigError, match="residual weight 1.5"):
        _rollout(pattern, residual_weight=1.5)
    with pytest.raises(ConfigError, match="discard ratio 1.0"):
        _rollout(pattern, discard_ratio=1.0)


def test_encoder_decoder_by_hand() -> None:
    """Chefer et al. 2021 rules on matrices small enough to multiply by hand (exact fractions below).

    Encoder A = [[1/2, 1/2], [0, 1]], two layers: R_ee = (I + A)² = [[9/4, 7/4], [0, 4]];
    R_ee − I has rows summing to 3, so R̄_ee = (R_ee − I)/3 + I = [[17/12, 7/12], [0, 2]].
    Decoder self-attention D = [[1, 0], [1/2, 1/2]]: R_dd = I + D = [[2, 0], [1/2, 3/2]] = R̄_dd (rows of D sum
    to 1); R_de stays 0 after the self-attention rule. Cross attention C = [[1, 0], [1/4, 3/4]]:
    R_de = R̄_ddᵀ · C · R̄_ee = [[2, 1/2], [0, 3/2]] · [[17/12, 7/12], [17/48, 79/48]]
         = [[289, 191], [51, 237]] / 96.
    """
    # Two heads per matrix, whose mean is the matrix above (the encoder's repeated over its two layers).
    encoder = np.array([[[[0.6, 0.4], [0.0, 1.0]], [[0.4, 0.6], [0.0, 1.0]]]] * 2)
    decoder = np.array([[[[1.0, 0.0], [0.7, 0.3]], [[1.0, 0.0], [0.3, 0.7]]]])
    cross = np.array([[[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.5, 0.5]]]])
    r_ee, r_dd, r_de = rollout_math.rollout_encoder_decoder(encoder, decoder, cross)
    np.testing.assert_allclose(r_ee, [[9 / 4, 7 / 4], [0, 4]], atol=1e-15)
    np.testing.assert_allclose(r_dd, [[2, 0], [1 / 2, 3 / 2]], atol=1e-15)
    np.testing.assert_allclose(r_de, np.array([[289, 191], [51, 237]]) / 96, atol=1e-14)


def test_encoder_decoder_batches_and_shapes() -> None:
    encoder = _softmax_pattern((2, 3, 2, 5, 5), seed=13)
    decoder = _softmax_pattern((2, 2, 2, 4, 4), seed=14, causal=True)
    cross = _softmax_pattern((2, 2, 2, 4, 5), seed=15)
    r_ee, r_dd, r_de = rollout_math.rollout_encoder_decoder(encoder, decoder, cross)
    assert (r_ee.shape, r_dd.shape, r_de.shape) == ((2, 5, 5), (2, 4, 4), (2, 4, 5))
    single = rollout_math.rollout_encoder_decoder(encoder[1], decoder[1], cross[1])
    for batched, alone in zip((r_ee, r_dd, r_de), single):
        np.testing.assert_allclose(batched[1], alone, atol=1e-13)
    np.testing.assert_array_equal(np.triu(r_dd[0], 1), 0.0)  # a causal decoder stays causal


def test_weighted_start_equals_weights_times_the_full_rollout() -> None:
    pattern = _softmax_pattern((2, 4, 3, 8, 8), seed=16)
    augmented = rollout_math.augmented_attention(pattern, residual_weight=0.4)
    full = rollout_math.chain(augmented)  # [batch, query, key]
    mean_pool = np.full(8, 1 / 8)
    got = rollout_math.chain(augmented, weights=mean_pool)
    assert got.shape == (2, 1, 8)
    np.testing.assert_allclose(got[:, 0], mean_pool @ full, rtol=0, atol=1e-14)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=0, atol=1e-14)  # Σ w = 1 keeps the row stochastic
    # Per example and per row: [batch, row, query] weights, e.g. the real tokens of each example.
    weights = np.random.default_rng(17).random((2, 3, 8))
    np.testing.assert_allclose(rollout_math.chain(augmented, weights=weights), weights @ full, rtol=0, atol=1e-13)
    # A one-hot start is the streamed row of that query.
    np.testing.assert_allclose(
        rollout_math.chain(augmented, weights=np.eye(8)[5]), rollout_math.chain(augmented, [5], streaming=True),
        rtol=0, atol=1e-15,
    )
    with pytest.raises(ConfigError, match="rows or weights"):
        rollout_math.chain(augmented, [0], weights=mean_pool)
    with pytest.raises(ConfigError, match="NaN"):
        rollout_math.chain(augmented, weights=np.full(8, np.nan))


def test_a_row_left_without_attention_is_an_error_not_nan() -> None:
    pattern = _softmax_pattern((3, 2, 8, 8), seed=18)
    # Residual 0 and a heavy discard: some query keeps no attention at all; 0/0 used to give NaN silently.
    with pytest.raises(ConfigError, match=r"residual weight 0\.0 with discard ratio 0\.9 leaves query \d+ of layer \d+"):
        _rollout(pattern, residual_weight=0.0, discard_ratio=0.9)
    # The same discard with a residual keeps every row: the emptied ones become identity rows.
    kept = _rollout(pattern, residual_weight=0.5, discard_ratio=0.9)
    assert np.all(np.isfinite(kept))
    np.testing.assert_allclose(kept.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    with pytest.raises(ConfigError, match="NaN or infinite"):
        _rollout(np.where(pattern > 0.5, np.nan, pattern))


def test_min_fusion_of_heads_with_disjoint_support() -> None:
    # Head 0 attends only to key 0, head 1 only to the query itself: the min over heads is zero everywhere
    # except on (0, 0), yet every query is present (its heads attend), unlike a padded query.
    n = 4
    heads = np.zeros((1, 2, n, n))
    heads[0, 0, :, 0] = 1.0
    heads[0, 1] = np.eye(n)
    augmented = rollout_math.augmented_attention(heads, head_fusion="min", residual_weight=0.5)
    np.testing.assert_allclose(augmented[0], np.eye(n), rtol=0, atol=0)  # residual only, not a zero row
    with pytest.raises(ConfigError, match="head fusion 'min' leaves query 1 of layer 0"):
        rollout_math.augmented_attention(heads, head_fusion="min", residual_weight=0.0)


def test_the_error_names_the_layer_and_what_else_to_change() -> None:
    heads = np.zeros((3, 2, 4, 4))
    heads[:, 0] = np.eye(4)
    heads[:, 1] = np.eye(4)
    heads[2, 0] = np.eye(4)[[1, 0, 3, 2]]  # layer 2: the heads disagree everywhere, so min-fusion is zero
    layers = list(heads.astype(np.float32))
    for augment in (rollout_math.augmented_layers, lambda x, **kw: rollout_math.augmented_attention(np.stack(x), **kw)):
        with pytest.raises(ConfigError, match=r"query 0 of layer 2 .* or head fusion 'mean'\.$"):
            augment(layers, head_fusion="min", residual_weight=0.0)
