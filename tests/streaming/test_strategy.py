"""Streaming is a strategy of the analyzer (issue 25): the old streaming_* names are not registered and run
their twin streamed with a DeprecationWarning; a parameter the chosen computation does not read is refused; the
result keeps the analyzer's name with its strategy recorded ("Rollout, streamed"); the contract's optional
`streamed_requires` is validated; an audit names a streamed analyzer in its fingerprint, so it never resumes
parts computed the other way or under an old name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hf_tiny import save_tiny_classifier, tiny_model, word_tokenizer

import interpret
from interpret.analysis import AnalyzerResult, registry
from interpret.analysis.defaults import DEPRECATED_STREAMING
from interpret.audit import AuditOptions, run_audit
from interpret.audit.parts import fingerprint
from interpret.errors import AnalyzerError, ConfigError, InputError
from interpret.reading.datasets import Example
from interpret.registration.analyzer_rules import validate
from interpret.streaming.capture import REQUIRES

TEXTS = ["the cat sat on the mat", "a dog saw red"]
WORDS = "the cat sat on mat a dog saw red blue".split()


@pytest.fixture(scope="module")
def traced():
    model, tokenizer = tiny_model("llama"), word_tokenizer()
    return model, tokenizer, interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern", *REQUIRES])


def test_old_names_run_the_twin_streamed_with_a_warning_and_are_not_registered(traced) -> None:
    model, tokenizer, trace = traced
    assert not [name for name in registry.names() if name.startswith("streaming_")]
    with pytest.raises(AnalyzerError, match="unknown analyzer 'streaming_rollout'"):
        registry.get("streaming_rollout")
    for old, twin in DEPRECATED_STREAMING.items():
        if twin != "rollout" and twin != "attention_entropy":
            continue  # the gradient twins: test_streaming_readouts runs them streamed
        with pytest.warns(DeprecationWarning, match=f"'{old}' is now '{twin}' streamed"):
            result = interpret.analyze(trace, old, model=model, tokenizer=tokenizer)
        assert (result.analyzer, result.strategy) == (twin, "streamed")
        direct = interpret.analyze(trace, twin, model=model, tokenizer=tokenizer, strategy="streamed")
        for name, array in direct.arrays.items():
            assert np.array_equal(result[name], array.values), name


def test_streamed_rollout_is_rows_readout_and_a_parameter_of_the_other_computation_is_refused(traced) -> None:
    model, tokenizer, trace = traced
    full = interpret.analyze(trace, "rollout", params={"rows": "readout"}, model=model, tokenizer=tokenizer)
    streamed = interpret.analyze(trace, "rollout", model=model, tokenizer=tokenizer, strategy="streamed")
    assert set(streamed.arrays) == set(full.arrays) == {"readout"}
    assert np.abs(streamed["readout"] - full["readout"]).max() <= 1e-5
    # rows=readout names what the streamed computation is, so a streamed run takes it (rows=all it cannot give)
    same = interpret.analyze(trace, "rollout", params={"rows": "readout"}, model=model, strategy="streamed")
    assert np.array_equal(same["readout"], streamed["readout"]) and same.params == streamed.params
    with pytest.raises(AnalyzerError, match=r"rollout.rows is read only when rollout does not stream"):
        interpret.analyze(trace, "rollout", params={"rows": "all"}, model=model, strategy="streamed")
    with pytest.raises(AnalyzerError, match=r"rollout.discard_ratio is read only when rollout does not stream"):
        interpret.analyze(trace, "rollout", params={"discard_ratio": 0.1}, model=model, strategy="streamed")
    with pytest.raises(AnalyzerError, match=r"rollout.block_mib is read only when rollout streams"):
        interpret.analyze(trace, "rollout", params={"block_mib": 8}, model=model)
    with pytest.raises(AnalyzerError, match="flow has no streamed computation"):
        interpret.analyze(trace, "flow", model=model, strategy="streamed")
    with pytest.raises(AnalyzerError, match="strategy='sometimes' is unknown"):
        interpret.analyze(trace, "rollout", model=model, strategy="sometimes")


def test_the_strategy_is_recorded_shown_and_round_trips(traced) -> None:
    model, tokenizer, trace = traced
    full = interpret.analyze(trace, "attention_entropy", model=model, tokenizer=tokenizer)
    streamed = interpret.analyze(trace, "attention_entropy", model=model, tokenizer=tokenizer, strategy="streamed")
    assert (full.title, streamed.title) == ("Attention entropy", "Attention entropy, streamed")
    assert "strategy" not in full.to_dict() and streamed.to_dict()["strategy"] == "streamed"  # full: as before
    assert "block_mib" in streamed.params and "stack" not in streamed.params
    assert "block_mib" not in full.params and "stack" in full.params
    again = AnalyzerResult.from_dict(json.loads(json.dumps(streamed.to_dict())))
    assert again.strategy == "streamed" and again.to_dict() == streamed.to_dict()
    assert np.abs(streamed["entropy"] - full["entropy"]).max() <= 1e-5


def test_the_contract_validates_streamed_requires() -> None:
    from interpret.plugins.rollout import Rollout

    class Broken(Rollout):
        streamed_requires = "*attn.hook_q"  # one string, not a sequence of them

    assert validate(Rollout, "rollout") is None
    assert validate(Broken, "rollout") == "class attribute streamed_requires, when given, must be a sequence of strings"


def test_an_audit_never_resumes_parts_computed_by_the_other_strategy_or_an_old_name(tmp_path) -> None:
    model, tokenizer = interpret.load(save_tiny_classifier(tmp_path / "model"))
    examples = [Example(row=i, text=" ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(2 + i))) for i in range(4)]
    out = tmp_path / "audit"
    streamed = run_audit(model, tokenizer, examples, out, analyzers=["rollout"], options=AuditOptions(streaming="on"))
    manifest = json.loads(streamed.manifest.read_text(encoding="utf-8"))
    assert manifest["components"]["analyzers"] == "rollout (streamed)"
    with pytest.warns(DeprecationWarning):  # the old name is the same audit: it resumes every batch
        again = run_audit(model, tokenizer, examples, out, analyzers=["streaming_rollout"])
    assert again.n_computed == 0 and again.n_resumed == len(examples)
    with pytest.raises(InputError, match="holds an audit of a different analyzers"):
        run_audit(model, tokenizer, examples, out, analyzers=["rollout"])
    # a misspelt choice is refused in one line, never read as "off"
    with pytest.raises(ConfigError, match=r"^streaming='yes' is not known; use 'on' \(streamed computations\) or 'off'\.$"):
        run_audit(model, tokenizer, examples, out, analyzers=["rollout"], options=AuditOptions(streaming="yes"))
    # An audit written by the old streaming_rollout plugin names it so: refused, never mixed with these parts.
    manifest["components"]["analyzers"] = "streaming_rollout"
    manifest["fingerprint"] = fingerprint(manifest["components"])
    streamed.manifest.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.warns(DeprecationWarning), pytest.raises(InputError, match="different analyzers"):
        run_audit(model, tokenizer, examples, out, analyzers=["streaming_rollout"])
