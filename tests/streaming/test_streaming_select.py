"""Selecting the streaming analyzers: explain(streaming="on") runs each analyzer's streaming version with no
pattern captured and the same readout as the full run; "auto" streams exactly when the full capture is over the
budget; "off" refuses as before; an analyzer that needs every pattern and has no streaming version is refused in
one line naming the alternatives (left out with a note when it is one of the defaults the user did not name),
and flow refuses a graph above its bound."""

from __future__ import annotations

import numpy as np
import pytest
from hf_tiny import tiny_model, word_tokenizer

import interpret
from interpret.errors import AnalyzerError, MemoryBudgetError
from interpret.plugins import flow as flow_plugin
from interpret.streaming.select import streamed_plan, streamed_versions

WORDS = "the cat sat on mat a dog saw red blue".split()
LONG = " ".join(WORDS[(7 * i) % len(WORDS)] for i in range(58))  # 60 tokens with [CLS] and [SEP]
# Tiny Llama (2 layers, 4 heads of 8) at 60 tokens: the patterns take 2·4·60²·4 = 115 kB, q, k, v and z 61 kB.
BUDGET = 80_000


def _results(report) -> dict:
    return {section.result.analyzer: section.result for section in report.sections if section.kind == "analyzer"}


def test_streamed_run_equals_the_full_run_and_captures_no_pattern() -> None:
    model, tokenizer = tiny_model("llama"), word_tokenizer()
    full = interpret.explain(model, tokenizer, [LONG], ["rollout"], streaming="off", budget_bytes=None)
    streamed = interpret.explain(model, tokenizer, [LONG], ["rollout"], streaming="on")
    assert list(_results(streamed)) == ["streaming_rollout"]
    assert not [section for section in streamed.sections if section.kind == "attention"]
    assert np.abs(_results(streamed)["streaming_rollout"]["readout"] - _results(full)["rollout"]["readout"]).max() <= 1e-5
    assert any(label == "Streaming" for label, _ in streamed.run.notes)
    assert streamed.run.attention == "streamed" and "no pattern captured".encode() in streamed.page()


def test_auto_streams_exactly_when_the_full_capture_is_over_the_budget() -> None:
    model, tokenizer = tiny_model("llama"), word_tokenizer()
    streamed = interpret.explain(model, tokenizer, [LONG], ["rollout"], budget_bytes=BUDGET)
    assert list(_results(streamed)) == ["streaming_rollout"]
    plain = interpret.explain(model, tokenizer, [LONG], ["rollout"], budget_bytes=None)
    assert list(_results(plain)) == ["rollout"]
    with pytest.raises(MemoryBudgetError):
        interpret.explain(model, tokenizer, [LONG], ["rollout"], budget_bytes=BUDGET, streaming="off")


def test_an_analyzer_without_a_streaming_version_is_refused_naming_the_alternatives() -> None:
    model, tokenizer = tiny_model("llama"), word_tokenizer()
    with pytest.raises(AnalyzerError) as caught:
        interpret.explain(model, tokenizer, [LONG], ["rollout", "flow"], budget_bytes=BUDGET)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("flow needs every")
    for name in ("streaming_rollout", "streaming_attention_gradient", "streaming_grad_rollout"):
        assert name in message
    assert "streaming_attention_entropy" not in message  # no readout: not an alternative to flow's
    with pytest.raises(AnalyzerError, match="unknown; use auto, on or off"):
        interpret.explain(model, tokenizer, [LONG], ["rollout"], streaming="sometimes")


def test_streamed_plan_maps_full_analyzers_and_their_params() -> None:
    versions = streamed_versions()
    assert versions["rollout"] == "streaming_rollout"
    assert versions["attention_x_gradient"] == "streaming_attention_gradient"
    assert versions["gradient_weighted_rollout"] == "streaming_grad_rollout"
    chosen, params, notes = streamed_plan(["rollout", "streaming_grad_rollout"], {"rollout": {"residual": 0.3}}, "a test")
    assert chosen == ["streaming_rollout", "streaming_grad_rollout"]
    assert params == {"streaming_rollout": {"residual": 0.3}}
    assert notes == []


def test_the_default_set_streams_leaving_out_what_needs_every_pattern_with_a_note() -> None:
    """A user who named no analyzers gets a streamed report on a long input, not a refusal of a default."""
    from interpret.analyze.defaults import DEFAULT_ANALYZERS

    model, tokenizer = tiny_model("llama"), word_tokenizer()
    report = interpret.explain(model, tokenizer, [LONG], budget_bytes=BUDGET, evidence=False)
    ran = list(_results(report))
    assert "streaming_rollout" in ran and "streaming_attention_gradient" in ran  # the first lead that streams
    notes = dict(report.run.notes)
    left_out = [name for name in DEFAULT_ANALYZERS if f"{name} left out" in notes]
    assert left_out and set(left_out).isdisjoint(ran)
    for name in left_out:
        assert "needs every [layer, head, n, n] attention pattern" in notes[f"{name} left out"]
        assert "streaming_rollout" in notes[f"{name} left out"]
    assert "Streaming" in notes


def test_flow_refuses_a_graph_above_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = tiny_model("gpt2"), word_tokenizer()
    trace = interpret.collect(model, tokenizer, [LONG])
    monkeypatch.setattr(flow_plugin, "FLOW_MAX_EDGES", 2 * 60 * 60 - 1)
    with pytest.raises(AnalyzerError, match=r"over the bound of .*\(streaming_rollout, streaming_attention_gradient"):
        interpret.analyze(trace, "flow", model=model, tokenizer=tokenizer)
