"""Capture overhead on the reference Transformer: forward with no capture, all patterns, all activations.

Usage: python benchmarks/capture.py [--device cpu|cuda] [--batch 8] [--lengths 64 256]
Prints a table: median time, ratio to the plain forward, peak memory of the first run above the loaded model
(measured in a fresh process per row), and the bytes the trace holds.
The Hugging Face part (MiniLM: SDPA, eager output_attentions, our capture) is benchmarks/capture_hf.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import median_seconds, mib, peak_bytes, peak_in_fresh_process, table  # noqa: E402

import interpret  # noqa: E402
from interpret.inputs import Encoded, from_ids  # noqa: E402
from interpret.reference import EncoderClassifier, TransformerConfig  # noqa: E402

CASES = ("no capture", "all patterns", "all activations")


def setup(device: str, batch: int, length: int) -> tuple[EncoderClassifier, Encoded]:
    """Return the benchmark model (d_model 256, 8 heads, 6 layers) and a random batch of `length` tokens."""
    torch.manual_seed(0)
    config = TransformerConfig(
        d_model=256, n_heads=8, n_layers=6, d_mlp=1024, vocab_size=1000, max_positions=512, n_classes=2
    )
    model = EncoderClassifier(config).eval().to(device)
    return model, from_ids(torch.randint(5, 1000, (batch, length))).to(device)


def runner(case: str, model: EncoderClassifier, encoded: Encoded) -> Callable[[], Any]:
    """Return a zero-argument call that runs one configuration."""
    if case == "no capture":
        def plain() -> torch.Tensor:
            with torch.no_grad():
                return model.forward_encoded(encoded)
        return plain
    names = "*hook_pattern" if case == "all patterns" else "*"
    return lambda: interpret.collect(model, None, encoded, names=names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--child", nargs=2, metavar=("LENGTH", "CASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, encoded = setup(args.device, args.batch, int(args.child[0]))
        print(peak_bytes(runner(args.child[1], model, encoded), args.device) or "n/a")
        return
    rows = []
    for length in args.lengths:
        model, encoded = setup(args.device, args.batch, length)
        base = None
        for case in CASES:
            fn = runner(case, model, encoded)
            seconds = median_seconds(fn, repeat=args.repeat, warmup=2, device=args.device)
            base = base or seconds
            result = fn()
            held = result.meta.capture_bytes if isinstance(result, interpret.Trace) else 0
            peak = peak_in_fresh_process(
                __file__, ["--device", args.device, "--batch", str(args.batch), "--child", str(length), case]
            )
            rows.append([length, case, f"{seconds * 1e3:.1f}", f"{seconds / base:.2f}x", mib(peak), mib(held)])
    print(f"reference EncoderClassifier d_model=256, 8 heads, 6 layers, batch {args.batch}, device {args.device},"
          f" {torch.get_num_threads()} threads")
    print(table(["tokens", "capture", "time ms", "vs plain", "peak MiB (first run)", "trace MiB"], rows))


if __name__ == "__main__":
    main()
