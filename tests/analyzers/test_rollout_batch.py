"""The batched rollout (`rollout_batch`: a padded batch at once, in torch) against the per-example statement
(`rollout_math` on each example's real block), and the analyzer's two paths against each other."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from fake_traces import random_pattern_trace

import interpret
from interpret.errors import AnalyzerError
from interpret.inputs import from_ids
from interpret.plugins import rollout as rollout_module
from interpret.plugins import rollout_batch, rollout_math
from interpret.plugins.rollout import Rollout
from interpret.trace import Trace

DEVICE = os.environ.get("INTERPRET_TEST_DEVICE", "cpu")


def padded_batch(seed: int, batch: int = 4, layers: int = 3, heads: int = 3, pos: int = 9, left: bool = False):
    """Return per-layer patterns [batch, head, pos, pos] softmaxed over each example's real keys (padded rows
    NaN, as a model that masks a whole row may leave them) and the real mask [batch, pos]."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([pos, 1, *torch.randint(2, pos, (batch - 2,), generator=gen).tolist()])
    index = torch.arange(pos)
    real = (index >= pos - lengths[:, None]) if left else (index < lengths[:, None])
    out = []
    for _ in range(layers):
        scores = torch.randn(batch, heads, pos, pos, generator=gen, dtype=torch.float64)
        scores = scores.masked_fill(~real[:, None, None, :], float("-inf")).masked_fill(~real[:, None, :, None], float("nan"))
        out.append(scores.softmax(-1).float().to(DEVICE))
    return out, real.to(DEVICE)


def per_example(layers, real, fusion: str, residual: float, weights: np.ndarray):
    """Return (readout [batch, pos], rollout [batch, pos, pos], cumulative [batch, layer, pos, pos]) by
    `rollout_math` on each example's real block, placed back on the padded axes (padding 0)."""
    batch, pos = real.shape
    readout, full, steps = np.zeros((batch, pos)), np.zeros((batch, pos, pos)), np.zeros((batch, len(layers), pos, pos))
    for b in range(batch):
        keep = np.flatnonzero(real[b].cpu().numpy())
        block = np.ix_(keep, keep)
        heads = np.stack([layer[b].cpu().numpy()[:, block[0], block[1]] for layer in layers])
        augmented = rollout_math.augmented_attention(heads, head_fusion=fusion, residual_weight=residual)
        cumulative = rollout_math.cumulative(augmented)
        full[b][block] = cumulative[-1]
        readout[b, keep] = rollout_math.chain(augmented, weights=weights[b, keep])[0]
        for layer, step in enumerate(cumulative):
            steps[b, layer][block] = step
    return readout, full, steps


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("residual", [0.5, 0.2])
@pytest.mark.parametrize("left", [False, True])
def test_the_batch_equals_each_example_alone(fusion: str, residual: float, left: bool) -> None:
    layers, real = padded_batch(seed=["mean", "max", "min"].index(fusion) * 4 + 2 * (residual == 0.5) + left, left=left)
    weights = np.random.default_rng(0).random(real.shape) * real.cpu().numpy()
    weights /= weights.sum(-1, keepdims=True)
    readout, full, steps = per_example(layers, real, fusion, residual, weights)
    start = torch.from_numpy(weights).to(DEVICE)
    got = rollout_batch.readout(layers, real, start, fusion, residual)
    np.testing.assert_allclose(got.cpu().numpy(), readout, rtol=0, atol=1e-12)
    products = rollout_batch.products(layers, real, fusion, residual, cumulative=True)
    np.testing.assert_allclose(torch.stack(products, 1).cpu().numpy(), steps, rtol=0, atol=1e-12)
    (last,) = rollout_batch.products(layers, real, fusion, residual)
    np.testing.assert_array_equal(last.cpu().numpy(), products[-1].cpu().numpy())
    np.testing.assert_allclose(last.cpu().numpy(), full, rtol=0, atol=1e-12)
    padded = ~real.cpu().numpy()
    assert not got.cpu().numpy()[padded].any() and not last.cpu().numpy()[padded].any()  # padding stays zero


