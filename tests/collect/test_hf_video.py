"""Video Transformers over tubelets through the `video` adapter: VideoMAE, ViViT and V-JEPA 2 read clips [batch,
frame, channel, height, width], one position per tubelet (`t{time}_patch_{row}_{col}`, after ViViT's class token);
V-JEPA 2 takes them as `pixel_values_videos` and runs its encoder alone (`skip_predictor`).

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
from interpret.errors import InputError, UnsupportedModelError

TIGHT = 1e-6
_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
          "image_size": 32, "num_frames": 4}

_VJEPA2 = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "mlp_ratio": 2.0, "crop_size": 32,
           "frames_per_clip": 4, "patch_size": 8, "tubelet_size": 2, "pred_hidden_size": 16,
           "pred_num_hidden_layers": 1, "pred_num_attention_heads": 2}

# model type -> (builder, kernels, class token or not)
MODELS: dict[str, tuple[Callable[[], Any], tuple[str, ...], bool]] = {
    "videomae": (lambda: T.VideoMAEModel(T.VideoMAEConfig(**_SIZES, patch_size=8, tubelet_size=2)),
                 ("sdpa", "eager"), False),
    "vivit": (lambda: T.VivitModel(T.VivitConfig(**_SIZES, tubelet_size=[2, 8, 8])),
              ("sdpa", "eager"), True),
    "vjepa2": (lambda: T.VJEPA2Model(T.VJEPA2Config(**_VJEPA2)), ("sdpa", "eager"), False),
}
# how each model is run on clips, as its own documentation says
FEEDS: dict[str, Callable[[torch.Tensor], dict[str, Any]]] = {
    "videomae": lambda clips: {"pixel_values": clips},
    "vivit": lambda clips: {"pixel_values": clips},
    "vjepa2": lambda clips: {"pixel_values_videos": clips, "skip_predictor": True},
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
        feed = FEEDS[name](trace.encoded.pixel_values)
        reference = eager_copy(model)(**feed, output_attentions=True).attentions
        plain = model(**feed)
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    assert getattr(trace.output, "predictor_output", None) is None  # V-JEPA 2's predictor does not run
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


def test_clips_read_as_pixel_values_videos_feed_v_jepa_2_and_rollout_runs() -> None:
    """V-JEPA 2's video processor (which needs torchvision) returns `pixel_values_videos`; a stand-in that reads
    clips the same way (frames stacked, channels first) is what the adapter is given."""

    def processor(videos: list[list[np.ndarray]], return_tensors: str) -> dict[str, torch.Tensor]:
        assert return_tensors == "pt"
        stacked = np.stack([np.stack(frames) for frames in videos]).astype(np.float32) / 255.0
        return {"pixel_values_videos": torch.from_numpy(stacked).permute(0, 1, 4, 2, 3)}

    generator = np.random.default_rng(0)
    videos = [[generator.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(4)] for _ in range(2)]
    model = built_with(MODELS["vjepa2"][0], "sdpa")
    trace = interpret.collect(model, processor, videos)
    torch.testing.assert_close(trace.encoded.pixel_values, processor(videos, "pt")["pixel_values_videos"], atol=0, rtol=0)
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


def test_a_model_that_factors_attention_over_time_and_space_is_fed_its_clip_and_refused_for_it() -> None:
    model = built_with(lambda: T.TimesformerModel(T.TimesformerConfig(**_SIZES, patch_size=8)), "eager")
    with pytest.raises(UnsupportedModelError, match="of TimesformerModel runs two self-attentions"):
        interpret.collect(model, None, _clips())


@pytest.mark.parametrize(("name", "reason"), [
    ("timesformer", "runs two self-attentions"),
    ("videoprism_vision_model", "runs 2 stacks of attention blocks (spatial_layers, temporal_layers)"),
])
def test_interpret_models_says_why_factored_attention_is_refused(name: str, reason: str) -> None:
    row = catalog.describe(name)
    assert (row.status, row.adapter) == ("unsupported", "video") and reason in row.reason, row
