"""Every Hugging Face family, loaded with eager and with SDPA: the true pattern, transparent capture, names,
memory estimate, padding, and no hook or kernel patch left behind."""

from __future__ import annotations

import math

import pytest
import torch
from hf_tiny import FAMILIES, collect_args, eager_patterns, model_inputs, no_cache, save_tiny
from transformers.modeling_utils import AttentionInterface

import interpret
from interpret.errors import HookNameError, MemoryBudgetError
from interpret.hooks import count_hooks
from interpret.models.loading import load


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """Return get(family, attn_implementation) -> (model, tokenizer), each saved and loaded once."""
    paths, loaded = {}, {}

    def get(family: str, implementation: str):
        if family not in paths:
            paths[family] = save_tiny(family, tmp_path_factory.mktemp(family))
        if (family, implementation) not in loaded:
            loaded[family, implementation] = load(paths[family], attn_implementation=implementation)
        return loaded[family, implementation]

    return get


@pytest.mark.parametrize("single", [False, True], ids=["padded-batch", "one-unpadded"])
@pytest.mark.parametrize("family", FAMILIES)
def test_sdpa_pattern_equals_eager_output_attentions(zoo, family, single) -> None:
    sdpa, tokenizer = zoo(family, "sdpa")
    eager, _ = zoo(family, "eager")
    assert sdpa.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    inputs, extra = collect_args(family, single)
    trace = interpret.collect(sdpa, tokenizer, inputs, **extra)
    expected = eager_patterns(eager, trace.encoded)
    assert sorted(trace.names()) == sorted(expected)
    for name, pattern in expected.items():
        assert trace[name].dtype == torch.float32
        torch.testing.assert_close(trace[name], pattern, atol=1e-5, rtol=0)
    assert trace.meta.attention == "recomputed"
    if not single:
        assert interpret.collect(eager, tokenizer, inputs, **extra).meta.attention == "eager"


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("family", FAMILIES)
def test_capture_of_every_name_is_transparent_and_sized_as_declared(zoo, family, implementation) -> None:
    model, tokenizer = zoo(family, implementation)
    inputs, extra = collect_args(family)
    hooks_before = count_hooks(model)
    lookup_before = AttentionInterface.__dict__["get_interface"]
    trace = interpret.collect(model, tokenizer, inputs, names="*", **extra)
    with torch.no_grad():
        # collect runs decoders without a key/value cache; so must the reference forward, since with a cache
        # the eager matmul gets contiguous tensors instead of transposed views and differs by a few ULPs.
        plain = model(**model_inputs(trace.encoded), **no_cache(model))
    assert torch.equal(trace.output.logits, plain.logits)
    assert count_hooks(model) == hooks_before
    assert AttentionInterface.__dict__["get_interface"] is lookup_before
    assert model.config._attn_implementation == implementation
    held = sum(tensor.numel() * tensor.element_size() for tensor in trace.tensors.values())
    assert trace.meta.capture_bytes == held
    _assert_declared_shapes(trace)
    for name in trace.names("*hook_pattern"):
        pattern, scores = trace[name], trace[name.replace("hook_pattern", "hook_attn_scores")]
        real_rows = pattern.sum(-1) > 0.5  # padded query rows are zeroed in the pattern only
        torch.testing.assert_close(scores.softmax(-1)[real_rows], pattern[real_rows], atol=1e-5, rtol=0)
        lse_name = name.replace("hook_pattern", "hook_lse")
        if lse_name in trace:  # the kernel's own normaliser (or the restated one) is the scores' log-sum-exp
            expected = torch.logsumexp(scores.double(), -1)[real_rows]
            torch.testing.assert_close(trace[lse_name].double()[real_rows], expected, atol=1e-5, rtol=1e-6)


def _assert_declared_shapes(trace) -> None:
    encoded = trace.encoded
    batch, pos = encoded.batch, encoded.pos
    dec_pos = encoded.decoder.pos if encoded.decoder is not None else None
    for name in trace.names():
        tensor = trace[name]
        query = dec_pos if name.startswith("decoder.") else pos
        if name.endswith(("hook_pattern", "hook_attn_scores")):
            key = pos if ".cross_attn." in name else query
            assert tensor.shape == (batch, 4, query, key), name
        elif name.endswith("hook_lse"):
            assert tensor.shape == (batch, 4, query), name
        elif ".cross_attn.hook_k" in name or ".cross_attn.hook_v" in name:
            assert tensor.shape == (batch, pos, 4, 8), name
        elif name.endswith(("hook_q", "hook_k", "hook_v", "hook_z")):
            assert tensor.shape == (batch, query, 4, 8), name
        elif name.endswith("mlp.hook_post"):
            assert tensor.shape == (batch, query, 64), name
        else:
            assert tensor.shape == (batch, query, 32), name


@pytest.mark.parametrize("family", FAMILIES)
def test_errors_leave_nothing_behind_and_unknown_names_list_what_exists(zoo, family) -> None:
    model, tokenizer = zoo(family, "sdpa")
    inputs, extra = collect_args(family)
    interpret.collect(model, tokenizer, inputs, **extra)  # the adapter's probe pass runs before the hook below
    hooks_before = count_hooks(model)
    lookup_before = AttentionInterface.__dict__["get_interface"]

    def boom(module, args, output):
        raise RuntimeError("boom after the attention ran")

    last_linear = [module for module in model.modules() if isinstance(module, torch.nn.Linear)][-1]
    handle = last_linear.register_forward_hook(boom)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            interpret.collect(model, tokenizer, inputs, **extra)
    finally:
        handle.remove()
    assert count_hooks(model) == hooks_before
    assert AttentionInterface.__dict__["get_interface"] is lookup_before

    with pytest.raises(HookNameError) as err:
        interpret.collect(model, tokenizer, inputs, layers=[2], **extra)
    assert "\n" not in str(err.value) and "0..1" in str(err.value)
    with pytest.raises(HookNameError) as err:
        interpret.collect(model, tokenizer, inputs, names="blocks.*.attn.hook_patern", **extra)
    message = str(err.value)
    assert "\n" not in message and "Did you mean" in message and "blocks.{i}.attn.hook_pattern" in message
    assert count_hooks(model) == hooks_before


