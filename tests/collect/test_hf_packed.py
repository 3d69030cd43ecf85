"""Vision towers that pack a batch's patches into one sequence (Qwen2-VL's and its kin's) through the `packed`
adapter: images [batch, frame, row, column, patch_dim], one position per patch in the order the blocks see.

The Qwen2-VL tower's patterns equal a plain statement of its attention (softmax(q·kᵀ/√d) per image, q and k from
its own projection and rotary embedding); every tower's SDPA capture equals its eager capture (the kernel's own
weights); a batch captures what each image captures alone (the per-image kernel calls gathered, the packed rows
unflattened; a capture with gradients is refused); the output is the model's own; the processor's packed patches are read back exactly; rollout runs;
`interpret models` lists each as supported by the adapter. A tower that attends within windows (Qwen2.5-VL) names
its positions in window order, places each window's call on the diagonal (so every block's z is its pattern times
its values) and does not offer hook_lse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import assert_each_alone, assert_listed, built_with
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

import interpret
from interpret.capture.hf import catalog, packed
from interpret.errors import CaptureError, HookNameError, InputError

TIGHT = 1e-6

# model type -> config sizes of a tiny tower (patches of 4 pixels)
SIZES: dict[str, dict[str, Any]] = {
    "qwen2_vl_vision": {"depth": 2, "embed_dim": 32, "hidden_size": 48, "num_heads": 4, "mlp_ratio": 2},
    "qwen3_vl_vision": {"depth": 3, "hidden_size": 32, "out_hidden_size": 48, "num_heads": 4, "intermediate_size": 64,
                        "num_position_embeddings": 64, "deepstack_visual_indexes": [1]},
    "glm4v_vision": {"depth": 2, "hidden_size": 32, "out_hidden_size": 48, "num_heads": 4, "intermediate_size": 64,
                     "image_size": 32},
    "kimi_k25_vision": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64},
    "video_llama_3_vision": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
                             "intermediate_size": 64},
    # windows of 16 pixels = 2 × 2 merge windows of 2 × 2 patches; block 1 attends over the whole image
    "qwen2_5_vl_vision": {"depth": 3, "hidden_size": 32, "out_hidden_size": 48, "num_heads": 4, "intermediate_size": 64,
                          "window_size": 16, "fullatt_block_indexes": [1]},
}


def _builder(model_type: str) -> Callable[[], Any]:
    config = CONFIG_MAPPING[model_type](**SIZES[model_type], patch_size=4)
    model_class = catalog._model_class(type(config), {}, model_type)
    assert model_class is not None
    return lambda: model_class(config)


def _tower(model_type: str, kernel: str) -> Any:
    return built_with(_builder(model_type), kernel)


def _patches(model: Any, batch: int = 3, seed: int = 1) -> torch.Tensor:
    """Return random patches [batch, 1, 2 × rows, 3 × columns, patch_dim] of the tower's merge windows."""
    tower = packed.tower_of(model)
    grid = (1, 2 * tower.multiple[0], 3 * tower.multiple[1])
    return torch.randn(batch, *grid, tower.patch_dim, generator=torch.Generator().manual_seed(seed))


def _plain_qwen2_vl(model: Any, pixel_values: torch.Tensor, layer: int) -> torch.Tensor:
    """Return [batch, head, pos, pos]: softmax(q·kᵀ/√d_head) of each image alone, q and k from block `layer`'s
    own qkv projection and rotary embedding applied to its input (the residual stream run through the blocks)."""
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb_vision
    from transformers.vision_utils import get_vision_position_ids

    rows = []
    for image in pixel_values:
        grid = torch.tensor([image.shape[:3]])
        order = get_vision_position_ids(grid, model.spatial_merge_size)
        flat = image[0][order[:, 0], order[:, 1]]  # [pos, patch_dim]: the tower's order
        hidden = model.patch_embed(flat)
        cos, sin = model.rotary_pos_emb(hidden, order)
        for block in model.blocks[:layer]:
            hidden = block(hidden, cu_seqlens=torch.tensor([0, len(flat)]), position_embeddings=(cos, sin))
        attention = model.blocks[layer].attn
        heads = attention.num_heads
        q, k, _ = attention.qkv(model.blocks[layer].norm1(hidden)).reshape(len(flat), 3, heads, -1).unbind(1)
        q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
        scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / q.shape[-1] ** 0.5
        rows.append(scores.softmax(dim=-1))
    return torch.stack(rows)


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_qwen2_vl_patterns_equal_the_plain_statement_and_the_output_is_untouched(kernel: str) -> None:
    model = _tower("qwen2_vl_vision", kernel)
    pixel_values = _patches(model)
    trace = interpret.collect(model, None, pixel_values, names="*")
    assert (trace.meta.adapter, trace.meta.kind, trace.encoded.pos) == ("packed", "vision", 24)
    with torch.no_grad():
        for layer in range(2):
            expected = _plain_qwen2_vl(model, pixel_values, layer)
            torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], expected, atol=TIGHT, rtol=0)
        flat, grid_thw = packed.packed_patches(pixel_values, 2)
        plain = model(hidden_states=flat, grid_thw=grid_thw)
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state.unflatten(0, (3, 24)))
    assert torch.equal(trace.output.pooler_output, plain.pooler_output.unflatten(0, (3, 6)))


