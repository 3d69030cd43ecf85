"""Retrain the known-answer models the package ships, check that each uses its planted evidence, ship those that do.

python benchmarks/train_toy.py [TASK ...] [--seed 0] [--steps N] [--out DIR]

TASK: `marker` (the toy marker model of interpret.reference.toy) or a task of interpret.evidence.tasks
(default: all six). Each model is trained (`train_marker_model` / `train_task_model`: seeded and
deterministic on one machine, not bit for bit across CPUs), then given to `interpret.evidence.suite.ship`,
which checks it (`planted_check`: held-out accuracy ≥ 0.95, and deleting the planted evidence worth ≥ 0.5
comp − suff more than deleting random tokens). A model that fails is refused (exit 1, nothing written for
it); one that passes is written to DIR (default: the package's interpret/data/models) with its
sha256 in DIR/SHA256SUMS, which `task_model` and `marker_task` check at every load.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from interpret.data.shipped import MODELS_DIR
from interpret.evidence.suite import ship
from interpret.evidence.tasks import MARKER_TASK, TASKS, train_task_model, weights_name
from interpret.reference.toy import train_marker_model


def main(argv: Sequence[str] | None = None) -> int:
    """Return 0 when every model named passed its check and was written, 1 when one was refused."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", metavar="TASK", help=f"of {', '.join([MARKER_TASK, *TASKS])} (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: each trainer's own)")
    parser.add_argument("--out", type=Path, default=MODELS_DIR, help="where to write the weights and SHA256SUMS")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.tasks) - {MARKER_TASK, *TASKS})
    if unknown:
        parser.error(f"unknown task {unknown[0]!r}; pick from {', '.join([MARKER_TASK, *TASKS])}")
    steps = {} if args.steps is None else {"steps": args.steps}
    print(f"{'task':<11} {'train_s':>8} {'accuracy':>9} {'planted':>8} {'random':>8}  verdict")
    status = 0
    for task in args.tasks or [MARKER_TASK, *TASKS]:
        start = time.perf_counter()
        if task == MARKER_TASK:
            model, tokenizer = train_marker_model(args.seed, **steps)
        else:
            model, tokenizer = train_task_model(task, args.seed, **steps)
        seconds = time.perf_counter() - start
        check = ship(task, model, tokenizer, seed=args.seed, directory=args.out)
        verdict = f"refused: {check.failure}" if check.failure else f"wrote {args.out / weights_name(task)}.safetensors"
        status = 1 if check.failure else status
        print(f"{task:<11} {seconds:>8.1f} {check.accuracy:>9.3f} {check.planted:>8.3f} {check.random:>8.3f}  {verdict}")
    return status


if __name__ == "__main__":
    sys.exit(main())
