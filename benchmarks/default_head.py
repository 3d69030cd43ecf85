"""Fit the default model's sentiment head from scratch and compare it with the earlier nearest-centroid head.

python benchmarks/default_head.py [--device cpu] [--threads N] [--write]

Prints one row per head: what it was fitted on, the C chosen by cross-validation, held-out and plain
accuracy, the wall time of the fit (embedding the sentences included) and the peak memory it added. With
--write, the logistic head is shipped as the default model's (`interpret.models.default_model.write_head`:
interpret/data/models/sentiment-head.safetensors and its sha256), unless its held-out accuracy is under
MIN_HELDOUT_ACCURACY (then exit 1, nothing written); the README states the shipped head's numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import peak_bytes  # noqa: E402

from interpret.errors import ConfigError  # noqa: E402
from interpret.models import default_model as dm  # noqa: E402
from interpret.models.loading import load  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    """Return the exit status after fitting and measuring the heads."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--write", action="store_true", help="ship the logistic head as the default model's")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load(str(dm.model_path()), device=args.device)
    heldout, plain = dm.heldout_examples(), dm.plain_examples()
    rows: list[tuple[str, str, str, Any, float, int | None]] = []

    def measure(name: str, data: str, fit: Callable[[], torch.nn.Module]) -> None:
        start = time.perf_counter()
        head = fit()
        seconds = time.perf_counter() - start
        peak = peak_bytes(fit, args.device)
        c = f"{head.card.c:g}" if getattr(head, "card", None) is not None else "-"
        rows.append((name, data, c, head, seconds, peak))

    measure("logistic (default)", f"{len(dm.training_examples())} train", lambda: dm.fit_head(model, tokenizer))
    measure("centroid (earlier)", f"{len(dm.seed_examples())} seed", lambda: dm.fit_centroid_head(model, tokenizer))
    measure(
        "centroid", f"{len(dm.training_examples())} train",
        lambda: dm.fit_centroid_head(model, tokenizer, dm.training_examples()),
    )
    print(f"{'head':<20} {'fitted on':<10} {'C':>6} {'held-out':>16} {'plain':>14} {'fit_s':>7} {'peak_MiB':>9}")
    for name, data, c, head, seconds, peak in rows:
        right_h = round(dm.accuracy(model, tokenizer, head, heldout) * len(heldout))
        right_p = round(dm.accuracy(model, tokenizer, head, plain) * len(plain))
        held = f"{100 * right_h / len(heldout):.1f}% ({right_h}/{len(heldout)})"
        easy = f"{100 * right_p / len(plain):.1f}% ({right_p}/{len(plain)})"
        memory = f"{peak / 2**20:.0f}" if peak is not None else "n/a"
        print(f"{name:<20} {data:<10} {c:>6} {held:>16} {easy:>14} {seconds:>7.1f} {memory:>9}")
    print(f"device {args.device}, torch threads {torch.get_num_threads()}")
    if args.write:
        try:
            print(f"wrote {dm.write_head(rows[0][3].cpu(), dm.model_path())}")
        except ConfigError as error:
            print(f"refused: {error}")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
