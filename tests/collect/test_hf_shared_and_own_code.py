"""The last kinds of family: a model that runs one layer module for several layers (ALBERT) is captured per call,
and a model whose attention is computed in the module's own code (MPNet, Falcon with rotary or alibi positions,
BLOOM) is captured from the torch calls that module makes; a model that skips some of its blocks on its input
(Llama 3.2 Vision's cross-attention layers, on text) is captured over the blocks that run, and a pass that runs
a skipped block is refused.

References are independent of the capture: the eager model's own `output_attentions`; per call, what plain
forward hooks of the test see at each call of the shared modules; the module's own output z, which the
captured pattern times the captured values must give (the pattern is what the module applied, position bias,
alibi and SDPA call included); MPNet's scores restated from its projections and its encoder's position bias;
∂score/∂pattern from autograd through the eager model's own attention weights. The family matrix
(test_hf_matrix.py) runs the common checks (rollout, a report, padding, gates, the CLI) on ALBERT, MPNet and Falcon.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from click.testing import CliRunner
import shipped_tokenizers as shipped
from hf_tiny import TEXTS, eager_copy, eager_patterns, model_inputs, word_tokenizer
from transformers.modeling_utils import AttentionInterface

import interpret
from interpret.capture.api import capturable_for
from interpret.capture.engine import capture, select_sites
from interpret.capture.gates import head_gates
from interpret.capture.hf import catalog
from interpret.capture.hf.own_code import OwnAttention
from interpret.capture.api import prepare
from interpret.cli.main import cli
from interpret.errors import CaptureError
from interpret.hooks import count_hooks

TIGHT = 1e-6


def _albert(vocab: int, **tokens: Any) -> Any:
    # Three layer calls of a group of two layers: six layers from two layer modules, called three times each.
    return T.AlbertForMaskedLM(T.AlbertConfig(vocab_size=vocab, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                                              inner_group_num=2, num_attention_heads=4, intermediate_size=64,
                                              max_position_embeddings=64, **tokens))


def _mpnet(vocab: int, **tokens: Any) -> Any:
    return T.MPNetForMaskedLM(T.MPNetConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=64, max_position_embeddings=66, **tokens))


def _falcon(**extra: Any) -> Callable[..., Any]:
    return lambda vocab, **tokens: T.FalconForCausalLM(T.FalconConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
        **tokens, **extra))


def _bloom(vocab: int, **tokens: Any) -> Any:
    return T.BloomForCausalLM(T.BloomConfig(vocab_size=vocab, hidden_size=32, n_layer=2, n_head=4, **tokens))


def _ibert(vocab: int, **tokens: Any) -> Any:
    # I-BERT outside quant mode: its softmax runs inside IntSoftmax, a parameterless wrapper module, so the
    # attention is owned by the self-attention module that made the products.
    return T.IBertForMaskedLM(T.IBertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=64, max_position_embeddings=66, **tokens))


# name -> (model builder, its kernels)
MODELS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "albert": (_albert, ("sdpa", "eager")),
    "mpnet": (_mpnet, ("eager",)),
    "falcon": (_falcon(), ("sdpa", "eager")),  # Falcon-7B: rotary, multi-query, parallel attention and MLP
    "falcon-alibi": (_falcon(alibi=True, multi_query=False, parallel_attn=False), ("sdpa", "eager")),  # Falcon-RW
    "falcon-40b": (_falcon(new_decoder_architecture=True, num_kv_heads=2), ("sdpa", "eager")),  # grouped-query
    "bloom": (_bloom, ("eager",)),  # alibi added by baddbmm on [batch · head, query, key]
    "ibert": (_ibert, ("eager",)),
}
RUNS = [(name, kernel) for name, (_, kernels) in MODELS.items() for kernel in kernels]


def _model(name: str, kernel: str) -> tuple[Any, Any]:
    """Return the tiny model `name` loaded with `kernel`, and its tokenizer: MPNet's numbers positions after its
    padding id 1, as MPNet's own tokenizer pads; the others take the word-level tokenizer."""
    tokenizer = shipped.mpnet((*shipped.CORPUS, *TEXTS)) if name == "mpnet" else word_tokenizer()
    torch.manual_seed(0)
    model = MODELS[name][0](len(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
                            eos_token_id=tokenizer.sep_token_id)
    model.config._attn_implementation = kernel
    return model.eval(), tokenizer



def _no_cache(model: Any) -> dict[str, bool]:
    return {"use_cache": False} if "falcon" in type(model).__name__.lower() or "bloom" in type(model).__name__.lower() else {}


def _real(encoded: Any) -> torch.Tensor:
    """Return [batch, 1, query, key]: True where query and key are both real tokens."""
    mask = encoded.attention_mask.bool()
    return mask[:, None, :, None] & mask[:, None, None, :]


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_patterns_equal_the_eager_output_attentions_and_the_logits_are_untouched(name: str, kernel: str) -> None:
    model, tokenizer = _model(name, kernel)
    hooks, lookup = count_hooks(model), AttentionInterface.__dict__["get_interface"]
    trace = interpret.collect(model, tokenizer, TEXTS, names="*")
    with torch.no_grad():
        reference = eager_copy(model)(**model_inputs(trace.encoded), output_attentions=True, **_no_cache(model))
        plain = model(**model_inputs(trace.encoded), **_no_cache(model))
    assert torch.equal(trace.output.logits, plain.logits)
    assert len(reference.attentions) == trace.meta.n_layers == (6 if name == "albert" else 2)
    keep = _real(trace.encoded)
    for layer, attention in enumerate(reference.attentions):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"]
        if name == "falcon-alibi" and kernel == "sdpa":
            # transformers' eager alibi path adds the alibi twice (to the scores and in the mask) where its SDPA
            # path adds it once: the recorded pattern is what SDPA applied, checked against z below.
            continue
        torch.testing.assert_close(pattern, attention.float().masked_fill(~keep, 0), atol=TIGHT, rtol=0, msg=name)
    assert count_hooks(model) == hooks and AttentionInterface.__dict__["get_interface"] is lookup
    assert not any("forward" in module.__dict__ for module in model.modules())
    assert not torch.overrides._get_current_function_mode_stack()


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_the_pattern_is_what_the_module_applied_to_its_values(name: str, kernel: str) -> None:
    """z (the output projection's input, from the module's own output) = pattern · v per head, and the scores
    and lse restate the pattern: whatever bias the module added, the recorded pattern is the one it used."""
    model, tokenizer = _model(name, kernel)
    trace = interpret.collect(model, tokenizer, TEXTS, names="*")
    real = trace.encoded.attention_mask.bool()
    for layer in range(trace.meta.n_layers):
        block = f"blocks.{layer}.attn"
        pattern, v, z = trace[f"{block}.hook_pattern"], trace[f"{block}.hook_v"], trace[f"{block}.hook_z"]
        mixed = torch.einsum("bhqk,bkhd->bqhd", pattern, v.float())
        torch.testing.assert_close(mixed[real], z.float()[real], atol=1e-5, rtol=0, msg=f"{name} {layer}")
        scores, lse = trace[f"{block}.hook_attn_scores"], trace[f"{block}.hook_lse"]
        rows = real[:, None, :].expand_as(lse)
        torch.testing.assert_close(lse[rows], torch.logsumexp(scores, -1)[rows], atol=1e-5, rtol=0)
        restated = torch.exp(scores - lse[..., None]).masked_fill(~_real(trace.encoded), 0)
        torch.testing.assert_close(restated, pattern, atol=TIGHT, rtol=0)


def test_mpnet_scores_are_its_relative_position_bias_added_to_the_scaled_products() -> None:
    model, tokenizer = _model("mpnet", "eager")
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*hook_q", "*hook_k", "*hook_attn_scores"])
    with torch.no_grad():
        bias = model.mpnet.encoder.compute_position_bias(torch.zeros(trace.encoded.batch, trace.encoded.pos, 1))
    for layer in range(2):
        q, k = (trace[f"blocks.{layer}.attn.hook_{name}"].transpose(1, 2) for name in ("q", "k"))
        expected = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
        scores = trace[f"blocks.{layer}.attn.hook_attn_scores"]
        keep = _real(trace.encoded).expand_as(scores)
        torch.testing.assert_close(scores[keep], expected[keep], atol=1e-5, rtol=0)
        padding = ~trace.encoded.attention_mask.bool()[:, None, None, :].expand_as(scores)
        assert padding.any() and (scores[padding] < -1e30).all()  # padding keys hold the mask's minimum


def _per_call(model: Any, encoded: Any) -> dict[str, list[torch.Tensor]]:
    """Return what plain forward hooks see at each call of ALBERT's shared modules, in call order."""
    seen: dict[str, list[torch.Tensor]] = {}
    layers = [layer for group in model.albert.encoder.albert_layer_groups for layer in group.albert_layers]

    def keep(name: str, part: Callable[..., torch.Tensor]) -> Callable[..., None]:
        return lambda module, args, output=None: seen.setdefault(name, []).append(part(args, output).detach().clone())

    heads = lambda tensor: tensor.view(*tensor.shape[:-1], 4, -1)  # noqa: E731
    handles = []
    for layer in layers:
        attention = layer.attention
        handles += [
            layer.register_forward_pre_hook(keep("hook_resid_pre", lambda args, _: args[0])),
            layer.register_forward_hook(keep("hook_resid_post", lambda args, out: out)),
            attention.query.register_forward_hook(keep("attn.hook_q", lambda args, out: heads(out))),
            attention.key.register_forward_hook(keep("attn.hook_k", lambda args, out: heads(out))),
            attention.value.register_forward_hook(keep("attn.hook_v", lambda args, out: heads(out))),
            attention.dense.register_forward_pre_hook(keep("attn.hook_z", lambda args, _: heads(args[0]))),
            attention.dense.register_forward_hook(keep("hook_attn_out", lambda args, out: out)),
            attention.LayerNorm.register_forward_hook(keep("ln2.hook_normalized", lambda args, out: out)),
            layer.ffn_output.register_forward_pre_hook(keep("mlp.hook_post", lambda args, _: args[0])),
            layer.ffn_output.register_forward_hook(keep("hook_mlp_out", lambda args, out: out)),
        ]
    try:
        with torch.no_grad():
            model(**model_inputs(encoded))
    finally:
        for handle in handles:
            handle.remove()
    return seen


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_every_albert_layer_is_captured_from_its_own_call(kernel: str) -> None:
    model, tokenizer = _model("albert", kernel)
    capturable = capturable_for(model, tokenizer)
    assert capturable.n_layers == 6
    assert {(site.call, site.calls) for site in capturable.sites if site.layer == 3} == {(1, 3)}  # module 1, call 1
    trace = interpret.collect(model, tokenizer, TEXTS, names="*")
    seen = _per_call(model, trace.encoded)
    # The group runs its two layer modules in turn (modules 0, 1, 0, 1, 0, 1): layer i is the i-th call.
    assert len(seen) == 10
    for suffix, calls in seen.items():
        assert len(calls) == 6, suffix
        for layer, expected in enumerate(calls):
            assert torch.equal(trace[f"blocks.{layer}.{suffix}"], expected), (suffix, layer)
    assert torch.equal(trace["hook_embed"], seen["hook_resid_pre"][0])


def test_a_head_gate_acts_on_its_own_layer_of_a_shared_module() -> None:
    """Gating head 1 of layer 2 (module 0's second call) equals zeroing that head's input of the output
    projection at that call only, counted by the test's own hook; layers before it are untouched."""
    model, tokenizer = _model("albert", "eager")
    capturable = capturable_for(model, tokenizer)
    encoded = prepare(capturable, tokenizer, TEXTS)
    gates = torch.ones(6, 4)
    gates[2, 1] = 0.0
    names = [f"blocks.{layer}.hook_resid_post" for layer in range(6)]
    plain = interpret.collect(model, tokenizer, TEXTS, names=names)
    with head_gates(model, gates):
        gated = interpret.collect(model, tokenizer, TEXTS, names=names)
    dense = model.albert.encoder.albert_layer_groups[0].albert_layers[0].attention.dense
    count = [0]

    def zero_head(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        count[0] += 1
        if count[0] == 2:  # module 0 runs layers 0, 2, 4: its second call is layer 2
            joined = args[0].clone()
            joined[..., 8:16] = 0
            return (joined,)
        return None

    handle = dense.register_forward_pre_hook(zero_head)
    try:
        with torch.no_grad():
            expected = model(**model_inputs(encoded)).logits
    finally:
        handle.remove()
    torch.testing.assert_close(gated.output.logits, expected, atol=1e-6, rtol=0)
    for layer in range(6):
        same = torch.equal(gated[names[layer]], plain[names[layer]])
        assert same == (layer < 2), layer


def _score(output: Any) -> torch.Tensor:
    return output.logits[:, 1, 5].sum() - output.logits[:, -1, 6].sum()


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_each_layer_pattern_gets_its_own_gradient(name: str, kernel: str) -> None:
    """∂score/∂pattern of every layer (per call where layers share a module) equals autograd's through the eager
    model's own attention weights."""
    model, tokenizer = _model(name, kernel)
    capturable = capturable_for(model, tokenizer)
    encoded = prepare(capturable, tokenizer, TEXTS)
    tensors, output, _ = capture(capturable, encoded, select_sites(capturable, ["*hook_pattern"], None), grad=True)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(capturable.n_layers)]
    grads = torch.autograd.grad(_score(output), [tensors[name] for name in names])
    eager = eager_copy(model)
    reference = eager(**model_inputs(encoded), output_attentions=True, **_no_cache(model))
    expected = torch.autograd.grad(_score(reference), list(reference.attentions))
    keep = _real(encoded).expand_as(grads[0])
    for layer, (got, want) in enumerate(zip(grads, expected)):
        if name == "falcon-alibi" and kernel == "sdpa":
            assert torch.isfinite(got).all() and got.abs().sum() > 0  # its eager path differs (see above)
            continue
        scale = want.abs().max()
        torch.testing.assert_close(got.float()[keep], want.float()[keep], atol=1e-5 * float(scale), rtol=0, msg=str(layer))


@pytest.mark.parametrize("name", ["albert", "falcon"])
def test_streaming_readouts_equal_the_full_analyzers(name: str) -> None:
    model, tokenizer = _model(name, "sdpa")
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern", "*attn.hook_q", "*attn.hook_k",
                                                              "*attn.hook_lse"])
    for full_name in ("rollout", "attention_x_gradient", "gradient_weighted_rollout"):
        params = {"head_fusion": "mean", "residual": 0.4} if full_name == "rollout" else {}
        full_params = {**params, "rows": "all"} if full_name == "rollout" else params
        full = interpret.analyze(trace, full_name, params=full_params, model=model, tokenizer=tokenizer)
        streamed = interpret.analyze(trace, full_name, params=params, model=model, tokenizer=tokenizer, strategy="streamed")
        scale = max(1.0, float(np.abs(full["readout"]).max()))
        assert np.abs(streamed["readout"] - full["readout"]).max() <= 1e-5 * scale, full_name


