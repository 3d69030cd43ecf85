"""Train the marker toy model, save it to a directory, and print its training time and held-out accuracy.

python benchmarks/train_toy.py OUT_DIR [--seed 0] [--steps 200] [--eval 2000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from interpret.reference.toy import marker_accuracy, marker_dataset, save_toy, train_marker_model


def main(argv: Sequence[str] | None = None) -> int:
    """Return the exit status after training, saving and evaluating the toy model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory to write model.safetensors, config.json and vocab.json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval", type=int, default=2000, help="held-out examples to score")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    model, tokenizer = train_marker_model(seed=args.seed, steps=args.steps)
    seconds = time.perf_counter() - start
    path = save_toy(model, tokenizer, args.out_dir)
    accuracy = marker_accuracy(model, tokenizer, marker_dataset(args.eval, seed=args.seed + 10_000))
    print(f"{'seed':>6} {'steps':>6} {'train_s':>8} {'accuracy':>9}  saved_to")
    print(f"{args.seed:>6} {args.steps:>6} {seconds:>8.2f} {accuracy:>9.4f}  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
