"""Property tests over the whole parameter space of rollout and flow: refused at construction, or a sound result.

For every combination hypothesis draws, either the Params class refuses it (ValueError, one line) or
`interpret.analyze` returns arrays that are all finite, readout rows that are not all zero, rows that sum to
one where the method makes them (rollout), and checks that pass. Traces: random softmax patterns
(`fake_traces.py`, encoder and causal) and the real patterns of tiny random BERT and GPT-2 models, whose
second example is padded.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from fake_traces import random_pattern_trace
from hf_tiny import TEXTS, tiny_model, word_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

import interpret
from interpret.plugins import flow_math, rollout_math
from interpret.plugins.flow import FlowParams
from interpret.plugins.rollout import RolloutParams
from interpret.trace import Trace

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)
TRACES = ("fake-encoder", "fake-causal", "bert", "gpt2")


@functools.cache
def trace_of(name: str) -> Trace:
    """Return the named trace: 3 layers of random patterns, or a tiny model's real patterns (2 layers)."""
    if name.startswith("fake"):
        return random_pattern_trace(batch=2, layers=3, heads=3, pos=7, causal=name == "fake-causal", seed=3)
    model = tiny_model(name, attn_implementation="eager")
    return interpret.collect(model, word_tokenizer(), TEXTS, names=["blocks.*.attn.hook_pattern"])


def _shortest(trace: Trace) -> int:
    """Return the number of real tokens of the trace's shortest example."""
    return int(trace.encoded.attention_mask.sum(dim=-1).min())


@st.composite
def readouts(draw: st.DrawFn, trace: Trace) -> str | tuple[int, ...]:
    """Draw 'auto' or positions that are real tokens of every example (negatives count from the last)."""
    shortest = _shortest(trace)
    position = st.integers(-shortest, shortest - 1)
    return draw(st.one_of(st.just("auto"), st.lists(position, min_size=1, max_size=3).map(tuple)))


def _refused(build: functools.partial) -> bool:
    """Return whether constructing the Params raises ValueError, checking that its message is one line."""
    try:
        build()
    except ValueError as err:
        assert "\n" not in str(err) and str(err), err
        return True
    return False


def _assert_sound(result: interpret.AnalyzerResult) -> None:
    """Assert that every array is finite, no readout row is all zero, and every check passes."""
    for name in result.arrays:
        assert np.all(np.isfinite(result[name])), name
    readout = result["readout"]
    assert np.all(np.abs(readout).sum(axis=-1) > 0), "a readout row is all zero"
    assert result.ok, {name: check.value for name, check in result.checks.items()}


FRACTIONS = st.one_of(st.sampled_from([0.0, 0.5, 0.9, 0.999, 1.0]), st.floats(-0.5, 1.5, allow_nan=False))


@SETTINGS
@given(
    data=st.data(),
    trace_name=st.sampled_from(TRACES),
    residual=FRACTIONS,
    head_fusion=st.sampled_from(["mean", "max", "min"]),
    discard_ratio=FRACTIONS,
    rows=st.sampled_from(["all", "readout"]),
    per_layer=st.booleans(),
)
def test_rollout_refuses_or_is_sound(
    data: st.DataObject, trace_name: str, residual: float, head_fusion: str, discard_ratio: float, rows: str,
    per_layer: bool,
) -> None:
    trace = trace_of(trace_name)
    params = {
        "residual": residual, "head_fusion": head_fusion, "discard_ratio": discard_ratio, "rows": rows,
        "per_layer": per_layer, "readout": data.draw(readouts(trace)),
        "start_layer": data.draw(st.integers(0, len(trace.meta.layers) - 1)),
    }
    if _refused(functools.partial(RolloutParams, **params)):
        return
    result = interpret.analyze(trace, "rollout", params=params)
    _assert_sound(result)
    # A rollout row is a distribution over the input tokens: every real row sums to one.
    np.testing.assert_allclose(result["readout"].sum(axis=-1), 1.0, rtol=0, atol=1e-9)


@SETTINGS
@given(
    data=st.data(),
    trace_name=st.sampled_from(TRACES),
    residual=FRACTIONS,
    rows=st.sampled_from(["all", "readout"]),
    solver=st.sampled_from(["dinic", "scipy"]),
    normalize=st.sampled_from(["row", "none"]),
)
def test_flow_refuses_or_is_sound(
    data: st.DataObject, trace_name: str, residual: float, rows: str, solver: str, normalize: str
) -> None:
    trace = trace_of(trace_name)
    params = {"residual": residual, "rows": rows, "solver": solver, "normalize": normalize,
              "readout": data.draw(readouts(trace))}
    if _refused(functools.partial(FlowParams, **params)):
        return
    result = interpret.analyze(trace, "flow", params=params)
    _assert_sound(result)
    # A single max-flow never exceeds what leaves the source (1), raw or divided by its row's sum.
    assert result["readout"].max() <= 1.0 + 1e-9


@SETTINGS
@given(
    trace_name=st.sampled_from(TRACES),
    residual=st.floats(0.0, 0.99),
    normalize=st.sampled_from(["row", "none"]),
    method=st.sampled_from(["dinic", "scipy"]),
)
def test_flow_rows_are_distributions_when_normalised(trace_name: str, residual: float, normalize: str, method: str) -> None:
    pattern = trace_of(trace_name).stack("attn.hook_pattern").double().cpu().numpy()[0]  # the unpadded example
    flow = flow_math.attention_flow(pattern, residual_weight=residual, normalize=normalize, method=method)
    assert np.all(np.isfinite(flow)) and flow.min() >= 0.0
    if normalize == "row":
        np.testing.assert_allclose(flow.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    else:
        assert flow.max() <= 1.0 + 1e-9 and np.all(flow.sum(axis=-1) >= 1.0 - 1e-7)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"residual": 1.0}, "residual=1 ignores the attention"),
        ({"residual": 0.0, "discard_ratio": 0.9}, "with residual=0 can leave a query with no attention"),
        ({"residual": 1.5}, r"residual=1.5 is outside \[0, 1\]"),
        ({"discard_ratio": 1.0}, r"discard_ratio=1.0 is outside \[0, 1\)"),
        ({"per_layer": True, "rows": "readout"}, "per_layer needs rows='all'"),
    ],
)
def test_rollout_refusals_say_what_to_use(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RolloutParams(**params)
    with pytest.raises(interpret.errors.AnalyzerError, match=message):
        interpret.analyze(trace_of("fake-encoder"), "rollout", params=params)


def test_flow_refuses_residual_one() -> None:
    with pytest.raises(ValueError, match="residual=1 ignores the attention.*use a weight below 1"):
        FlowParams(residual=1.0)


def test_degenerate_rows_in_the_maths_are_errors() -> None:
    # The maths refuse what the Params let through only when given directly: no NaN, no silent zero row.
    pattern = trace_of("fake-encoder").stack("attn.hook_pattern").double().cpu().numpy()
    with pytest.raises(interpret.errors.ConfigError, match="discard ratio 0.95 leaves query"):
        rollout_math.augmented_attention(pattern, residual_weight=0.0, discard_ratio=0.95)
