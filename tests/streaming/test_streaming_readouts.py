"""Streaming readouts equal the full computation: streaming rollout equals the `rollout` analyzer (rows="readout",
from captured patterns), and streaming attention × gradient and gradient-weighted rollout equal a plain PyTorch
statement over the full patterns and their autograd gradients, on tiny GPT-2, Llama (grouped-query, rotary),
BERT and Mistral (a sliding window narrower than the input, rebuilt in blocks), padded batches included, with blocks of one row and of many; a wrong mask is caught by the output
check (gradients) and the lse check (rollout); no hook survives."""

from __future__ import annotations

import dataclasses
import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import MATRIX, TEXTS, tiny_config, tiny_model, word_tokenizer

import interpret
from interpret.analysis.run import run_context
from interpret.errors import AnalyzerError, ResultError
from interpret.hooks import count_hooks
from interpret.plugins._attention import readout_weights
from interpret.streaming.capture import REQUIRES, gradient_pass, layers_from_trace, real_positions
from interpret.streaming.pattern import StreamedLayer
from interpret.streaming.pattern import lse_error, output_error, pattern_rows
from interpret.streaming.readout import attention_gradient_layer, grad_rollout_layer, rollout_readout

FAMILIES = ("gpt2", "llama", "bert", "mistral")  # Mistral: a sliding window of 4 keys, shorter than the input
TOLERANCE = 1e-5
ONE_ROW = 1  # block_bytes so small that every block is a single query row


def layers_with_gradients(trace, ctx, what: str) -> list[list[StreamedLayer]]:
    """Per example, every layer's StreamedLayer (layer order) with z and ∂score/∂z from one `gradient_pass`,
    all kept at once (the streamed analyzers consume each layer as the pass reaches it instead)."""
    kept: dict[int, list[StreamedLayer]] = {}

    def keep(index: int, layers: list[StreamedLayer] | None) -> None:
        assert layers is not None, f"layer {index} was never reached by the backward pass"
        kept[index] = layers

    order = gradient_pass(trace, ctx, what, keep)
    return [[kept[index][b] for index in range(len(order))] for b in range(trace.encoded.batch)]


def grad_rollout_row(layers: list[StreamedLayer], weights: np.ndarray) -> np.ndarray:
    """w·(I + Ā_{L−1})⋯(I + Ā_0) [n]: the row carried from the last layer down by `grad_rollout_layer`."""
    vector = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    for layer in reversed(layers):
        vector, _ = grad_rollout_layer(layer, vector, block_bytes=ONE_ROW)
    return vector.numpy()


def attention_gradient_sums(layers: list[StreamedLayer], weights: np.ndarray) -> tuple[np.ndarray, float]:
    """(per layer Σ_i w_i Σ_h (A ⊙ ∂score/∂A)[h, i, :] [layer, n], largest output error) by
    `attention_gradient_layer`."""
    parts = [attention_gradient_layer(layer, weights, block_bytes=ONE_ROW) for layer in layers]
    return np.stack([sums for sums, _ in parts]), max(error for _, error in parts)


def _trace(family: str, implementation: str = "sdpa", texts=TEXTS):
    model = tiny_model(family, implementation)
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, texts, names=["*attn.hook_pattern", *REQUIRES])
    return model, tokenizer, trace


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("head_fusion", ["mean", "max"])
def test_streaming_rollout_equals_the_rollout_analyzer(family: str, head_fusion: str) -> None:
    model, tokenizer, trace = _trace(family)
    params = {"head_fusion": head_fusion, "residual": 0.4}
    full = interpret.analyze(trace, "rollout", params={**params, "rows": "all"}, model=model, tokenizer=tokenizer)
    streamed = interpret.analyze(trace, "rollout", strategy="streamed", params=params, model=model, tokenizer=tokenizer)
    assert np.abs(streamed["readout"] - full["readout"]).max() <= TOLERANCE
    assert streamed.checks["lse_error"].value <= 1e-6
    # One row per block walks every block boundary and skips the blocks whose readout weight is zero.
    ctx = run_context(trace, model, tokenizer)
    layers = layers_from_trace(trace, "test")
    for b, positions in enumerate(real_positions(trace)):
        weights = readout_weights("auto", ctx.targets[b], positions)
        row, error = rollout_readout(layers[b], weights, residual=0.4, head_fusion=head_fusion, block_bytes=ONE_ROW)
        assert np.abs(row - full["readout"][b][positions]).max() <= TOLERANCE
        assert error <= 1e-6