def test_hooks_and_wrappers_are_removed_when_the_forward_raises() -> None:
    for name, kernel in (("albert", "sdpa"), ("falcon", "sdpa"), ("mpnet", "eager")):
        model, tokenizer = _model(name, kernel)
        capturable_for(model, tokenizer)  # probed before the failing hook is added
        hooks, lookup = count_hooks(model), AttentionInterface.__dict__["get_interface"]
        # The output projection inside the last attention: the forward fails while that module's own code runs.
        last = [module for path, module in model.named_modules() if path.endswith(("attention.dense", "attn.o"))][-1]

        def fail(*_: Any) -> None:
            raise RuntimeError("stop")

        handle = last.register_forward_hook(fail)
        try:
            with pytest.raises(RuntimeError, match="stop"):
                interpret.collect(model, tokenizer, TEXTS, names="*")
        finally:
            handle.remove()
        assert count_hooks(model) == hooks and AttentionInterface.__dict__["get_interface"] is lookup
        assert not any("forward" in module.__dict__ for module in model.modules()), name
        assert not torch.overrides._get_current_function_mode_stack(), name
        assert interpret.collect(model, tokenizer, TEXTS).names()  # and the next capture works


class _Found(OwnAttention):
    """The tracer alone, on a function run as one watched module call."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.why: list[str] = []
        self.current: object | None = None

    def owner(self) -> object | None:
        return self.current

    def softmax(self, owner: Any, query: torch.Tensor, key: torch.Tensor, scores: torch.Tensor) -> Any:
        return scores

    def values(self, owner: Any, pending: Any, value: torch.Tensor, pattern: torch.Tensor) -> None:
        self.found.append((pending, pattern))

    def missed(self, owner: Any, why: str) -> None:
        self.why.append(why)

    def run(self, statement: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> None:
        self.current = object()
        self.begin(self.current, (2, 5))
        with self:
            statement(*tensors)
        self.end(self.current)


_Q, _K, _V = (torch.randn(2, 4, 5, 8, generator=torch.Generator().manual_seed(seed)) for seed in range(3))
_MASK = torch.zeros(2, 1, 5, 5, dtype=torch.bool)
_MASK[1, ..., 3:] = True
STATEMENTS: dict[str, tuple[Callable[..., torch.Tensor], str | None]] = {
    "eager": (lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) / 8, -1) @ v, None),
    "bmm on [batch · head]": (lambda q, k, v: torch.bmm(torch.nn.functional.softmax(
        torch.bmm(q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2)), dim=-1), v.flatten(0, 1)), None),
    "zeroed masked keys": (lambda q, k, v: (q @ k.transpose(-1, -2)).masked_fill(_MASK, -1e9).softmax(-1)
                           .masked_fill(_MASK, 0.0) @ v, None),
    "re-weighted": (lambda q, k, v: ((q @ k.transpose(-1, -2)).softmax(-1) * 2) @ v, "changed after the softmax"),
    "written in place": (lambda q, k, v: (q @ k.transpose(-1, -2)).softmax(-1).mul_(2) @ v, "changed in place"),
    "over the queries": (lambda q, k, v: (q @ k.transpose(-1, -2)).softmax(-2) @ v, "another axis"),
    "not of a product": (lambda q, k, v: (q + k).sum(-1, keepdim=True).expand(2, 4, 5, 5).softmax(-1) @ v,
                         "does not normalise scores from a product"),
}


@pytest.mark.parametrize("statement", list(STATEMENTS))
def test_the_tracer_takes_only_probabilities_that_weight_the_values_unchanged(statement: str) -> None:
    compute, refused = STATEMENTS[statement]
    tracer = _Found()
    tracer.run(compute, _Q, _K, _V)
    if refused is None:
        assert len(tracer.found) == 1
        scores, pattern = tracer.found[0]
        expected = torch.softmax(scores.float(), -1)
        if statement == "zeroed masked keys":
            expected = expected.masked_fill(_MASK, 0.0)
        torch.testing.assert_close(pattern, expected, atol=TIGHT, rtol=0)
    else:
        assert tracer.found == [] and any(refused in why for why in tracer.why), tracer.why


def test_a_capture_whose_module_changes_its_probabilities_fails_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that re-weights its probabilities after the probe (a different transformers version) is never
    recorded with a pattern it did not apply: the capture fails by name."""
    model, tokenizer = _model("mpnet", "eager")
    capturable_for(model, tokenizer)  # probed with the module as it is
    dropout = model.mpnet.encoder.layer[0].attention.attn.dropout
    monkeypatch.setattr(dropout, "forward", lambda probs: probs * 2.0)  # the model changes, not the capture
    with pytest.raises(CaptureError, match="never fired"):
        interpret.collect(model, tokenizer, TEXTS, names=["blocks.0.attn.hook_pattern"])


