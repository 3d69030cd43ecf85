"""Video Transformers over tubelets through the `video` adapter: VideoMAE and ViViT read clips [batch, frame,
channel, height, width], one position per tubelet (`t{time}_patch_{row}_{col}`, after ViViT's class token).

Each is captured equal to its eager model's own `output_attentions` (with SDPA where its class has it), leaves
the output untouched, reads clips through the model's processor as the processor itself does, runs rollout, and
is listed by `interpret models` as supported by the adapter; text and a clip of the wrong shape are refused in one
line.
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
from interpret.errors import InputError

TIGHT = 1e-6
_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
          "image_size": 32, "num_frames": 4}

# model type -> (builder, kernels, class token or not)
MODELS: dict[str, tuple[Callable[[], Any], tuple[str, ...], bool]] = {
    "videomae": (lambda: T.VideoMAEModel(T.VideoMAEConfig(**_SIZES, patch_size=8, tubelet_size=2)),
                 ("sdpa", "eager"), False),
    "vivit": (lambda: T.VivitModel(T.VivitConfig(**_SIZES, tubelet_size=[2, 8, 8])),
              ("sdpa", "eager"), True),
}
RUNS = [(name, kernel) for name, (_, kernels, _) in MODELS.items() for kernel in kernels]


def _clips() -> torch.Tensor:
    return torch.randn(2, 4, 3, 32, 32, generator=torch.Generator().manual_seed(4))


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_patterns_equal_the_eager_output_attentions_and_the_output_is_untouched(name: str, kernel: str) -> None:
    build, _, cls = MODELS[name]
    model = built_with(build, kernel)
    trace = interpret.collect(model, None, _clips(), names="*")
    with torch.no_grad():
        reference = eager_copy(model)(pixel_values=trace.encoded.pixel_values, output_attentions=True).attentions
        plain = model(pixel_values=trace.encoded.pixel_values)
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    assert trace.meta.adapter == "video" and trace.meta.kind == "vision" and len(reference) == 2
    # 4 frames in tubelets of 2, 32 × 32 in patches of 8: 2 × 4 × 4 tubelets
    assert trace.encoded.pos == int(cls) + 32
    tokens = trace.encoded.tokens[0]
    assert tokens[int(cls):int(cls) + 2] == ["t0_patch_0_0", "t0_patch_0_1"] and tokens[-1] == "t1_patch_3_3"
    assert (tokens[0] == "[CLS]") == cls and bool(trace.encoded.special[0, 0]) == cls
    for layer, attention in enumerate(reference):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention.float(), atol=TIGHT, rtol=0)


def test_clips_are_read_by_the_models_processor_as_it_reads_them() -> None:
    processor = T.VideoMAEImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    generator = np.random.default_rng(0)
    videos = [[generator.integers(0, 255, (40, 48, 3), dtype=np.uint8) for _ in range(4)] for _ in range(2)]
    model = built_with(MODELS["videomae"][0], "eager")
    trace = interpret.collect(model, processor, videos)
    expected = processor(videos, return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(trace.encoded.pixel_values, expected, atol=0, rtol=0)
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, 32) and np.isfinite(rollout).all() and (rollout >= 0).all()


@pytest.mark.parametrize(("inputs", "match"), [
    ("a clip", "takes clips, not text"),
    (torch.zeros(2, 3, 32, 32), r"shape \(2, 3, 32, 32\).*\[batch, 4, 3, 32, 32\]"),
    (torch.zeros(2, 8, 3, 32, 32), r"4 frames"),
])
def test_text_and_clips_of_the_wrong_shape_are_refused_in_one_line(inputs: Any, match: str) -> None:
    with pytest.raises(InputError, match=match) as err:
        interpret.collect(built_with(MODELS["videomae"][0], "eager"), None, inputs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", list(MODELS))
def test_interpret_models_lists_it(name: str) -> None:
    row = catalog.describe(name)
    assert (row.status, row.adapter, row.kind) == ("supported", "video", "vision"), row