def test_streaming_rollout_start_layer_and_given_rows_equal_the_rollout_analyzer() -> None:
    model, tokenizer, trace = _trace("llama")
    params = {"start_layer": 1, "readout": (0, -1)}
    full = interpret.analyze(trace, "rollout", params=params, model=model, tokenizer=tokenizer)
    streamed = interpret.analyze(trace, "rollout", strategy="streamed", params=params, model=model, tokenizer=tokenizer)
    assert np.abs(streamed["readout"] - full["readout"]).max() <= TOLERANCE


def _full_gradient_statement(trace, ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (attention × gradient per layer [batch, layer, pos] from the readout rows, the same from every
    row, grad rollout readout [batch, pos]) from the full patterns A and ∂score/∂A of one autograd pass."""
    captured = ctx.capture(trace.encoded, ["*attn.hook_pattern"])
    names = sorted(captured.tensors, key=lambda name: int(name.split(".")[1]))
    grads = torch.autograd.grad(captured.score.sum(), [captured[name] for name in names])
    batch, pos = trace.encoded.batch, trace.encoded.pos
    per_layer, rollout = np.zeros((batch, len(names), pos)), np.zeros((batch, pos))
    every_row = np.zeros((batch, len(names), pos))
    for b, positions in enumerate(real_positions(trace)):
        index = torch.as_tensor(positions)
        weights = torch.as_tensor(readout_weights("auto", ctx.targets[b], positions))
        relevance = torch.eye(len(positions), dtype=torch.float64)
        for layer, (name, grad) in enumerate(zip(names, grads)):
            pattern = captured[name][b].detach().cpu()[:, index][:, :, index].double()  # [head, n, n]
            pattern_grad = grad[b].cpu()[:, index][:, :, index].double()
            per_layer[b, layer, positions] = (weights @ (pattern * pattern_grad).sum(0)).cpu().numpy()
            every_row[b, layer, positions] = (pattern * pattern_grad).sum((0, 1)).cpu().numpy()
            relevance = relevance + (pattern * pattern_grad).clamp(min=0).mean(0) @ relevance  # Chefer eq. 6
        rollout[b, positions] = (weights @ relevance).cpu().numpy()
    return per_layer, every_row, rollout


@pytest.mark.parametrize("family", FAMILIES)
def test_streaming_gradients_equal_the_full_statement(family: str) -> None:
    model, tokenizer, trace = _trace(family)
    ctx = run_context(trace, model, tokenizer)
    per_layer, every_row, rollout = _full_gradient_statement(trace, ctx)
    gradient = interpret.analyze(trace, "attention_x_gradient", strategy="streamed", params={"layers": "last", "rows": "readout"},
                                 model=model, tokenizer=tokenizer)
    summed = interpret.analyze(trace, "attention_x_gradient", strategy="streamed", params={"rows": "readout"}, model=model,
                               tokenizer=tokenizer)
    all_rows = interpret.analyze(trace, "attention_x_gradient", strategy="streamed", model=model, tokenizer=tokenizer)
    weighted = interpret.analyze(trace, "gradient_weighted_rollout", strategy="streamed", model=model, tokenizer=tokenizer)
    scale = np.abs(per_layer).max()
    assert scale > 0
    assert np.abs(gradient["per_layer"] - per_layer).max() <= TOLERANCE * scale
    assert np.abs(gradient["readout"] - per_layer[:, -1]).max() <= TOLERANCE * scale
    assert np.abs(summed["readout"] - per_layer.sum(1)).max() <= TOLERANCE * scale
    assert np.abs(all_rows["readout"] - every_row.sum(1)).max() <= TOLERANCE * np.abs(every_row).max()
    assert np.abs(weighted["readout"] - rollout).max() <= TOLERANCE
    # Both ways of attention × gradient, over every row and over the decision's rows.
    for method in ("fused", "blocks"):
        for rows, expected in (("all", every_row), ("readout", per_layer)):
            got = interpret.analyze(trace, "attention_x_gradient", strategy="streamed", params={"rows": rows, "method": method},
                                    model=model, tokenizer=tokenizer)
            assert np.abs(got["per_layer"] - expected).max() <= TOLERANCE * np.abs(expected).max(), (method, rows)
            assert got.checks["output_error"].value <= 1e-6
    # Blocks of one row: grad rollout walks every block; attention × gradient over every row spans many blocks,
    # so "auto" takes the fused calls.
    layers = layers_with_gradients(trace, ctx, "test")
    for b, positions in enumerate(real_positions(trace)):
        weights = readout_weights("auto", ctx.targets[b], positions)
        row = grad_rollout_row(layers[b], weights)
        assert np.abs(row - rollout[b, positions]).max() <= TOLERANCE
        sums, error = attention_gradient_sums(layers[b], np.ones(len(positions)))
        assert np.abs(sums - every_row[b][:, positions]).max() <= TOLERANCE * np.abs(every_row).max()
        assert error <= 1e-6  # A·V of every row against the kernel's z


def test_longer_input_in_blocks_equals_the_full_computation() -> None:
    torch.manual_seed(1)
    words = "the cat sat on mat a dog saw red blue".split()
    text = " ".join(words[i] for i in torch.randint(len(words), (60,)).tolist())
    model, tokenizer, trace = _trace("llama", texts=[text])
    full = interpret.analyze(trace, "rollout", params={"rows": "readout"}, model=model, tokenizer=tokenizer)
    layers = layers_from_trace(trace, "test")
    ctx = run_context(trace, model, tokenizer)
    positions = real_positions(trace)[0]
    weights = readout_weights("auto", ctx.targets[0], positions)
    for block_bytes in (ONE_ROW, 7 * 3 * 4 * len(positions) * 4, 1 << 30):  # 1 row, 7 rows, all rows
        row, _ = rollout_readout(layers[0], weights, block_bytes=block_bytes)
        assert np.abs(row - full["readout"][0][positions]).max() <= TOLERANCE


def test_pattern_rows_equal_the_captured_pattern_and_a_wrong_mask_is_caught() -> None:
    _, _, trace = _trace("gpt2", texts=[TEXTS[0]])
    layer = layers_from_trace(trace, "test")[0][1]
    captured = trace["blocks.1.attn.hook_pattern"][0]  # [head, n, n]
    rows = pattern_rows(layer, 2, 5)  # [head, 3, 5] under the causal mask
    assert torch.allclose(rows, captured[:, 2:5, :5], atol=1e-6, rtol=0)
    assert float(captured[:, 2:5, 5:].abs().max()) == 0.0
    assert lse_error(layer, 0, layer.n) <= 1e-6
    assert lse_error(dataclasses.replace(layer, causal=False), 0, layer.n) > 1e-2
    assert lse_error(dataclasses.replace(layer, kernel_scale=1.1 * layer.scale), 0, layer.n) > 1e-4  # 10× the check's tolerance
    # The gradient layers keep v and z: there A·V is checked against the kernel's output.
    model, tokenizer, _ = _trace("gpt2", texts=[TEXTS[0]])
    graded = layers_with_gradients(trace, run_context(trace, model, tokenizer), "test")[0][1]
    unmasked = StreamedLayer(graded.q, graded.k, graded.v, causal=False, z=graded.z)
    assert output_error(graded, 0, graded.n, pattern_rows(graded, 0, graded.n)) <= 1e-6
    assert output_error(unmasked, 0, unmasked.n, pattern_rows(unmasked, 0, unmasked.n)) > 1e-2


def test_a_wrong_mask_is_refused_by_analyze(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer, trace = _trace("gpt2")

    def unmasked(trace, what, device=None):  # the decoder's layers as if its attention were not causal
        return [[dataclasses.replace(layer, causal=False) for layer in layers] for layers in layers_from_trace(trace, what, device)]

    monkeypatch.setattr("interpret.plugins.rollout.layers_from_trace", unmasked)
    with pytest.raises(ResultError, match="lse_error"):
        interpret.analyze(trace, "rollout", strategy="streamed", model=model, tokenizer=tokenizer)


def test_no_hook_survives_the_gradient_pass_also_when_it_raises() -> None:
    model, tokenizer, trace = _trace("llama")
    ctx = run_context(trace, model, tokenizer)
    before = count_hooks(model)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    layers_with_gradients(trace, ctx, "test")
    assert count_hooks(model) == before

    def fail(index, layers):  # the consumer raises inside the backward pass, hooks and patches all live
        raise RuntimeError("the consumer fails on purpose")

    with pytest.raises(RuntimeError, match="on purpose"):
        gradient_pass(trace, ctx, "test", fail, recompute="on")
    assert count_hooks(model) == before
    assert torch.nn.functional.scaled_dot_product_attention is sdpa
    assert not any("forward" in vars(module) for module in model.modules())  # no checkpoint wrapper left
    # The pass freezes the parameters and differentiates to the first z only: every flag is back, no .grad.
    assert all(param.requires_grad and param.grad is None for param in model.parameters())


def test_streaming_parameters_are_refused_when_meaningless() -> None:
    from interpret.plugins.rollout import RolloutParams

    for bad in ({"residual": 1.0}, {"block_mib": 0}, {"start_layer": -1}):
        with pytest.raises(ValueError):
            RolloutParams(**bad)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_streaming_gradients_equal_the_full_gradient_analyzers(family: str) -> None:
    model, tokenizer, trace = _trace(family)
    for full_name in ("attention_x_gradient", "gradient_weighted_rollout"):
        full = interpret.analyze(trace, full_name, model=model, tokenizer=tokenizer)
        streamed = interpret.analyze(trace, full_name, model=model, tokenizer=tokenizer, strategy="streamed")
        scale = max(1.0, float(np.abs(full["readout"]).max()))
        assert np.abs(streamed["readout"] - full["readout"]).max() <= TOLERANCE * scale, full_name


@pytest.mark.parametrize("family", FAMILIES)
def test_recomputed_blocks_give_the_same_gradients_and_leave_no_trace(family: str) -> None:
    model, tokenizer, trace = _trace(family)
    before = count_hooks(model)
    for name in ("attention_x_gradient", "gradient_weighted_rollout"):
        kept = interpret.analyze(trace, name, params={"recompute": "off"}, model=model, tokenizer=tokenizer,
                                 strategy="streamed")
        recomputed = interpret.analyze(trace, name, params={"recompute": "on"}, model=model, tokenizer=tokenizer,
                                       strategy="streamed")
        assert np.array_equal(kept["readout"], recomputed["readout"]), name  # the same pass, recomputed: bit for bit
    assert count_hooks(model) == before
    assert not any("forward" in module.__dict__ for module in model.modules())  # every block's forward is its class's
    assert all(param.requires_grad and param.grad is None for param in model.parameters())
    with pytest.raises(AnalyzerError, match="recompute"):
        interpret.analyze(trace, "gradient_weighted_rollout", strategy="streamed", params={"recompute": "sometimes"}, model=model, tokenizer=tokenizer)


def test_the_gradient_pass_leaves_no_reference_cycle_holding_its_tensors() -> None:
    """What the pass kept (q, k, v, z, ∂score/∂z of every layer) goes as soon as the result is dropped, not at
    the garbage collector's next sweep: a dataset loop would otherwise hold several examples' worth."""
    import gc

    from interpret.streaming.capture import _Stream

    model, tokenizer, trace = _trace("llama")
    ctx = run_context(trace, model, tokenizer)
    gc.collect()
    gc.disable()
    try:
        layers = layers_with_gradients(trace, ctx, "test")
        assert layers[0][0].grad_z is not None
        del layers
        assert not [found for found in gc.get_objects() if type(found) is _Stream]
    finally:
        gc.enable()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_recomputed_pass_holds_one_layer_at_a_time(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With recompute on, the forward pass keeps nothing: every layer's q, k, v and z are kept when the backward
    pass recomputes its block (the first one too, handing its projection the same leaf), after the layer above
    went to the consumer."""
    from interpret.streaming import capture as capture_module

    model, tokenizer, trace = _trace(family)
    ctx = run_context(trace, model, tokenizer)
    events: list[tuple] = []
    keep = capture_module._Stream._keep

    def recording(self, layer, name, tensor):
        events.append(("keep", layer, name, self.backward))
        return keep(self, layer, name, tensor)

    monkeypatch.setattr(capture_module._Stream, "_keep", recording)
    consumed: list[int] = []
    order = gradient_pass(trace, ctx, "test", lambda index, layers: consumed.append(index) or events.append(("consume", index)),
                          recompute="on")
    assert consumed == list(range(len(order) - 1, -1, -1))  # the last layer first
    assert not [event for event in events if event[0] == "keep" and not event[3]]  # nothing in the forward pass
    for index, layer in enumerate(order):  # every layer: kept in the backward, after the one above was consumed
        kept_at = [i for i, event in enumerate(events) if event[:2] == ("keep", layer)]
        assert kept_at and all(events[i][3] for i in kept_at)
        if index + 1 < len(order):
            assert min(kept_at) > events.index(("consume", index + 1))


def test_streaming_rollout_holds_one_layer_at_a_time_also_from_a_start_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace's layers are built (moved to the model's device) one at a time as the row is carried down; a
    slice from start_layer is lazy too, not a list of every layer built at once (on a GPU: every layer's q and
    k on the device together)."""
    import weakref

    from interpret.streaming import capture as capture_module

    model, tokenizer, trace = _trace("llama")
    alive, most = [0], [0]
    build = capture_module._TraceLayers.layer

    def counted(self, index):
        layer = build(self, index)
        alive[0] += 1
        most[0] = max(most[0], alive[0])
        weakref.finalize(layer, lambda: alive.__setitem__(0, alive[0] - 1))
        return layer

    monkeypatch.setattr(capture_module._TraceLayers, "layer", counted)
    layers = layers_from_trace(trace, "test")[0]
    part = layers[1:]  # (a runtime type check of a sequence argument may build one item, and drop it)
    assert alive[0] == 0 and len(part) == len(layers) - 1  # a slice holds no built layer
    assert part[0].q.shape == layers[1].q.shape
    most[0] = 0
    for start in (0, 1):
        interpret.analyze(trace, "rollout", strategy="streamed", params={"start_layer": start, "method": "fused"}, model=model,
                          tokenizer=tokenizer)
        assert most[0] <= 2, start  # the layer in use, and the next one as the loop rebinds


def _streamed_as_full(model, tokenizer):
    """Return the trace of an input longer than a window of 4 after asserting that the streamed rollout and
    entropy on it equal the analyzers over its captured patterns."""
    trace = interpret.collect(model, tokenizer, ["the cat sat on the mat and the dog saw the red ball", TEXTS[1]],
                              names=["*attn.hook_pattern", *REQUIRES])
    full = interpret.analyze(trace, "rollout", params={"rows": "all"})
    streamed = interpret.analyze(trace, "rollout", strategy="streamed", model=model, tokenizer=tokenizer)
    assert np.abs(streamed["readout"] - full["readout"]).max() <= TOLERANCE
    assert streamed.checks["lse_error"].value <= 1e-6
    full = interpret.analyze(trace, "attention_entropy")
    streamed = interpret.analyze(trace, "attention_entropy", strategy="streamed")
    assert np.abs(streamed["entropy"] - full["entropy"]).max() <= TOLERANCE
    return trace


def test_soft_capped_scores_are_restated() -> None:
    """Gemma 2 with its scores squeezed into ±0.5 (c·tanh(s/c), c = 0.5: far from the identity) and a window of 4:
    streaming rollout and entropy equal the analyzers over the captured patterns."""
    config = tiny_config("gemma2")
    config.attn_logit_softcapping, config._attn_implementation = 0.5, "eager"
    torch.manual_seed(0)
    model, tokenizer = T.Gemma2ForCausalLM(config).eval(), word_tokenizer()
    with torch.no_grad():  # scores of a few units (a random model's are near 0, where the cap is the identity)
        for block in model.model.layers:
            block.self_attn.q_proj.weight.mul_(40.0)
    trace = _streamed_as_full(model, tokenizer)
    assert trace.meta.softcaps == (0.5, 0.5) and trace.meta.windows == (4, 0)
    layers = layers_from_trace(trace, "test")[0]
    assert layers[1].softcap == 0.5 and lse_error(dataclasses.replace(layers[1], softcap=0.0), 0, layers[1].n) > 1e-2


def test_a_scale_of_its_own_and_a_window_are_restated() -> None:
    """Gemma 3 scales its scores by query_pre_attn_scalar^−½ (6^−½ here, not 1/√8) on a sliding-window layer and a
    full one: the streamed rollout and entropy read that scale from the trace's meta and equal the analyzers."""
    tokenizer = word_tokenizer()
    config = T.Gemma3TextConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=6,
                                sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                                max_position_embeddings=64, pad_token_id=0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = T.Gemma3ForCausalLM(config).eval()
    trace = _streamed_as_full(model, tokenizer)
    assert trace.meta.windows == (4, 0) and trace.meta.scales == (6**-0.5, 6**-0.5)