@pytest.mark.parametrize("model_type", list(SIZES))
def test_sdpa_equals_eager_and_a_batch_equals_each_image_alone(model_type: str) -> None:
    traces = {}
    for kernel in ("eager", "sdpa"):
        model = _tower(model_type, kernel)
        pixel_values = _patches(model)
        traces[kernel] = assert_each_alone(model, pixel_values, TIGHT)
    for name in traces["eager"].names():
        if name.endswith(("hook_pattern", "hook_attn_scores", "hook_lse", "hook_z")):
            torch.testing.assert_close(traces["sdpa"][name], traces["eager"][name], atol=1e-5, rtol=0, msg=name)
    pattern = traces["sdpa"]["blocks.1.attn.hook_pattern"]
    torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]), atol=TIGHT, rtol=0)


def test_positions_are_named_in_the_towers_order() -> None:
    model = _tower("qwen2_vl_vision", "sdpa")
    trace = interpret.collect(model, None, _patches(model, batch=1))
    # merge windows of 2 × 2 patches, row-major: the first window, then the next to its right
    assert trace.encoded.tokens[0][:6] == ["patch_0_0", "patch_0_1", "patch_1_0", "patch_1_1", "patch_0_2", "patch_0_3"]
    assert trace.encoded.tokens[0][-1] == "patch_3_5" and not bool(trace.encoded.special.any())
    assert packed.tower_of(model).names((2, 2, 2))[:5] == ["t0_patch_0_0", "t0_patch_0_1", "t0_patch_1_0", "t0_patch_1_1", "t1_patch_0_0"]


def _processor() -> Any:
    return T.Qwen2VLImageProcessorPil(patch_size=4, temporal_patch_size=2, merge_size=2, min_pixels=64,
                                      max_pixels=100_000)


def test_images_are_read_by_the_processor_exactly_and_rollout_runs() -> None:
    images = [np.random.default_rng(seed).integers(0, 255, (16, 24, 3), dtype=np.uint8) for seed in range(2)]
    model = _tower("qwen2_vl_vision", "sdpa")
    trace = interpret.collect(model, _processor(), images)
    made = _processor()(images=images, return_tensors="pt")
    flat, grid_thw = packed.packed_patches(trace.encoded.pixel_values, 2)
    assert torch.equal(flat, made["pixel_values"]) and torch.equal(grid_thw, made["image_grid_thw"])
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, 24) and np.isfinite(rollout).all() and (rollout >= 0).all()


@pytest.mark.parametrize(("inputs", "match"), [
    ("an image", "takes images, not text"),
    (torch.zeros(2, 3, 16, 24), r"shape \(2, 3, 16, 24\).*\[batch, frame, row, column, 96\]"),
    (torch.zeros(1, 1, 3, 4, 96), r"3 × 4 patches does not divide into the tower's 2 × 2 merge windows"),
    ([np.zeros((16, 24, 3), np.uint8), np.zeros((24, 24, 3), np.uint8)], "2 different patch grids"),
])
def test_text_wrong_shapes_and_mixed_sizes_are_refused_in_one_line(inputs: Any, match: str) -> None:
    with pytest.raises(InputError, match=match) as err:
        interpret.collect(_tower("qwen2_vl_vision", "sdpa"), _processor(), inputs)
    assert "\n" not in str(err.value)


