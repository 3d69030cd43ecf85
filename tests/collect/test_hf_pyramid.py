"""Pyramid vision Transformers with spatial-reduction attention through the `pyramid` adapter: SegFormer, PVT v2
and GLPN. Each stage runs on a coarser token grid and pools its keys by a strided convolution; the adapter puts
every block on stage 0's patch grid.

The reference is independent of the capture: the eager model's own `output_attentions` ([batch, head, stage
token, pooled key] per block) put on the patch grid by plain loops over patches: a patch reads the row of the
stage token it lies under, and a pooled key's weight is shared equally by the patches under it. Rows sum to one,
the output is untouched, rollout runs, `interpret models` lists the three types as supported by the adapter,
and a run over the capture budget is refused in one line (the patterns cannot be restated from q, k and
log-sum-exps on the patch grid, so nothing streams).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import built_with, eager_copy

import interpret
from interpret.capture.hf import catalog
from interpret.errors import MemoryBudgetError, UnsupportedModelError
from interpret.request import Limits

TIGHT = 1e-6
SIDE = 32
# two stages: stride 4 then 2 (8 × 8 then 4 × 4 tokens), keys pooled 4× then 2× (2 × 2 keys in both)
_SIZES = {"num_encoder_blocks": 2, "depths": [1, 2], "sr_ratios": [4, 2], "hidden_sizes": [8, 16],
          "patch_sizes": [7, 3], "strides": [4, 2], "num_attention_heads": [1, 2], "mlp_ratios": [2, 2]}


def _glpn() -> Any:
    config = T.GLPNConfig(**_SIZES, decoder_hidden_size=8)
    config.image_size = SIDE  # GLPN's config states none (the adapter's default is 224)
    return T.GLPNModel(config)


MODELS: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "segformer": (lambda: T.SegformerModel(T.SegformerConfig(**_SIZES, image_size=SIDE)), ("sdpa", "eager")),
    "pvt_v2": (lambda: T.PvtV2Model(T.PvtV2Config(**_SIZES, image_size=SIDE)), ("eager",)),
    "glpn": (_glpn, ("eager",)),
}
RUNS = [(name, kernel) for name, (_, kernels) in MODELS.items() for kernel in kernels]
# per block: (patches per stage token side, patches per pooled key side)
FACTORS = [(1, 4), (2, 4), (2, 4)]


def _pixels() -> torch.Tensor:
    return torch.randn(2, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(5))


def _on_the_patch_grid(attention: torch.Tensor, factor: int, key_factor: int) -> torch.Tensor:
    """[batch, head, patch, patch] from [batch, head, stage token, pooled key], by plain loops over patches."""
    side = SIDE // 4
    batch, heads = attention.shape[:2]
    out = torch.zeros(batch, heads, side * side, side * side)
    for q in range(side * side):
        qr, qc = divmod(q, side)
        token = (qr // factor) * (side // factor) + qc // factor
        for k in range(side * side):
            kr, kc = divmod(k, side)
            key = (kr // key_factor) * (side // key_factor) + kc // key_factor
            out[:, :, q, k] = attention[:, :, token, key] / key_factor**2
    return out


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_patterns_equal_the_eager_output_attentions_on_the_patch_grid(name: str, kernel: str) -> None:
    model = built_with(MODELS[name][0], kernel)
    trace = interpret.collect(model, None, _pixels(), names="*")
    with torch.no_grad():
        plain = model(pixel_values=trace.encoded.pixel_values)
        reference = eager_copy(model)(pixel_values=trace.encoded.pixel_values, output_attentions=True).attentions
    if isinstance(reference[0], tuple):  # PVT v2 returns one tuple per stage
        reference = [block for stage in reference for block in stage]
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    assert trace.meta.adapter == "pyramid" and trace.meta.n_layers == len(reference) == 3
    assert trace.encoded.pos == (SIDE // 4) ** 2 and trace.encoded.tokens[0][:2] == ["patch_0_0", "patch_0_1"]
    for layer, (attention, (factor, key_factor)) in enumerate(zip(reference, FACTORS)):
        expected = _on_the_patch_grid(attention.float(), factor, key_factor)
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"]
        torch.testing.assert_close(pattern, expected, atol=TIGHT, rtol=0)
        torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]), atol=1e-5, rtol=0)
    # a patch reads the vector of its stage's token: stage 1's 4 × 4 tokens each cover 2 × 2 patches
    q = trace["blocks.1.attn.hook_q"]
    assert torch.equal(q[:, 0], q[:, 1]) and torch.equal(q[:, 0], q[:, SIDE // 4]) and not torch.equal(q[:, 0], q[:, 2])


@pytest.mark.parametrize("name", list(MODELS))
def test_rollout_runs_and_interpret_models_lists_it(name: str) -> None:
    trace = interpret.collect(built_with(MODELS[name][0], "eager"), None, _pixels())
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, trace.encoded.pos) and np.isfinite(rollout).all() and (rollout >= 0).all()
    row = catalog.describe(name)
    assert (row.status, row.adapter, row.kind) == ("supported", "pyramid", "vision"), row
    assert "blocks.{i}.attn.hook_pattern" in row.offered and "pooled key" in row.missing["blocks.{i}.attn.hook_lse"]


def test_a_run_over_the_capture_budget_is_refused_in_one_line_not_streamed() -> None:
    model = T.SegformerForImageClassification(T.SegformerConfig(**_SIZES, image_size=SIDE, num_labels=3)).eval()
    with pytest.raises(MemoryBudgetError, match="cannot run the streamed analyzers instead.*pooled key") as err:
        interpret.explain(model, None, _pixels(), analyzers=["rollout"], evidence=False,
                          limits=Limits(capture_bytes=1024))
    assert "\n" not in str(err.value)


def test_an_image_size_that_does_not_tile_every_stage_is_refused_in_one_line() -> None:
    model = T.SegformerModel(T.SegformerConfig(**_SIZES, image_size=36)).eval()  # 36 is no multiple of 16
    with pytest.raises(UnsupportedModelError, match="needs a multiple of 16") as err:
        interpret.collect(model, None, torch.zeros(1, 3, 36, 36))
    assert "\n" not in str(err.value)


def test_a_capture_with_gradients_is_refused() -> None:
    model = built_with(MODELS["segformer"][0], "eager")
    with pytest.raises(interpret.errors.CaptureError, match="without gradients"):
        interpret.analyze(interpret.collect(model, None, _pixels()), "gradient_weighted_rollout",
                          context=interpret.analysis.run.run_context(interpret.collect(model, None, _pixels()), model, None))
