"""Streaming as a strategy: explain(streaming="on") runs each analyzer's streamed computation with no
pattern captured and the same readout as the full run; "auto" streams exactly when the full capture is over the
budget; "off" refuses as before; an analyzer that needs every pattern and has no streamed computation is refused in
one line naming the alternatives (left out with a note when it is one of the defaults the user did not name),
and flow refuses a graph above its bound."""

from __future__ import annotations

import numpy as np
import pytest
from hf_tiny import tiny_model, word_tokenizer

import interpret
from interpret.analysis.strategy import streamed_strategies
from interpret.errors import AnalyzerError, ConfigError, MemoryBudgetError
from interpret.plugins import flow as flow_plugin
from interpret.request import Limits

WORDS = "the cat sat on mat a dog saw red blue".split()
LONG = " ".join(WORDS[(7 * i) % len(WORDS)] for i in range(58))  # 60 tokens with [CLS] and [SEP]
# Tiny Llama (2 layers, 4 heads of 8) at 60 tokens: the patterns take 2·4·60²·4 = 115 kB, q, k, v and z 61 kB.
BUDGET = 80_000


def _results(report) -> dict:
    return {section.result.analyzer: section.result for section in report.sections if section.kind == "analyzer"}


def _strategies(report) -> dict:
    return {name: result.strategy for name, result in _results(report).items()}


def test_streamed_run_equals_the_full_run_and_captures_no_pattern() -> None:
    model, tokenizer = tiny_model("llama"), word_tokenizer()
    full = interpret.explain(model, tokenizer, [LONG], ["rollout"], limits=Limits(None, None, "off"))
    streamed = interpret.explain(model, tokenizer, [LONG], ["rollout"], limits=Limits(streaming="on"))
    assert _strategies(streamed) == {"rollout": "streamed"} and _strategies(full) == {"rollout": "full"}
    assert not [section for section in streamed.sections if section.kind == "attention"]
    assert np.abs(_results(streamed)["rollout"]["readout"] - _results(full)["rollout"]["readout"]).max() <= 1e-5
    assert any(label == "Streaming" for label, _ in streamed.run.notes)
    assert streamed.run.attention == "streamed" and "no pattern captured".encode() in streamed.page()


def test_auto_streams_exactly_when_the_full_capture_is_over_the_budget() -> None:
    model, tokenizer = tiny_model("llama"), word_tokenizer()
    streamed = interpret.explain(model, tokenizer, [LONG], ["rollout"], limits=Limits(capture_bytes=BUDGET))
    assert _strategies(streamed) == {"rollout": "streamed"}
    plain = interpret.explain(model, tokenizer, [LONG], ["rollout"], limits=Limits(capture_bytes=None))
    assert _strategies(plain) == {"rollout": "full"}
    with pytest.raises(MemoryBudgetError):
        interpret.explain(model, tokenizer, [LONG], ["rollout"], limits=Limits(capture_bytes=BUDGET, streaming="off"))


def test_an_analyzer_without_a_streaming_version_is_refused_naming_the_alternatives() -> None:
    model, tokenizer = tiny_model("llama"), word_tokenizer()
    with pytest.raises(AnalyzerError) as caught:
        interpret.explain(model, tokenizer, [LONG], ["rollout", "flow"], limits=Limits(capture_bytes=BUDGET))
    message = str(caught.value)
    assert "\n" not in message and message.startswith("flow needs every")
    assert "(attention_x_gradient, gradient_weighted_rollout, rollout)" in message
    assert "attention_entropy" not in message  # no readout: not an alternative to flow's
    with pytest.raises(ConfigError, match="unknown; use auto, on or off"):
        interpret.explain(model, tokenizer, [LONG], ["rollout"], limits=Limits(streaming="sometimes"))


def test_the_streamed_strategies_keep_each_analyzer_and_its_name() -> None:
    chosen, notes = streamed_strategies(["rollout", "gradient_weighted_rollout", "integrated_gradients"], "a test")
    assert chosen == {"rollout": "streamed", "gradient_weighted_rollout": "streamed", "integrated_gradients": "full"}
    assert notes == []


def test_the_default_set_streams_leaving_out_what_needs_every_pattern_with_a_note() -> None:
    """A user who named no analyzers gets a streamed report on a long input, not a refusal of a default."""
    from interpret.analysis.defaults import DEFAULT_ANALYZERS

    model, tokenizer = tiny_model("llama"), word_tokenizer()
    report = interpret.explain(model, tokenizer, [LONG], limits=Limits(capture_bytes=BUDGET), evidence=False)
    ran = _strategies(report)
    assert ran["rollout"] == "streamed" and ran["attention_x_gradient"] == "streamed"  # the first lead that streams
    notes = dict(report.run.notes)
    left_out = [name for name in DEFAULT_ANALYZERS if f"{name} left out" in notes]
    assert left_out and set(left_out).isdisjoint(ran)
    for name in left_out:
        assert "needs every [layer, head, n, n] attention pattern" in notes[f"{name} left out"]
        assert "rollout" in notes[f"{name} left out"].split("streamed ones: ")[1]
    assert "attnlrp" not in ran and "attnlrp has no streamed computation" in notes["attnlrp left out"]  # a lead in full
    assert "Streaming" in notes


def test_flow_refuses_a_graph_above_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = tiny_model("gpt2"), word_tokenizer()
    trace = interpret.collect(model, tokenizer, [LONG])
    monkeypatch.setattr(flow_plugin, "FLOW_MAX_EDGES", 2 * 60 * 60 - 1)
    with pytest.raises(AnalyzerError, match=r"over the bound of .*analyzers that stream \(rollout, attention_x_gradient"):
        interpret.analyze(trace, "flow", model=model, tokenizer=tokenizer)
