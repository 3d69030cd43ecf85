"""Attention sinks: a learnable per-head logit in every row's softmax denominator that holds no value (gpt-oss,
Granite SWA, HunYuan V4, DeepSeek V4, MiMo-V2-Flash, ...). A row's probabilities then sum to less than one, and
the pattern is what weights the values: restated from the kernel's scores and its sink (`recompute.sink_logits`),
whatever the kernel returns as its weights.

The reference is independent of that restatement: the pattern times the values equals the kernel's own output
(`hook_z`, the output projection's input), and where the eager kernel returns the weights it applied (gpt-oss),
the pattern equals them. Granite SWA's eager kernel returns its weights normalised without the sink and scales
its output afterwards: there the pattern is the weights it applied, not the ones it returns. The streamed
computations restate the sinks (and each layer's sliding window and scale) from the trace's meta and equal the
analyzers over the full patterns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import SINK_MODELS, TEXTS, built_with, eager_copy, sink_model, word_tokenizer

import interpret
from interpret.files.trace_io import load_trace, save_trace
from interpret.request import Limits
from interpret.streaming.capture import REQUIRES

TIGHT = 1e-6
OUTPUT = 1e-5  # pattern · values against the kernel's output, both float32 sums of the same products
STREAMED = 1e-5  # a streamed result against the analyzer over the captured patterns (float32 rows, float64 sums)
LONG = "the cat sat on the mat and the dog saw the red ball"  # 14 positions: past the window of 4


def _sizes() -> dict[str, Any]:
    return {"vocab_size": len(word_tokenizer()), "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "pad_token_id": 0}


@pytest.mark.parametrize("name", list(SINK_MODELS))
def test_the_pattern_is_what_weights_the_values_and_sums_to_less_than_one(name: str) -> None:
    model = sink_model(name)
    trace = interpret.collect(model, word_tokenizer(), TEXTS[:2], names="*")
    mask = trace.encoded.attention_mask.bool()
    with torch.no_grad():
        returned = eager_copy(model)(input_ids=trace.encoded.input_ids, attention_mask=trace.encoded.attention_mask,
                                     output_attentions=True).attentions
    for layer in range(2):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"]
        values, z = trace[f"blocks.{layer}.attn.hook_v"].float(), trace[f"blocks.{layer}.attn.hook_z"].float()
        weighted = torch.einsum("bhqk,bkhd->bqhd", pattern, values)
        torch.testing.assert_close(weighted[mask], z[mask], atol=OUTPUT, rtol=0)
        sums = pattern.sum(-1)[mask[:, None, :].expand(-1, pattern.shape[1], -1)]
        assert float(sums.max()) < 0.99 and float(sums.min()) > 0.0  # the sink holds a real share of every row
        # the row normaliser kept includes the sink: every probability is exp(score - lse)
        keep = mask[:, None, :, None] & mask[:, None, None, :]
        scores, lse = trace[f"blocks.{layer}.attn.hook_attn_scores"], trace[f"blocks.{layer}.attn.hook_lse"]
        torch.testing.assert_close((scores - lse[..., None]).exp().masked_fill(~keep, 0), pattern.masked_fill(~keep, 0),
                                   atol=TIGHT, rtol=0)
        if name == "gpt_oss":  # its eager kernel returns the weights it applied
            torch.testing.assert_close(pattern.masked_fill(~keep, 0), returned[layer].float().masked_fill(~keep, 0),
                                       atol=TIGHT, rtol=0)
        else:  # Granite SWA returns them normalised without the sink, and scales its output afterwards
            gap = (returned[layer].float().masked_fill(~keep, 0) - pattern.masked_fill(~keep, 0)).abs().max()
            assert float(gap) > 0.01


def test_the_output_is_untouched_and_the_trace_says_its_rows_have_sinks(tmp_path) -> None:
    model = sink_model("gpt_oss")
    trace = interpret.collect(model, word_tokenizer(), TEXTS[:2], names="*")
    with torch.no_grad():
        plain = model(input_ids=trace.encoded.input_ids, attention_mask=trace.encoded.attention_mask)
    assert torch.equal(trace.output.logits, plain.logits)
    assert trace.meta.sinks and trace.meta.attention == "recomputed"  # restated from the scores and the sinks
    assert load_trace(save_trace(trace, tmp_path / "t.safetensors")).meta.sinks
    dense = interpret.collect(built_with(lambda: T.LlamaForCausalLM(T.LlamaConfig(**_sizes())), "eager"),
                              word_tokenizer(), TEXTS[:2])
    assert not dense.meta.sinks and dense.meta.attention == "eager"


def test_the_entropy_counts_the_sink_as_one_more_outcome_of_its_row() -> None:
    """A plain statement: each real row's distribution is its real keys' probabilities and the sink's share
    s = 1 − Σ p; its entropy −Σ p·log p − s·log s, averaged over real rows."""
    model = sink_model("gpt_oss")
    trace = interpret.collect(model, word_tokenizer(), TEXTS[:2])
    entropy = interpret.analyze(trace, "attention_entropy")["entropy"]
    for example, length in enumerate(trace.encoded.lengths):
        for layer in range(2):
            rows = trace[f"blocks.{layer}.attn.hook_pattern"][example, :, :length, :length].double().numpy()
            sink = 1.0 - rows.sum(-1, keepdims=True)
            outcomes = np.concatenate([rows, sink], axis=-1)
            plain = -(outcomes * np.log(np.where(outcomes > 0, outcomes, 1.0))).sum(-1).mean(-1)
            np.testing.assert_allclose(entropy[example, layer], plain, atol=1e-9, rtol=0)


def test_explain_runs_its_defaults_on_a_model_with_sinks(tmp_path) -> None:
    model = sink_model("gpt_oss")
    report = interpret.explain(model, word_tokenizer(), TEXTS[:2])
    assert set(report.run.analyzers) >= {"rollout", "attention_entropy"}
    path = tmp_path / "gpt_oss.html"
    report.render(path)
    assert "attention_entropy" in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", list(SINK_MODELS))
def test_streamed_analyzers_restate_the_sinks_and_the_window(name: str, tmp_path) -> None:
    """Each row's sink share and each layer's sliding window and scale, kept in the trace's meta, are restated by the
    streamed computations: they equal the analyzers over the full patterns (rollout, by every method and head
    fusion, and entropy) on an input longer than the window; a trace saved and loaded keeps them."""
    model, tokenizer = sink_model(name), word_tokenizer()
    trace = interpret.collect(model, tokenizer, [LONG, TEXTS[1]], names=["*attn.hook_pattern", *REQUIRES])
    assert trace.meta.windows in ((4, 0), (0, 4)) and len(trace.meta.sink_logits) == 2
    assert load_trace(save_trace(trace, tmp_path / "t.safetensors")).meta == trace.meta
    for head_fusion in ("mean", "max"):
        full = interpret.analyze(trace, "rollout", params={"head_fusion": head_fusion, "rows": "all"})
        for method in ("auto", "blocks") + (("fused",) if head_fusion == "mean" else ()):
            streamed = interpret.analyze(trace, "rollout", strategy="streamed", model=model, tokenizer=tokenizer,
                                         params={"head_fusion": head_fusion, "method": method, "block_mib": 1})
            assert np.abs(streamed["readout"] - full["readout"]).max() <= STREAMED, (head_fusion, method)
            assert streamed.checks["lse_error"].value <= 1e-6
    full = interpret.analyze(trace, "attention_entropy")
    streamed = interpret.analyze(trace, "attention_entropy", strategy="streamed")
    for array in ("entropy", "special_attention"):
        assert np.abs(streamed[array] - full[array]).max() <= STREAMED, array
    assert streamed.checks["lse_error"].value <= 1e-6


def test_explain_streams_a_model_with_sinks() -> None:
    model, tokenizer = sink_model("gpt_oss"), word_tokenizer()
    reports = {streaming: interpret.explain(model, tokenizer, [LONG], ["rollout"], evidence=False,
                                            limits=Limits(streaming=streaming))
               for streaming in ("on", "off")}
    results = {streaming: {section.result.analyzer: section.result for section in report.sections
                           if section.kind == "analyzer"} for streaming, report in reports.items()}
    assert reports["on"].run.attention == "streamed" and results["on"]["rollout"].strategy == "streamed"
    assert np.abs(results["on"]["rollout"]["readout"] - results["off"]["rollout"]["readout"]).max() <= STREAMED