def emptied(layers: list[torch.Tensor]) -> list[torch.Tensor]:
    """Return `layers` where example 2's query 1 of layer 1 attends somewhere in every head but on no key in
    all heads (head 0 on key 0, head 1 on key 1, head 2 on key 0 and 1): min fusion empties the row."""
    out = [layer.clone() for layer in layers]
    out[1][2, :, 1, :] = 0.0
    out[1][2, 0, 1, 0] = out[1][2, 1, 1, 1] = 1.0
    out[1][2, 2, 1, 0] = out[1][2, 2, 1, 1] = 0.5
    return out


def test_a_row_the_statement_refuses_is_left_to_it() -> None:
    layers, real = padded_batch(seed=5)
    assert bool(real[2, :2].all())
    start = real.to(torch.float64) / real.sum(-1, keepdim=True)
    assert rollout_batch.readout(emptied(layers), real, start, "min", 0.0) is None  # present, and sums to zero
    assert rollout_batch.readout(emptied(layers), real, start, "min", 0.5) is not None  # the residual keeps it
    assert rollout_batch.readout(emptied(layers), real, start, "mean", 0.0) is not None  # mean: it still attends
    broken = [layer.clone() for layer in layers]
    broken[0][0, 0, 0, 0] = float("nan")
    assert rollout_batch.products(broken, real, "mean", 0.5) is None


def with_padding(trace: Trace, lengths: list[int]) -> Trace:
    """Return `trace` with example b's positions from lengths[b] on padded (patterns renormalised over the rest)."""
    mask = torch.arange(trace.encoded.pos)[None] < torch.tensor(lengths)[:, None]
    tensors = {}
    for name, pattern in trace.tensors.items():
        kept = pattern * mask[:, None, None, :]
        tensors[name] = (kept / kept.sum(-1, keepdim=True)).to(DEVICE)
    return Trace(tensors=tensors, encoded=from_ids(trace.encoded.input_ids, mask.long()), meta=trace.meta)


@pytest.mark.parametrize(
    "params",
    [{}, {"rows": "readout"}, {"per_layer": True, "start_layer": 1}, {"head_fusion": "max", "residual": 0.3},
     {"readout": "0,-1", "rows": "readout", "head_fusion": "min"}],
)
def test_the_analyzer_batched_equals_its_per_example_path(params: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = with_padding(random_pattern_trace(batch=4, layers=3, heads=2, pos=8, seed=11), [8, 5, 1, 7])
    batched = interpret.analyze(trace, "rollout", params=params)
    monkeypatch.setattr(Rollout, "_batched", lambda *args: None)  # the per-example statement, as for discard > 0
    alone = interpret.analyze(trace, "rollout", params=params)
    assert batched.arrays.keys() == alone.arrays.keys()
    for name in alone.arrays:
        np.testing.assert_allclose(batched[name], alone[name], rtol=0, atol=1e-12, err_msg=name)
    assert batched.ok and alone.ok


def test_the_analyzer_names_a_refused_row_as_its_per_example_path_does(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = with_padding(random_pattern_trace(batch=4, layers=3, heads=3, pos=8, seed=2), [8, 5, 6, 7])
    name = "blocks.1.attn.hook_pattern"
    trace.tensors[name][2] = emptied([trace.tensors[name]] * 2)[1][2]
    params = {"head_fusion": "min", "residual": 0.0}
    with pytest.raises(AnalyzerError) as batched:
        interpret.analyze(trace, "rollout", params=params)
    monkeypatch.setattr(Rollout, "_batched", lambda *args: None)
    with pytest.raises(AnalyzerError) as alone:
        interpret.analyze(trace, "rollout", params=params)
    assert str(batched.value) == str(alone.value) and "query 1 of layer 1" in str(batched.value)


def test_a_cpu_batch_past_the_bound_is_rolled_out_example_by_example(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = with_padding(random_pattern_trace(batch=3, layers=2, heads=2, pos=6, seed=4), [6, 3, 5])
    batched = interpret.analyze(trace, "rollout")
    monkeypatch.setattr(rollout_module, "CPU_BATCH_ENTRIES", 3 * 6 * 6 - 1)  # one entry short of this batch
    bounded = interpret.analyze(trace, "rollout")
    monkeypatch.setattr(Rollout, "_batched", lambda *args: None)
    alone = interpret.analyze(trace, "rollout")
    if DEVICE == "cpu":  # the per-example statement itself, bit for bit
        assert all(np.array_equal(bounded[name], alone[name]) for name in alone.arrays)
    np.testing.assert_allclose(bounded["rollout"], batched["rollout"], rtol=0, atol=1e-12)
