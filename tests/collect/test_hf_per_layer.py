"""Blocks that differ from layer to layer, and blocks that do more than attention and one MLP.

- Gemma 4: its global layers have heads twice as wide as its sliding-window layers (`per_layer_config`), so the
  stack's layout holds each block's head sizes (`StackLayout.block_heads`): patterns are [batch, head, query,
  key] in every layer, and hook_q/k/v/z have each block's own head size. After its MLP a Gemma 4 block adds a
  per-layer input through a gate and a projection: that branch is not the MLP, so `mlp.hook_post` and
  `hook_mlp_out` are the MLP module's own.
- HunYuan V4: a dense first block under mixture-of-experts blocks, so the module whose output is the MLP's
  contribution differs by block (`StackLayout.block_mlp_out`).
- Gemma 3n: its blocks pass the residual stream as several AltUp predictions at once, [predictions, batch, pos,
  d_model], so the residual hook points are refused with that reason, as are the MLP's (the block runs the MLP,
  AltUp's correction and the per-layer input after its attention), while the attention is captured.

Each is captured equal to the eager model's own `output_attentions`, and leaves the output untouched.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import TEXTS, built_with, eager_copy, eager_patterns, model_inputs, no_cache, word_tokenizer

import interpret
from interpret.capture.hf import catalog
from interpret.errors import HookNameError

TIGHT = 1e-6  # the eager kernel's own weights, read as they are
# Under SDPA the pattern is recomputed from q and k in float32. Gemma 4 normalises q and k and scales their
# product by 1, not 1/√d_head, so its scores are √d_head times larger than most families' and their float32
# rounding too: the bound for item 4, 1e-5, holds them (the largest seen is 1.0e-6).
RECOMPUTED = 1e-5
WIDE = 2  # the global layer of the tiny Gemma 4 (sliding, sliding, global)


def _gemma4() -> Any:
    vocab = len(word_tokenizer())
    return T.Gemma4TextModel(T.Gemma4TextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=32, hidden_size_per_layer_input=8,
        intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], sliding_window=4,
        per_layer_config={str(WIDE): {"head_dim": 16}}, max_position_embeddings=64, pad_token_id=0))


def _gemma4_moe_shared() -> Any:
    """A Gemma 4 with what its larger releases add: layers that reuse an earlier layer's keys and values
    (`num_kv_shared_layers`), keys that are the values (`attention_k_eq_v`), and experts beside the MLP."""
    vocab = len(word_tokenizer())
    return T.Gemma4TextModel(T.Gemma4TextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=32, hidden_size_per_layer_input=8,
        intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        layer_types=["sliding_attention", "full_attention"] * 2, sliding_window=4,
        per_layer_config={"1": {"head_dim": 16}, "3": {"head_dim": 16}}, max_position_embeddings=64, pad_token_id=0,
        num_kv_shared_layers=2, attention_k_eq_v=True, enable_moe_block=True, num_experts=4, top_k_experts=2,
        moe_intermediate_size=16))


def _gemma3n() -> Any:
    vocab = len(word_tokenizer())
    return T.Gemma3nTextModel(T.Gemma3nTextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=32, hidden_size_per_layer_input=8,
        intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        layer_types=["sliding_attention", "full_attention"], activation_sparsity_pattern=[0.0, 0.0],
        num_kv_shared_layers=0, sliding_window=4, laurel_rank=4, altup_num_inputs=2, max_position_embeddings=64,
        pad_token_id=0))


def _equal_to_eager(model: Any, trace: Any) -> None:
    tolerance = TIGHT if trace.meta.attention == "eager" else RECOMPUTED
    with torch.no_grad():
        plain = model(**model_inputs(trace.encoded), **no_cache(model))
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    reference = eager_patterns(eager_copy(model), trace.encoded)
    assert len(reference) == trace.meta.n_layers
    for hook, expected in reference.items():
        torch.testing.assert_close(trace[hook], expected, atol=tolerance, rtol=0)


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_gemma4_layers_with_wider_heads_are_captured_with_their_own_head_size(kernel: str) -> None:
    model = built_with(_gemma4, kernel)
    mlp_outputs: list[torch.Tensor] = []
    handles = [layer.mlp.register_forward_hook(lambda module, args, output: mlp_outputs.append(output))
               for layer in model.layers]
    try:
        trace = interpret.collect(model, word_tokenizer(), TEXTS, names="*")
    finally:
        for handle in handles:
            handle.remove()
    _equal_to_eager(model, trace)
    mlp_outputs = mlp_outputs[-3:]  # the captured pass's (the structure's probe pass ran first)
    batch, pos = trace.encoded.input_ids.shape
    for layer in range(3):
        d_head = 16 if layer == WIDE else 8
        for hook in ("hook_q", "hook_k", "hook_v", "hook_z"):
            assert tuple(trace[f"blocks.{layer}.attn.{hook}"].shape) == (batch, pos, 4, d_head), (layer, hook)
        assert tuple(trace[f"blocks.{layer}.attn.hook_pattern"].shape) == (batch, 4, pos, pos)
        # the MLP is the `mlp` module, not the per-layer-input branch after it
        torch.testing.assert_close(trace[f"blocks.{layer}.hook_mlp_out"], mlp_outputs[layer], atol=0, rtol=0)
        assert trace[f"blocks.{layer}.mlp.hook_post"].shape[-1] == 64
    assert trace.stack("attn.hook_pattern").shape == (batch, 3, 4, pos, pos)


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_gemma4_with_shared_keys_and_experts_is_captured_and_refuses_the_mlp_hooks(kernel: str) -> None:
    model = built_with(_gemma4_moe_shared, kernel)
    trace = interpret.collect(model, word_tokenizer(), TEXTS, names="*")
    _equal_to_eager(model, trace)
    assert trace["blocks.3.attn.hook_k"].shape[-1] == 16 and trace["blocks.2.attn.hook_k"].shape[-1] == 8
    refused = interpret.capture.api.capturable_for(model, word_tokenizer()).unsupported
    assert "(mlp, router, experts, per_layer_input_gate, per_layer_projection)" in refused["blocks.0.hook_mlp_out"]


def test_gemma4_runs_rollout_and_a_report(tmp_path) -> None:
    model = built_with(_gemma4, "eager")
    trace = interpret.collect(model, word_tokenizer(), TEXTS)
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape[0] == 2 and np.isfinite(rollout).all() and (rollout >= 0).all()
    report = interpret.explain(model, word_tokenizer(), TEXTS, analyzers=["rollout"])
    report.render(tmp_path / "gemma4.html")
    assert (tmp_path / "gemma4.html").read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html>")


def test_gemma3n_refuses_the_residual_and_mlp_hook_points_and_captures_the_attention() -> None:
    model = built_with(_gemma3n, "eager")
    capturable = interpret.capture.api.capturable_for(model, word_tokenizer())
    for hook in ("hook_embed", "blocks.0.hook_resid_pre", "blocks.1.hook_resid_post"):
        assert "[2, 1, 3, 32], not [batch, pos, d_model]" in capturable.unsupported[hook]
    for hook in ("blocks.0.hook_mlp_out", "blocks.0.mlp.hook_post"):
        assert "more than one branch after its attention (mlp, altup" in capturable.unsupported[hook]
    with pytest.raises(HookNameError, match="hook_resid_pre"):
        interpret.collect(model, word_tokenizer(), TEXTS, names=["blocks.0.hook_resid_pre"])
    trace = interpret.collect(model, word_tokenizer(), TEXTS, names="*")
    assert not trace.names("*resid*") and not trace.names("*mlp*")
    _equal_to_eager(model, trace)


def _hy_v4() -> Any:
    """A HunYuan V4 whose first block has a dense MLP and the others a mixture of experts (with a shared expert),
    its residual stream in two hyper-connection streams, its attention with sinks."""
    return T.HYV4Model(T.HYV4Config(
        vocab_size=len(word_tokenizer()), hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, head_dim=8, n_routed_experts=4,
        n_shared_experts=1, num_experts_per_tok=2, q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=8, mlp_layer_types=["dense", "sparse", "sparse"],
        layer_types=["indexed_attention"] * 3, index_topk=4, index_head_dim=8, index_n_heads=2,
        indexer_types=["full", "shared", "full"], max_position_embeddings=64, pad_token_id=0, hc_mult=2))


def test_blocks_whose_mlp_differs_each_offer_their_own_mlp_output() -> None:
    """HunYuan V4's first block runs a dense MLP (its output: the down projection's), the others a mixture of
    experts (the MoE module's output): `hook_mlp_out` is each block's own MLP output; `mlp.hook_post` only the
    dense block's."""
    model = built_with(_hy_v4, "eager")
    assert type(model.layers[0].mlp).__name__ == "HYV4MLP" and type(model.layers[1].mlp).__name__ == "HYV4MoE"
    trace = interpret.collect(model, word_tokenizer(), TEXTS[:2], names="*")
    outputs: dict[int, torch.Tensor] = {}
    handles = [model.layers[i].mlp.register_forward_hook(lambda _m, _a, out, i=i: outputs.__setitem__(i, out))
               for i in range(3)]
    try:
        with torch.no_grad():
            reference = eager_copy(model)(**model_inputs(trace.encoded), output_attentions=True).attentions
            model(**model_inputs(trace.encoded))
    finally:
        for handle in handles:
            handle.remove()
    for i in range(3):
        torch.testing.assert_close(trace[f"blocks.{i}.hook_mlp_out"], outputs[i], atol=0, rtol=0)
        mask = trace.encoded.attention_mask.bool()
        keep = mask[:, None, :, None] & mask[:, None, None, :]
        torch.testing.assert_close(trace[f"blocks.{i}.attn.hook_pattern"], reference[i].float().masked_fill(~keep, 0),
                                   atol=TIGHT, rtol=0)
    assert trace.names("blocks.*.mlp.hook_post") == ["blocks.0.mlp.hook_post"]
    with pytest.raises(HookNameError, match="Mixture-of-Experts"):
        interpret.collect(model, word_tokenizer(), TEXTS[:2], names=["blocks.1.mlp.hook_post"])


@pytest.mark.parametrize(("model_type", "offered", "refused"), [
    ("gemma4_text", "blocks.{i}.hook_mlp_out", ""),
    ("gemma4", "blocks.{i}.attn.hook_z", ""),
    ("gemma3n_text", "blocks.{i}.attn.hook_pattern", "blocks.{i}.hook_resid_pre"),
    # hyper-connections: the residual stream is [batch, pos, streams, d_model]
    ("deepseek_v4", "blocks.{i}.attn.hook_pattern", "blocks.{i}.hook_resid_pre"),
    # a Conformer block runs a convolution module and a second feed-forward after its attention
    ("parakeet_ctc", "blocks.{i}.attn.hook_pattern", "blocks.{i}.hook_mlp_out"),
    # a dense first block under mixture-of-experts blocks: each block's own MLP output
    ("hy_v4", "blocks.{i}.hook_mlp_out", "blocks.{i}.hook_resid_pre"),
    ("axk2", "blocks.{i}.attn.hook_pattern", ""),
])
def test_interpret_models_says_what_each_offers(model_type: str, offered: str, refused: str) -> None:
    row = catalog.describe(model_type)
    assert row.status == "supported" and offered in row.offered, row
    assert not refused or refused in row.missing