@pytest.mark.parametrize("family", ["bert", "llama", "t5", "vit"])
def test_capture_above_the_budget_is_refused_with_suggestions(zoo, family) -> None:
    model, tokenizer = zoo(family, "sdpa")
    inputs, extra = collect_args(family)
    hooks_before = count_hooks(model)
    with pytest.raises(MemoryBudgetError) as err:
        interpret.collect(model, tokenizer, inputs, names="*", budget_bytes=1024, **extra)
    message = str(err.value)
    assert "\n" not in message and "reduce=" in message and "layers=" in message
    assert count_hooks(model) == hooks_before


@pytest.mark.parametrize("family", ["bert", "gpt2", "t5", "bart"])
def test_padding_is_masked_out_of_every_pattern(zoo, family) -> None:
    model, tokenizer = zoo(family, "sdpa")
    inputs, extra = collect_args(family)
    trace = interpret.collect(model, tokenizer, inputs, **extra)
    encoded = trace.encoded
    assert encoded.padding.any()
    for name in trace.names():
        query_mask = encoded.decoder.attention_mask if name.startswith("decoder.") else encoded.attention_mask
        key_mask = encoded.attention_mask if ".cross_attn." in name or not name.startswith("decoder.") else query_mask
        pattern = trace[name]
        assert (pattern.masked_select(~query_mask.bool()[:, None, :, None].expand_as(pattern)) == 0).all()
        assert (pattern.masked_select(~key_mask.bool()[:, None, None, :].expand_as(pattern)) == 0).all()
        rows = pattern.sum(-1)[query_mask.bool()[:, None, :].expand(-1, pattern.shape[1], -1)]
        torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)


def test_llama_pattern_comes_from_the_rotated_query_and_key(zoo) -> None:
    model, tokenizer = zoo("llama", "sdpa")
    inputs, _ = collect_args("llama", single=True)
    layer = 1
    names = [f"blocks.{layer}.attn.hook_{hook}" for hook in ("q", "k", "pattern")]
    trace = interpret.collect(model, tokenizer, inputs, names=names)
    query, key = trace[names[0]].transpose(1, 2), trace[names[1]].transpose(1, 2)  # [batch, head, pos, d_head]
    pos = query.shape[2]
    causal = torch.ones(pos, pos, dtype=torch.bool).tril()
    scores = (query @ key.transpose(-1, -2)) / math.sqrt(query.shape[-1])
    torch.testing.assert_close(trace[names[2]], scores.masked_fill(~causal, -torch.inf).softmax(-1), atol=1e-5, rtol=0)
    # Heads 0 and 1 share key/value head 0 under grouped-query attention.
    assert torch.equal(trace[names[1]][:, :, 0], trace[names[1]][:, :, 1])
    # Projections taken before the rotary embedding do not give the pattern.
    projections = interpret.collect(model, tokenizer, inputs, names=[f"blocks.{layer}.hook_resid_pre"])
    attention = model.model.layers[layer]
    with torch.no_grad():
        normed = attention.input_layernorm(projections[f"blocks.{layer}.hook_resid_pre"])
        raw_query = attention.self_attn.q_proj(normed).view(1, pos, 4, 8).transpose(1, 2)
        raw_key = attention.self_attn.k_proj(normed).view(1, pos, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
    unrotated = (raw_query @ raw_key.transpose(-1, -2) / math.sqrt(8)).masked_fill(~causal, -torch.inf).softmax(-1)
    assert not torch.allclose(unrotated, trace[names[2]], atol=1e-3)


def test_heads_and_reduce_apply_inside_the_hook(zoo) -> None:
    model, tokenizer = zoo("llama", "sdpa")
    inputs, _ = collect_args("llama")
    full = interpret.collect(model, tokenizer, inputs)
    picked = interpret.collect(model, tokenizer, inputs, heads=[2, 0])
    reduced = interpret.collect(model, tokenizer, inputs, reduce="max")
    for name in full.names():
        assert torch.equal(picked[name], full[name][:, [2, 0]])
        assert torch.equal(reduced[name], full[name].amax(dim=1, keepdim=True))
    assert picked.meta.heads == (2, 0) and reduced.meta.reduce == "max"


def test_half_precision_model_gives_float32_patterns_and_an_exact_estimate(tmp_path) -> None:
    path = save_tiny("gpt2", tmp_path)
    model, tokenizer = load(path, dtype="bfloat16")
    inputs, _ = collect_args("gpt2")
    trace = interpret.collect(model, tokenizer, inputs, names=["*hook_pattern", "*hook_z"])
    assert trace["blocks.0.attn.hook_pattern"].dtype == torch.float32
    assert trace["blocks.0.attn.hook_z"].dtype == torch.bfloat16
    held = sum(tensor.numel() * tensor.element_size() for tensor in trace.tensors.values())
    assert trace.meta.capture_bytes == held