def test_interpret_models_lists_the_families_as_supported_and_states_the_sharing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["models", "albert", "mpnet", "falcon", "bloom", "--format", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    rows = {row["model_type"]: row for row in json.loads(result.stdout)}
    for model_type, kind in (("albert", "encoder"), ("mpnet", "encoder"), ("falcon", "decoder"), ("bloom", "decoder")):
        row = rows[model_type]
        assert (row["status"], row["adapter"], row["kind"]) == ("supported", "generic", kind), row
        assert "blocks.{i}.attn.hook_pattern" in row["offered"] and "blocks.{i}.attn.hook_z" in row["offered"]
    assert rows["albert"]["shared"].startswith("12 layers run 1 block module in turn")
    assert not rows["mpnet"]["shared"]
    shown = CliRunner().invoke(cli, ["models", "albert"], catch_exceptions=False)
    assert "layers: 12 layers run 1 block module in turn" in shown.stdout


def test_the_heads_of_a_shared_output_projection_are_not_pruned_per_layer() -> None:
    """Removing a head from one layer of ALBERT would remove it from every layer that module runs for: refused
    by name (gating stays per layer, as tested above)."""
    from interpret.errors import UnsupportedModelError
    from interpret.heads.surgery import prune_heads

    model, _ = _model("albert", "eager")
    mask = torch.ones(6, 4)
    mask[2, 1] = 0
    with pytest.raises(UnsupportedModelError, match="cannot be removed for one layer alone"):
        prune_heads(model, mask)


def _mllama_text(vocab: int) -> Any:
    config = T.MllamaTextConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                num_attention_heads=4, num_key_value_heads=2, cross_attention_layers=[1],
                                max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    return T.MllamaTextModel(config).eval()


def test_the_layers_of_a_model_that_skips_blocks_are_the_blocks_that_run() -> None:
    tokenizer = word_tokenizer()
    model = _mllama_text(len(tokenizer))
    trace = interpret.collect(model, tokenizer, TEXTS[:2], names="*")
    assert trace.meta.n_layers == 2  # blocks 0 and 2; block 1 cross-attends to an image and is skipped on text
    capturable = capturable_for(model, tokenizer)
    assert capturable.skipped == ("layers.1",)
    assert catalog.sharing(capturable) == ("2 of the 3 blocks of 'layers' run on the probe's input (blocks 1 are"
                                           " skipped on it and change nothing); layer i is the i-th block that runs")
    with torch.no_grad():
        hooked: dict[int, torch.Tensor] = {}
        handles = [model.layers[i].register_forward_hook(
            lambda module, args, output, i=i: hooked.__setitem__(i, output[0] if isinstance(output, tuple) else output))
            for i in (0, 2)]
        try:
            model(**model_inputs(trace.encoded), use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
    assert torch.equal(trace["blocks.0.hook_resid_post"], hooked[0])
    assert torch.equal(trace["blocks.1.hook_resid_post"], hooked[2])  # layer 1 is block 2
    assert torch.equal(trace["blocks.1.hook_resid_pre"], hooked[0])  # nothing ran between them
    eager = eager_patterns(eager_copy(model), trace.encoded)  # the eager model's own attentions: the blocks that ran
    assert len(eager) == 2
    for hook, expected in eager.items():
        torch.testing.assert_close(trace[hook], expected, atol=1e-6, rtol=0)


def test_a_pass_that_runs_a_skipped_block_is_refused() -> None:
    from dataclasses import replace

    tokenizer = word_tokenizer()
    model = _mllama_text(len(tokenizer))
    capturable = capturable_for(model, tokenizer)
    encoded = prepare(capturable, tokenizer, TEXTS[:1])
    image = torch.zeros(1, 4, 32)  # cross-attention states: the text model then runs its cross-attention block

    def with_image(batch: Any) -> Any:
        return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, cross_attention_states=image,
                     use_cache=False)

    with pytest.raises(CaptureError, match=r"block 'layers.1' ran on this input, but not on the probe's"):
        capture(replace(capturable, run=with_image), encoded, select_sites(capturable, "*", None))
    assert count_hooks(model) == 0
