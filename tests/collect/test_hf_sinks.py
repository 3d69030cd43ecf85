"""Attention sinks: a learnable per-head logit in every row's softmax denominator that holds no value (gpt-oss,
Granite SWA, HunYuan V4, DeepSeek V4, MiMo-V2-Flash, ...). A row's probabilities then sum to less than one, and
the pattern is what weights the values: restated from the kernel's scores and its sink (`recompute.sink_logits`),
whatever the kernel returns as its weights.

The reference is independent of that restatement: the pattern times the values equals the kernel's own output
(`hook_z`, the output projection's input), and where the eager kernel returns the weights it applied (gpt-oss),
the pattern equals them. Granite SWA's eager kernel returns its weights normalised without the sink and scales
its output afterwards: there the pattern is the weights it applied, not the ones it returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import TEXTS, built_with, eager_copy, word_tokenizer

import interpret
from interpret.capture.hf.generic import PROBE_TOKENS
from interpret.errors import AnalyzerError, MemoryBudgetError
from interpret.files.trace_io import load_trace, save_trace
from interpret.request import Limits

TIGHT = 1e-6
OUTPUT = 1e-5  # pattern · values against the kernel's output, both float32 sums of the same products


def _sizes() -> dict[str, Any]:
    return {"vocab_size": len(word_tokenizer()), "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "pad_token_id": 0}


def _gpt_oss() -> Any:
    return T.GptOssForCausalLM(T.GptOssConfig(**_sizes(), head_dim=8, num_local_experts=4, num_experts_per_tok=2,
                                              layer_types=["sliding_attention", "full_attention"], sliding_window=4))


def _granite_swa() -> Any:
    return T.GraniteSWAForCausalLM(T.GraniteSWAConfig(**_sizes(), sliding_window=4,
                                                      layer_types=["full_attention", "sliding_attention"],
                                                      layer_rope_theta=[10000.0, 10000.0]))


MODELS = {"gpt_oss": _gpt_oss, "granite_swa": _granite_swa}


def _with_sinks(model: Any) -> Any:
    """Give every sink a value far from zero, so that each row's share on it is large (the default is 0 or random
    near it), and return the model."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(torch.linspace(-1.0, 2.0, layer.self_attn.sinks.numel()))
    return model


@pytest.mark.parametrize("name", list(MODELS))
def test_the_pattern_is_what_weights_the_values_and_sums_to_less_than_one(name: str) -> None:
    model = _with_sinks(built_with(MODELS[name], "eager"))
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
    model = _with_sinks(built_with(_gpt_oss, "eager"))
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
    model = _with_sinks(built_with(_gpt_oss, "eager"))
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
    model = _with_sinks(built_with(_gpt_oss, "eager"))
    report = interpret.explain(model, word_tokenizer(), TEXTS[:2])
    assert set(report.run.analyzers) >= {"rollout", "attention_entropy"}
    path = tmp_path / "gpt_oss.html"
    report.render(path)
    assert "attention_entropy" in path.read_text(encoding="utf-8")


def test_streaming_is_refused_before_the_model_runs_on_attention_with_sinks() -> None:
    """q and k do not hold a row's sink: the streamed analyzers refuse such a model before its forward pass
    (streaming on) or, where the full capture is over the budget, say so in its place (streaming auto)."""
    model, tokenizer = _with_sinks(built_with(_gpt_oss, "eager")), word_tokenizer()
    lengths = []  # of each forward pass: the adapter's structure probe (3 positions) may run, the input may not
    model.register_forward_pre_hook(lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[-1]),
                                    with_kwargs=True)
    with pytest.raises(AnalyzerError, match=r"^rollout streams attention restated from q and k, and this model's"
                       r" attention has sinks .* run it on the full strategy"):
        interpret.explain(model, tokenizer, TEXTS[:1], ["rollout"], limits=Limits(streaming="on"), evidence=False)
    assert set(lengths) <= {PROBE_TOKENS}
    with pytest.raises(MemoryBudgetError, match=r"and this model's attention has sinks .* raise the capture budget"):
        interpret.explain(model, tokenizer, TEXTS[:1], ["rollout"], limits=Limits(capture_bytes=1), evidence=False)
    trace = interpret.collect(model, tokenizer, TEXTS[:1], names=["*attn.hook_q", "*attn.hook_k", "*attn.hook_lse"])
    with pytest.raises(AnalyzerError, match="attention_entropy streams attention restated from q and k"):
        interpret.analyze(trace, "attention_entropy", strategy="streamed")
