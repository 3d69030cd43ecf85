"""ViT-MAE's encoder through the `mae` adapter: without noise it shuffles its patches at random in every forward
pass, so a position would be a different patch in each; the adapter keeps them in order, and refuses a model
that drops patches (mask_ratio > 0).

The reference is the eager model's own `output_attentions` when given increasing noise (patches in order); the
capture is the same in every pass, equal to the plain ViT of the same weights (ViT-MAE with every patch in order
is a ViT), and a model left with its default mask ratio is refused in one line naming the setting.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import built_with, eager_copy

import interpret
from interpret.capture.hf import catalog, mae
from interpret.errors import UnsupportedModelError

TIGHT = 1e-6
_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
          "image_size": 32, "patch_size": 8}


def _mae(ratio: float = 0.0) -> Any:
    return T.ViTMAEModel(T.ViTMAEConfig(**_SIZES, mask_ratio=ratio))


def _pixels() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_patterns_equal_the_eager_output_attentions_with_the_patches_in_order(kernel: str) -> None:
    model = built_with(_mae, kernel)
    trace = interpret.collect(model, None, _pixels(), names="*")
    assert trace.meta.adapter == "mae" and trace.encoded.pos == 1 + 16
    assert trace.encoded.tokens[0][:3] == ["[CLS]", "patch_0_0", "patch_0_1"]
    noise = mae.in_order(model, trace.encoded.pixel_values)
    with torch.no_grad():
        reference = eager_copy(model)(pixel_values=trace.encoded.pixel_values, noise=noise, output_attentions=True)
        plain = model(pixel_values=trace.encoded.pixel_values, noise=noise)
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    assert torch.equal(plain.ids_restore[0], torch.arange(16))  # nothing was shuffled
    for layer, attention in enumerate(reference.attentions):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention.float(), atol=TIGHT, rtol=0)
    again = interpret.collect(model, None, _pixels())
    assert torch.equal(again["blocks.1.attn.hook_pattern"], trace["blocks.1.attn.hook_pattern"])


def test_the_encoder_in_order_is_the_vit_of_the_same_weights() -> None:
    """An independent statement of "in order": a ViT built from the same weights attends the same way."""
    model = built_with(_mae, "eager")
    vit = T.ViTModel(T.ViTConfig(**_SIZES), add_pooling_layer=False).eval()
    state = {key: value for key, value in model.state_dict().items() if "position_embeddings" not in key}
    vit.load_state_dict(state, strict=False)
    vit.embeddings.position_embeddings.data.copy_(model.embeddings.position_embeddings.data)
    ours = interpret.collect(model, None, _pixels())
    theirs = interpret.collect(vit, None, _pixels())
    for layer in range(2):
        torch.testing.assert_close(ours[f"blocks.{layer}.attn.hook_pattern"], theirs[f"blocks.{layer}.attn.hook_pattern"],
                                   atol=1e-5, rtol=0)


def test_rollout_runs() -> None:
    trace = interpret.collect(built_with(_mae, "eager"), None, _pixels())
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, 17) and np.isfinite(rollout).all() and (rollout >= 0).all()


def test_a_model_that_drops_patches_is_refused_in_one_line_naming_the_setting() -> None:
    with pytest.raises(UnsupportedModelError, match=r"keeps 25% of its patches.*mask_ratio=0.0") as err:
        interpret.collect(_mae(0.75).eval(), None, _pixels())
    assert "\n" not in str(err.value)
    row = catalog.describe("vit_mae")  # its default config drops 75% of the patches
    assert row.status == "unsupported" and "mask_ratio=0.75" in row.reason, row
