"""An audit runs a float32 SDPA model with the eager kernel (its weights are the patterns, nothing recomputed):
switched for the audit and back after, recorded in the fingerprint, and agreeing with the SDPA-and-recompute
audit to float rounding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hf_tiny import save_tiny_classifier

import interpret
from interpret.analysis import required_names
from interpret.audit import AuditOptions, run_audit
from interpret.audit.checks import effective_params
from interpret.audit.engine import capture_batch, run_batch
from interpret.audit.kernel import audit_implementation, audit_kernel, describe
import interpret.audit.runner as runner
from interpret.errors import InputError
from interpret.pipeline import Plan
from interpret.reading.datasets import Example

ATTENTION = ["rollout", "flow", "attention_entropy"]
WORDS = "the cat sat on mat a dog saw red blue".split()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_classifier(tmp_path_factory.mktemp("kernel") / "model")


def _examples(n: int = 10) -> list[Example]:
    return [Example(row=i, text=" ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(1 + i % 6)),
                    label="positive" if i % 2 else "negative") for i in range(n)]


def _settings(model, attention: str | None) -> Plan:
    return Plan(
        strategies=dict.fromkeys(ATTENTION, "full"), params={name: effective_params(name, None) for name in ATTENTION},
        hook_names=tuple(dict.fromkeys([*required_names(ATTENTION), "*attn.hook_pattern"])), attention=attention,
    )


def test_which_models_switch(model_dir, model) -> None:
    sdpa, _ = interpret.load(model_dir, attn_implementation="sdpa")
    eager, _ = interpret.load(model_dir, attn_implementation="eager")
    assert audit_implementation(sdpa) == "eager" and describe(sdpa) == "eager"
    assert audit_implementation(eager) is None and describe(eager) == "eager"  # the same computation
    half = sdpa.to(torch.bfloat16)  # the eager kernel would round its weights to bfloat16: kept on SDPA
    assert audit_implementation(half) is None and describe(half) == "sdpa"
    assert audit_implementation(model) is None and describe(model) == "none"  # the reference model


def test_the_kernel_is_switched_for_the_batch_and_back_after(model_dir) -> None:
    sdpa, tokenizer = interpret.load(model_dir, attn_implementation="sdpa")
    settings = _settings(sdpa, "eager")
    captured = capture_batch(sdpa, tokenizer, _examples(3), 0, settings)
    assert captured.captured.trace.meta.attention == "eager"  # the kernel's own weights, nothing recomputed
    assert sdpa.config._attn_implementation == "sdpa"
    run_batch(sdpa, tokenizer, _examples(3), 0, settings)  # what a Ray actor calls
    assert sdpa.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="inside"):
        with audit_kernel(sdpa, "eager"):
            assert sdpa.config._attn_implementation == "eager"
            raise RuntimeError("inside")
    assert sdpa.config._attn_implementation == "sdpa"
    recomputed = capture_batch(sdpa, tokenizer, _examples(3), 0, _settings(sdpa, None))
    assert recomputed.captured.trace.meta.attention == "recomputed"


def test_an_audit_runs_eager_and_restores_the_model_also_when_it_fails(model_dir, tmp_path, monkeypatch) -> None:
    sdpa, tokenizer = interpret.load(model_dir, attn_implementation="sdpa")
    seen: list[str] = []

    def failing_engine(model, *args):
        seen.append(model.config._attn_implementation)
        raise RuntimeError("engine failed")

    with pytest.raises(RuntimeError, match="engine failed"):
        run_audit(sdpa, tokenizer, _examples(4), tmp_path / "failed", analyzers=ATTENTION, batch_size=2,
                  options=AuditOptions(engine=failing_engine))
    assert seen == ["eager"] and sdpa.config._attn_implementation == "sdpa"
    result = run_audit(sdpa, tokenizer, _examples(4), tmp_path / "ok", analyzers=ATTENTION, batch_size=2)
    assert sdpa.config._attn_implementation == "sdpa"
    assert '"attention": "eager"' in result.manifest.read_text("utf-8")
    assert "attention kernel" in result.summary.read_text("utf-8")


def test_an_audit_of_streaming_analyzers_keeps_the_fused_kernel(model_dir, tmp_path, monkeypatch) -> None:
    """No pattern is captured, so nothing is gained by the eager kernel and its [n, n] scores would be held: the
    model runs as loaded, the fingerprint says so, no pattern hook is captured, and the tables equal the full
    analyzers' (heads.csv; the tokens' rollout scores)."""
    sdpa, tokenizer = interpret.load(model_dir, attn_implementation="sdpa")
    assert audit_implementation(sdpa, patterns=False) is None and describe(sdpa, patterns=False) == "sdpa"
    seen: list[tuple[str, tuple[str, ...]]] = []
    real = runner._compute_missing

    def recording(model, tokenizer_, store, batches, parts, settings, *args):
        seen.append((model.config._attn_implementation, settings.hook_names))
        return real(model, tokenizer_, store, batches, parts, settings, *args)

    monkeypatch.setattr(runner, "_compute_missing", recording)
    streamed = run_audit(sdpa, tokenizer, _examples(4), tmp_path / "streamed", batch_size=2, analyzers=["rollout", "attention_entropy"],
                         options=AuditOptions(streaming="on"))
    assert seen and all(kernel == "sdpa" for kernel, _ in seen)
    assert not any("hook_pattern" in name for _, names in seen for name in names)
    assert '"attention": "sdpa"' in streamed.manifest.read_text("utf-8")
    full = run_audit(sdpa, tokenizer, _examples(4), tmp_path / "full", batch_size=2,
                     analyzers=["rollout", "attention_entropy"])
    heads = [pd.read_csv(result.out_dir / "heads.csv") for result in (streamed, full)]
    assert list(heads[0].columns) == list(heads[1].columns) and len(heads[0]) == len(heads[1]) > 0
    assert np.abs(heads[0].to_numpy(float) - heads[1].to_numpy(float)).max() <= 1e-5
    tokens = [pd.read_csv(result.out_dir / "tokens.csv") for result in (streamed, full)]
    assert np.abs(tokens[0]["score"].to_numpy() - tokens[1]["score"].to_numpy()).max() <= 1e-5


def test_eager_and_sdpa_loaded_models_write_the_same_tables(model_dir, tmp_path) -> None:
    """Both run the eager kernel, so every file is byte-identical and either resumes the other."""
    kwargs = dict(analyzers=ATTENTION, batch_size=3, options=AuditOptions(part_examples=3))
    outputs = {}
    for implementation in ("sdpa", "eager"):
        model, tokenizer = interpret.load(model_dir, attn_implementation=implementation)
        result = run_audit(model, tokenizer, _examples(), tmp_path / implementation, **kwargs)
        outputs[implementation] = {path.name: path.read_bytes() for path in result.paths if path.suffix != ".json"}
    assert outputs["sdpa"] == outputs["eager"]


def test_eager_audit_agrees_with_the_sdpa_recomputed_audit(model_dir, tmp_path, monkeypatch) -> None:
    """The eager kernel's weights and the float32 recomputation from SDPA's inputs are the same statement:
    decisions equal, numbers equal to float rounding."""
    model, tokenizer = interpret.load(model_dir, attn_implementation="sdpa")
    kwargs = dict(analyzers=ATTENTION, batch_size=3)
    eager = run_audit(model, tokenizer, _examples(), tmp_path / "eager", **kwargs)
    monkeypatch.setattr(runner, "audit_implementation", lambda model, patterns=True: None)  # the audit as before: SDPA kept
    monkeypatch.setattr("interpret.audit.identity.describe", lambda model, patterns=True: "sdpa")
    sdpa = run_audit(model, tokenizer, _examples(), tmp_path / "sdpa", **kwargs)
    assert '"attention": "sdpa"' in sdpa.manifest.read_text("utf-8")
    for name in ("tokens.parquet", "examples.parquet"):
        first, second = pd.read_parquet(eager.out_dir / name), pd.read_parquet(sdpa.out_dir / name)
        assert list(first.columns) == list(second.columns) and len(first) == len(second)
        for column in first.columns:
            if pd.api.types.is_float_dtype(first[column]):
                np.testing.assert_allclose(first[column], second[column], rtol=1e-5, atol=1e-6, err_msg=column)
            else:
                assert first[column].tolist() == second[column].tolist(), column  # tokens, ranks, predictions
    heads_eager, heads_sdpa = pd.read_csv(eager.heads), pd.read_csv(sdpa.heads)
    np.testing.assert_allclose(heads_eager[["entropy", "special_attention"]], heads_sdpa[["entropy", "special_attention"]],
                               rtol=1e-5, atol=1e-6)


def test_a_resume_refuses_parts_computed_with_the_other_kernel(model_dir, tmp_path, monkeypatch) -> None:
    model, tokenizer = interpret.load(model_dir, attn_implementation="sdpa")
    kwargs = dict(analyzers=ATTENTION, batch_size=2)
    with monkeypatch.context() as patched:
        patched.setattr(runner, "audit_implementation", lambda model, patterns=True: None)
        patched.setattr("interpret.audit.identity.describe", lambda model, patterns=True: "sdpa")
        run_audit(model, tokenizer, _examples(4), tmp_path / "out", **kwargs)
    with pytest.raises(InputError, match=r"attention \(sdpa there, eager now\)"):
        run_audit(model, tokenizer, _examples(4), tmp_path / "out", **kwargs)
    resumed = run_audit(model, tokenizer, _examples(4), tmp_path / "out", options=AuditOptions(fresh=True), **kwargs)
    assert resumed.n_computed == 4
