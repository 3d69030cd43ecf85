"""Benchmark: the cost of capturing true attention patterns from hierarchical vision models, whose stages the
`swin` and `pyramid` adapters put on one patch grid, at the released models' shapes with random weights
(weights do not change the cost): SegFormer-B0 (MiT-b0), PVT v2-b0 and Swin-T, on one image at --size.

For each model, on the same input (batch 1) it times:

    forward               the plain model (SDPA where it has it)
    eager + attentions    the eager model with output_attentions=True (transformers' own patterns, each on
                          its stage's grid: [stage tokens, pooled keys] or [window, window])
    capture all           interpret.collect of every block's hook_pattern on stage 0's patch grid
                          ([patches, patches] per head; Swin's head-mean, `reduce="mean"`, to stay within the
                          capture budget: 12 blocks of full heads need about 5 GiB at 224 × 224)

and prints the median and minimum of --repeats runs (configurations interleaved round by round), the peak
memory of one run above what was held before it, and the ratios of capture to the two references. The capture
writes [patches, patches] per head and block, which the references never hold: that is its price.

    python benchmarks/capture_vision.py [--models segformer pvt_v2 swin] [--size 224] [--repeats 5]
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


# name -> (builder from an image size, what the capture reduces over heads)
MODELS: dict[str, tuple[Callable[[int], Any], str | None]] = {
    "segformer": (lambda size: T.SegformerForImageClassification(T.SegformerConfig(image_size=size, num_labels=2)),
                  None),
    "pvt_v2": (lambda size: T.PvtV2ForImageClassification(T.PvtV2Config(image_size=size, num_labels=2)), None),
    "swin": (lambda size: T.SwinForImageClassification(T.SwinConfig(image_size=size, num_labels=2)), "mean"),
}


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
        pixels = torch.randn(1, 3, args.size, args.size, generator=torch.Generator().manual_seed(0)).to(args.device)
        rows += capture_rows(name, fast, eager, {"pixel_values": pixels}, args.repeats, args.device,
                             reduce=MODELS[name][1])
    print(capture_table(f"vision capture on the patch grid: batch 1, {args.size} × {args.size}", rows, args, "patches"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
