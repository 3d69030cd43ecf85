"""Shifted-window models beyond Swin, Swin V2 and Donut's encoder, served by the Swin adapter: MaskFormer's Swin
backbone (stages that merge 2 × 2 tokens, as Swin's) and Swin2SR (super-resolution: every stage keeps the
full-resolution grid of one-pixel patches, so no token stands for more than one patch).

Each is captured equal to the eager blocks' own windowed weights put on the patch grid by plain loops
(`hf_tiny.windowed_patterns`), leaves the model's output untouched, and runs rollout; `interpret models` lists
both as supported by the Swin adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import built_with, eager_copy, windowed_patterns

import interpret
from interpret.capture.hf import catalog
from interpret.errors import MemoryBudgetError
from interpret.request import Limits

TIGHT = 1e-6

# model type -> (builder, image side, the blocks of a model in order)
MODELS: dict[str, tuple[Callable[[], Any], int, Callable[[Any], list[Any]]]] = {
    "maskformer-swin": (
        lambda: T.MaskFormerSwinModel(T.MaskFormerSwinConfig(
            image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4, mlp_ratio=2.0)),
        32, lambda model: [block for stage in model.encoder.layers for block in stage.blocks]),
    "swin2sr": (
        lambda: T.Swin2SRModel(T.Swin2SRConfig(
            image_size=16, patch_size=1, embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=4, mlp_ratio=2.0,
            upscale=2)),
        16, lambda model: [block for stage in model.encoder.stages for block in stage.layers]),
}


def _pixels(side: int) -> torch.Tensor:
    return torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("name", list(MODELS))
def test_patterns_equal_the_eager_windows_on_the_patch_grid_and_the_output_is_untouched(name: str) -> None:
    build, side, blocks = MODELS[name]
    model = built_with(build, "eager")
    pixels = _pixels(side)
    trace = interpret.collect(model, None, pixels, names="*")
    with torch.no_grad():
        plain = model(pixel_values=trace.encoded.pixel_values)
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    eager = eager_copy(model)
    grid = (side // model.config.patch_size, side // model.config.patch_size)
    assert trace.encoded.pos == grid[0] * grid[1] and trace.encoded.tokens[0][1] == "patch_0_1"
    reference = windowed_patterns(blocks(eager), lambda: eager(pixel_values=trace.encoded.pixel_values), grid, 2)
    assert len(reference) == trace.meta.n_layers == 4
    for hook, expected in reference.items():
        torch.testing.assert_close(trace[hook], expected, atol=TIGHT, rtol=0)
        sums = trace[hook].sum(-1)
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(MODELS))
def test_rollout_runs_and_interpret_models_lists_it(name: str) -> None:
    build, side, _ = MODELS[name]
    trace = interpret.collect(built_with(build, "eager"), None, _pixels(side))
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, trace.encoded.pos) and np.isfinite(rollout).all() and (rollout >= 0).all()
    row = catalog.describe(name)
    assert (row.status, row.adapter, row.kind) == ("supported", "swin", "vision"), row


def test_a_run_over_the_capture_budget_is_refused_in_one_line_not_streamed() -> None:
    """Swin's windows cannot be restated from q, k and a row's log-sum-exp on the patch grid, so a run over the
    capture budget says so and what to do, instead of failing on a hook point it lacks."""
    build, side, _ = MODELS["maskformer-swin"]
    with pytest.raises(MemoryBudgetError, match="cannot run the streamed analyzers instead.*shifted windows") as err:
        interpret.explain(built_with(build, "eager"), None, _pixels(side), analyzers=["rollout"], evidence=False,
                          limits=Limits(capture_bytes=1024))
    assert "\n" not in str(err.value) and "Limits(capture_bytes=" in str(err.value)


def test_the_default_report_runs_the_methods_without_gradients_and_says_why_the_others_gave_way(tmp_path: Any) -> None:
    build, side, _ = MODELS["maskformer-swin"]
    report = interpret.explain(built_with(build, "eager"), None, _pixels(side))
    assert report.run.analyzers == ("rollout", "attention_entropy")
    notes = dict(report.run.notes)
    assert "no gradient with respect to them" in notes["attention_x_gradient skipped"]
    html = report.render(tmp_path / "swin.html").read_text()
    assert "patch_0_0" in html and "attention_x_gradient skipped" in html


def test_attention_entropy_averages_each_stages_heads_where_stages_differ_in_head_count() -> None:
    build, side, _ = MODELS["maskformer-swin"]  # stages of 2 and 4 heads
    trace = interpret.collect(built_with(build, "eager"), None, _pixels(side))
    result = interpret.analyze(trace, "attention_entropy")
    entropy = result["entropy"]
    assert entropy.shape == (2, 4, 1) and "which number 2 to 4" in result.views[0].title
    for layer in range(4):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"].double()
        plain = torch.special.entr(pattern).sum(-1).mean(-1).mean(-1)  # over keys, then query rows, then heads
        np.testing.assert_allclose(entropy[:, layer, 0], plain.numpy(), rtol=1e-12, atol=1e-12)