def test_a_capture_with_gradients_is_refused_in_one_line() -> None:
    from interpret.capture.api import capturable_for
    from interpret.capture.engine import capture, select_sites

    model = _tower("qwen2_vl_vision", "sdpa")
    capturable = capturable_for(model)
    encoded = capturable.prepare(None, _patches(model))  # type: ignore[misc]
    for names in (["*hook_pattern"], ["*hook_resid_post"]):
        with pytest.raises(CaptureError, match="no gradient with respect to them") as err:
            capture(capturable, encoded, select_sites(capturable, names, None), grad=True)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("model_type", ["qwen3_vl_vision", "kimi_k25_vision", "video_llama_3_vision"])
def test_interpret_models_lists_it(model_type: str) -> None:
    assert_listed(model_type, "packed", "vision")


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_a_windowed_tower_places_each_window_on_the_diagonal_in_window_order(kernel: str) -> None:
    model = _tower("qwen2_5_vl_vision", kernel)
    pixel_values = _patches(model, batch=2)  # 4 × 6 patches: a window of 4 × 4 patches, then one of 4 × 2
    trace = interpret.collect(model, None, pixel_values, names="*")
    tokens = trace.encoded.tokens[0]
    assert tokens[:6] == ["patch_0_0", "patch_0_1", "patch_1_0", "patch_1_1", "patch_0_2", "patch_0_3"]
    assert tokens[15:18] == ["patch_3_3", "patch_0_4", "patch_0_5"] and sorted(tokens) == sorted(set(tokens))
    inside = torch.zeros(24, 24, dtype=torch.bool)
    inside[:16, :16] = inside[16:, 16:] = True
    for layer, windowed in ((0, True), (1, False), (2, True)):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"]
        values, z = trace[f"blocks.{layer}.attn.hook_v"], trace[f"blocks.{layer}.attn.hook_z"]
        torch.testing.assert_close(torch.einsum("bhqk,bkhd->bqhd", pattern, values), z, atol=TIGHT, rtol=0)
        assert bool((pattern[..., ~inside] == 0).all()) == windowed and bool((pattern[..., inside] > 0).all())
        torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 4, 24), atol=TIGHT, rtol=0)
    torch.testing.assert_close(trace["hook_embed"], trace["blocks.0.hook_resid_pre"], atol=0, rtol=0)
    with torch.no_grad():
        flat, grid_thw = packed.packed_patches(pixel_values, 2)
        plain = model(hidden_states=flat, grid_thw=grid_thw)
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state.unflatten(0, (2, 24)))
    with pytest.raises(HookNameError, match="attend within windows"):
        interpret.collect(model, None, pixel_values, names="*hook_lse")


def test_interpret_models_lists_a_windowed_tower_without_hook_lse() -> None:
    row = assert_listed("qwen2_5_vl_vision", "packed", "vision")
    assert "attend within windows" in row.missing["blocks.{i}.attn.hook_lse"]


def test_the_default_report_runs_the_methods_without_gradients_and_says_why_the_others_gave_way(tmp_path: Any) -> None:
    report = interpret.explain(_tower("qwen2_5_vl_vision", "sdpa"), None, _patches(_tower("qwen2_5_vl_vision", "sdpa")))
    assert report.run.analyzers == ("rollout", "attention_entropy") and report.run.kind == "vision"
    notes = dict(report.run.notes)
    assert "no gradient with respect to them" in notes["attention_x_gradient skipped"]
    html = report.render(tmp_path / "tower.html").read_text()
    assert "patch_3_5" in html and "attention_x_gradient skipped" in html


@pytest.mark.parametrize("model_type", ["qwen2_vl_vision", "qwen2_5_vl_vision"])
def test_per_example_head_gates_act_on_each_images_own_rows(model_type: str) -> None:
    from interpret.capture.gates import head_gates

    model = _tower(model_type, "sdpa")
    pixel_values = _patches(model)
    gates = torch.rand(3, model.config.depth, 4, generator=torch.Generator().manual_seed(7))
    with head_gates(model, gates):
        gated = interpret.collect(model, None, pixel_values).output.last_hidden_state
    plain = interpret.collect(model, None, pixel_values).output.last_hidden_state
    assert not torch.allclose(gated, plain, atol=1e-3)
    for image in range(3):
        with head_gates(model, gates[image]):
            alone = interpret.collect(model, None, pixel_values[image:image + 1]).output.last_hidden_state
        torch.testing.assert_close(gated[image], alone[0], atol=TIGHT, rtol=0)


def test_a_tower_is_probed_once_however_often_it_is_made_capturable() -> None:
    from interpret.capture.hf import generic, registry

    model = _tower("qwen2_vl_vision", "sdpa")
    for _ in range(3):
        registry.hf_capturable(model, None)
    assert len(generic._LAYOUTS[model]) == 1