# Families whose attention the streamed layers do not restate (scaled dot-product under a causal mask narrowed by a
# decoder's sliding window, or none; soft-capped scores; sinks), refused by the output check rather than explained
# wrongly: disentangled position terms (DeBERTa), a relative position bias (MPNet), an encoder's local windows
# (ModernBERT), and queries pre-scaled before a kernel called with scale 1 (OPT: the module's `scaling`, which the
# streamed layers read as the kernel's). Mistral's and Qwen2's sliding windows and Gemma 2's soft-capping are
# restated.
REFUSED = {"deberta-v2", "mpnet", "modernbert", "opt"}
# Families whose layers run one block module (ALBERT): a recomputation's calls cannot be told apart, so
# recompute="on" is refused by name (and "auto" never recomputes them).
SHARED = {"albert"}


@pytest.mark.parametrize(
    "family", [name for name, family in MATRIX.items() if family.category in ("encoder", "decoder")]
)
def test_every_family_streams_its_gradients_the_same_with_and_without_recompute(family: str) -> None:
    """The gradient pass with every block checkpointed (hooks live through the backward pass) gives the same
    readouts bit for bit as without, on every text family the toolkit ships tests for, or both refuse."""
    implementation = "sdpa" if "sdpa" in MATRIX[family].implementations else MATRIX[family].implementations[0]
    model = tiny_model(family, implementation)
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_z"])
    for name in ("attention_x_gradient", "gradient_weighted_rollout"):
        outcomes = []
        if family in SHARED:
            with pytest.raises(AnalyzerError, match="recompute='off'"):
                interpret.analyze(trace, name, params={"recompute": "on"}, model=model, tokenizer=tokenizer,
                                  strategy="streamed")
        for recompute in ("off",) if family in SHARED else ("off", "on"):
            try:
                result = interpret.analyze(trace, name, params={"recompute": recompute}, model=model, tokenizer=tokenizer,
                                           strategy="streamed")
                outcomes.append(result["readout"])
            except ResultError as err:
                assert "output_error" in str(err)
                outcomes.append("refused")
        if family in REFUSED:
            assert outcomes == ["refused", "refused"], (family, name)
        else:
            assert np.array_equal(outcomes[0], outcomes[-1]) and np.abs(outcomes[0]).max() > 0, (family, name)
