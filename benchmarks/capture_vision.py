"""Benchmark: the cost of capturing true attention patterns from vision models that need an adapter, at the
released models' shapes with random weights (weights do not change the cost), on one image at --size:
hierarchical models whose stages the `swin` and `pyramid` adapters put on one patch grid (SegFormer-B0 (MiT-b0),
PVT v2-b0, Swin-T), the vision towers of Qwen2-VL-2B and Qwen2.5-VL-7B, which pack their patches into one
sequence with `grid_thw` (the `packed` adapter; patches of 14 pixels, so --size must be a multiple of 28; the
Qwen2.5-VL tower attends within windows of 112 pixels in 28 of its 32 blocks, which the capture places on the
[patches, patches] diagonal), SigLIP 2 base's NaFlex tower fed patches of 16 pixels with their grid (the
`naflex` adapter), and V-JEPA 2 ViT-L's video encoder (the `video` adapter) on a clip of 16 frames at --size, in
tubelets of 2 frames × 16 × 16 pixels, with its first 4 of 24 blocks (the cost per block is the same; 24 blocks of
full [tubelets, tubelets] patterns exceed the capture budget, so the capture keeps the head mean).

For each model, on the same input (batch 1) it times:

    forward               the plain model (SDPA where it has it)
    eager + attentions    the eager model with output_attentions=True (transformers' own patterns, each on
                          its stage's grid: [stage tokens, pooled keys] or [window, window]; the Qwen
                          towers return none, so this is their eager forward)
    capture all           interpret.collect of every block's hook_pattern on stage 0's patch grid
                          ([patches, patches] per head; Swin's head-mean, `reduce="mean"`, to stay within the
                          capture budget: 12 blocks of full heads need about 5 GiB at 224 × 224)

and prints the median and minimum of --repeats runs (configurations interleaved round by round), the peak
memory of one run above what was held before it, and the ratios of capture to the two references. The capture
writes [patches, patches] per head and block, which the references never hold: that is its price.

    python benchmarks/capture_vision.py [--models segformer pvt_v2 swin qwen2_vl qwen2_5_vl siglip2 vjepa2]
                                        [--size 224]
                                        [--repeats 5]
                                        [--device cpu|cuda] [--threads N]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import transformers as T  # noqa: E402
from _bench import capture_rows, capture_table, model_parser, parsed, with_kernel  # noqa: E402


VIDEO_FRAMES = 16  # V-JEPA 2's clips (its released checkpoints read 16 or 64 frames)

# name -> (builder from an image size, what the capture reduces over heads)
MODELS: dict[str, tuple[Callable[[int], Any], str | None]] = {
    "segformer": (lambda size: T.SegformerForImageClassification(T.SegformerConfig(image_size=size, num_labels=2)),
                  None),
    "pvt_v2": (lambda size: T.PvtV2ForImageClassification(T.PvtV2Config(image_size=size, num_labels=2)), None),
    "swin": (lambda size: T.SwinForImageClassification(T.SwinConfig(image_size=size, num_labels=2)), "mean"),
    # Qwen2-VL-2B's tower: 32 blocks of 1280, 16 heads (the config's defaults); its patterns are [256, 256] at 224
    "qwen2_vl": (lambda size: _tower("qwen2_vl_vision"), None),
    # Qwen2.5-VL-7B's tower: 32 blocks of 1280, 16 heads, windows of 112 pixels but in blocks 7, 15, 23, 31
    "qwen2_5_vl": (lambda size: _tower("qwen2_5_vl_vision", hidden_size=1280, out_hidden_size=3584), None),
    # SigLIP 2 base's NaFlex tower (the config's defaults: 12 blocks of 768, 12 heads, patches of 16 pixels), fed
    # the size's grid of patches with its spatial_shapes (the `naflex` adapter)
    "siglip2": (lambda size: T.Siglip2VisionModel(T.Siglip2VisionConfig(num_patches=(size // 16) ** 2)), None),
    # V-JEPA 2 ViT-L's encoder (the config's defaults: blocks of 1024, 16 heads, tubelets of 2 × 16 × 16), 4 blocks,
    # a clip of VIDEO_FRAMES frames; run with its predictor skipped, as the `video` adapter runs it
    "vjepa2": (lambda size: T.VJEPA2Model(T.VJEPA2Config(crop_size=size, frames_per_clip=VIDEO_FRAMES,
                                                        num_hidden_layers=4)), "mean"),
}


def _tower(model_type: str, **sizes: Any) -> Any:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from interpret.capture.hf.catalog import _model_class

    config = CONFIG_MAPPING[model_type](**sizes)
    return _model_class(type(config), {}, model_type)(config)


def _inputs(name: str, model: Any, size: int, device: str) -> tuple[dict[str, Any], Any]:
    """Return (the model's own inputs for one random image, what interpret.collect is given for it)."""
    pixels = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    if name == "vjepa2":
        clip = torch.randn(1, VIDEO_FRAMES, 3, size, size, generator=torch.Generator().manual_seed(0)).to(device)
        return {"pixel_values_videos": clip, "skip_predictor": True}, clip
    if name == "siglip2":
        from interpret.capture.hf import naflex

        tower = naflex.tower_of(model)
        patches = torch.randn(1, size // 16, size // 16, tower.patch_dim, generator=torch.Generator().manual_seed(0))
        return tower.inputs(patches.to(device)), patches.to(device)
    if not name.startswith("qwen"):
        return {"pixel_values": pixels.to(device)}, None
    from interpret.capture.hf import packed

    tower = packed.tower_of(model)
    grid = (1, size // 14, size // 14)
    patches = torch.randn(1, *grid, tower.patch_dim, generator=torch.Generator().manual_seed(0)).to(device)
    flat, grid_thw = packed.packed_patches(patches, tower.merge)
    return {"hidden_states": flat, "grid_thw": grid_thw}, patches


def built(name: str, kernel: str, size: int, device: str) -> Any:
    torch.manual_seed(0)
    return with_kernel(MODELS[name][0](size), kernel, device)


def main() -> int:
    parser = model_parser(__doc__, list(MODELS))
    parser.add_argument("--size", type=int, default=224)
    args = parsed(parser)
    rows = []
    for name in args.models:
        fast, eager = built(name, "sdpa", args.size, args.device), built(name, "eager", args.size, args.device)
        inputs, collected = _inputs(name, fast, args.size, args.device)
        rows += capture_rows(name, fast, eager, inputs, args.repeats, args.device, collected, reduce=MODELS[name][1])
    print(capture_table(f"vision capture over the patches: batch 1, {args.size} × {args.size}", rows, args, "patches"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
