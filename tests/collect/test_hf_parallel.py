"""XLM and FlauBERT through the `parallel` adapter: layers kept as parallel lists (`attentions`, `layer_norm1`,
`ffns`, `layer_norm2`) read as blocks.

References are independent of the capture: the eager model's own `output_attentions` and `hidden_states`; the
layer's own equations stated with the model's own modules (x = layer_norm1(x + attention), then
layer_norm2(x + ffn(x))); the same text run alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from click.testing import CliRunner
from hf_tiny import TEXTS, built_with, model_inputs, word_tokenizer

import interpret
from interpret.capture.api import capturable_for
from interpret.cli.main import cli
from interpret.errors import UnsupportedModelError

TIGHT = 1e-6


def _config(cls: Any, **extra: Any) -> Any:
    return cls(vocab_size=len(word_tokenizer()), emb_dim=32, n_layers=2, n_heads=4, max_position_embeddings=64,
               pad_index=0, bos_index=2, eos_index=3, **extra)


MODELS: dict[str, Callable[[], Any]] = {
    "xlm": lambda: T.XLMWithLMHeadModel(_config(T.XLMConfig)),  # a masked language model
    "xlm-causal": lambda: T.XLMWithLMHeadModel(_config(T.XLMConfig, causal=True)),  # XLM's CLM checkpoints
    "flaubert": lambda: T.FlaubertWithLMHeadModel(_config(T.FlaubertConfig)),
    "xlm-classifier": lambda: T.XLMForSequenceClassification(_config(T.XLMConfig, num_labels=3)),
}


def _holder(model: Any) -> Any:
    return model.transformer


@pytest.mark.parametrize("name", list(MODELS))
def test_patterns_and_every_hook_equal_the_models_own_numbers(name: str) -> None:
    model = built_with(MODELS[name], "eager")
    trace = interpret.collect(model, word_tokenizer(), TEXTS, names="*")
    encoded = trace.encoded
    assert capturable_for(model).adapter == "parallel" and trace.meta.n_layers == 2
    assert encoded.padding.any()
    with torch.no_grad():
        output = model(**model_inputs(encoded), output_attentions=True, output_hidden_states=True)
    assert torch.equal(trace.output.logits, output.logits)
    mask = encoded.attention_mask.bool()
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    if name == "xlm-causal":
        keep = keep & torch.ones(encoded.pos, encoded.pos, dtype=torch.bool).tril()
    real = mask[..., None]
    lists = _holder(model)
    for layer, attention in enumerate(output.attentions):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"]
        torch.testing.assert_close(pattern, attention.masked_fill(~keep, 0), atol=TIGHT, rtol=0)
        pre, post = trace[f"blocks.{layer}.hook_resid_pre"], trace[f"blocks.{layer}.hook_resid_post"]
        torch.testing.assert_close(pre * real, output.hidden_states[layer] * real, atol=TIGHT, rtol=0)
        torch.testing.assert_close(post * real, output.hidden_states[layer + 1] * real, atol=TIGHT, rtol=0)
        # The layer's equations, with the model's own modules.
        attn_out, normed = trace[f"blocks.{layer}.hook_attn_out"], trace[f"blocks.{layer}.ln2.hook_normalized"]
        mlp_out = trace[f"blocks.{layer}.hook_mlp_out"]
        with torch.no_grad():
            torch.testing.assert_close(normed, lists.layer_norm1[layer](pre + attn_out), atol=1e-5, rtol=0)
            torch.testing.assert_close(mlp_out, lists.ffns[layer](normed), atol=1e-5, rtol=0)
            torch.testing.assert_close(post, lists.layer_norm2[layer](normed + mlp_out), atol=1e-5, rtol=0)
            hidden = lists.ffns[layer].lin1(normed)
            post_act = lists.ffns[layer].act(hidden)
        torch.testing.assert_close(trace[f"blocks.{layer}.mlp.hook_post"], post_act, atol=1e-5, rtol=0)
        z, v = trace[f"blocks.{layer}.attn.hook_z"], trace[f"blocks.{layer}.attn.hook_v"]
        torch.testing.assert_close(z * real[..., None], torch.einsum("bhqk,bkhd->bqhd", pattern, v) * real[..., None],
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["xlm", "flaubert"])
def test_a_padded_text_gets_what_it_gets_alone(name: str) -> None:
    model = built_with(MODELS[name], "eager")
    both = interpret.collect(model, word_tokenizer(), TEXTS)
    alone = interpret.collect(model, word_tokenizer(), [TEXTS[1]])
    real = alone.encoded.pos
    for key in both.names():
        torch.testing.assert_close(both[key][1, :, :real, :real], alone[key][0], atol=1e-5, rtol=0)


def test_rollout_a_report_and_the_listing(tmp_path, monkeypatch) -> None:
    model = built_with(MODELS["xlm-classifier"], "eager")
    trace = interpret.collect(model, word_tokenizer(), TEXTS)
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert np.isfinite(rollout).all() and (rollout >= 0).all()
    report = interpret.explain(model, word_tokenizer(), TEXTS, analyzers=["rollout", "attention_entropy"])
    report.render(tmp_path / "xlm.html")
    assert "cat" in (tmp_path / "xlm.html").read_text(encoding="utf-8")
    assert report.evidence is not None  # text: token-removal evidence runs

    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["models", "xlm", "flaubert", "--format", "json"])
    assert result.exit_code == 0, result.output
    for row in json.loads(result.stdout):
        assert (row["status"], row["adapter"], row["kind"]) == ("supported", "parallel", "encoder"), row
        assert "blocks.{i}.attn.hook_pattern" in row["offered"] and "blocks.{i}.ln1.hook_normalized" in row["missing"]


def test_pre_norm_flaubert_is_refused_in_one_line() -> None:
    model = built_with(lambda: T.FlaubertModel(_config(T.FlaubertConfig, pre_norm=True)), "eager")
    with pytest.raises(UnsupportedModelError, match="pre_norm=True") as err:
        capturable_for(model)
    assert "\n" not in str(err.value)
