"""Capture overhead on the reference Transformer: forward with no capture, all patterns, all activations.

Usage: python benchmarks/capture.py [--device cpu|cuda] [--batch 8] [--lengths 64 256]
Prints a table: median time, ratio to the plain forward, peak memory above the loaded model, captured bytes.
The Hugging Face part (MiniLM: SDPA, eager output_attentions, our capture) is benchmarks/capture_hf.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import median_seconds, mib, peak_bytes, table  # noqa: E402

import interpret  # noqa: E402
from interpret.inputs import from_ids  # noqa: E402
from interpret.reference import EncoderClassifier, TransformerConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = TransformerConfig(
        d_model=256, n_heads=8, n_layers=6, d_mlp=1024, vocab_size=1000, max_positions=512, n_classes=2
    )
    model = EncoderClassifier(config).eval().to(args.device)
    rows = []
    for length in args.lengths:
        encoded = from_ids(torch.randint(5, 1000, (args.batch, length))).to(args.device)

        def plain() -> torch.Tensor:
            with torch.no_grad():
                return model.forward_encoded(encoded)

        cases = {
            "no capture": plain,
            "all patterns": lambda: interpret.collect(model, None, encoded, names="*hook_pattern"),
            "all activations": lambda: interpret.collect(model, None, encoded, names="*"),
        }
        base = None
        for label, fn in cases.items():
            seconds = median_seconds(fn, repeat=args.repeat, device=args.device)
            base = base or seconds
            result = fn()
            held = result.meta.capture_bytes if isinstance(result, interpret.Trace) else 0
            rows.append(
                [length, label, f"{seconds * 1e3:.1f}", f"{seconds / base:.2f}x", mib(peak_bytes(fn, args.device)), mib(held)]
            )
    print(f"reference EncoderClassifier d_model=256, 8 heads, 6 layers, batch {args.batch}, device {args.device}")
    print(table(["tokens", "capture", "time ms", "vs plain", "peak MiB", "captured MiB"], rows))


if __name__ == "__main__":
    main()
