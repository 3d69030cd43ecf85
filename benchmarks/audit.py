"""Audit throughput on the default model (MiniLM-L6 + sentiment head): examples per second, end to end.

Usage: python benchmarks/audit.py [--device cpu|cuda] [--examples 64] [--tokens 64] [--batches 1 8 32] [--repeat 3]
Every text is exactly --tokens tokens (CLS and SEP included; longer texts cut with max_length). Each timed
run is a whole fresh audit into a temporary directory: collect, decisions, analyzers, tables, per-batch
parts, the final Parquet/CSV tables and the summary page. Prints one row per analyzer set and batch size:
examples/s from the median wall time, and the median process CPU time (steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import median_seconds, table  # noqa: E402

from interpret.audit import run_audit  # noqa: E402
from interpret.datasets import Example  # noqa: E402
from interpret.default_model import DEFAULT_MODEL_ID, load_default  # noqa: E402

WORDS = "the film was quietly brilliant although its ending felt rushed and a little dull to me".split()
ANALYZER_SETS = (("rollout",), ("rollout", "flow"))


def make_examples(n: int, tokens: int, tokenizer) -> list[Example]:
    """Return n distinct texts that each encode to at least `tokens` tokens (cut to exactly that by max_length)."""
    examples = []
    for i in range(n):
        words = [WORDS[(i + 7 * j) % len(WORDS)] for j in range(tokens)]  # one word is one token or more
        text = " ".join(words)
        if len(tokenizer(text)["input_ids"]) < tokens:
            raise SystemExit(f"text {i} has fewer than {tokens} tokens; lengthen WORDS or lower --tokens.")
        examples.append(Example(row=i, text=text))
    return examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    model, tokenizer, head = load_default(args.device)
    examples = make_examples(args.examples, args.tokens, tokenizer)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for analyzers in ANALYZER_SETS:
            for batch_size in args.batches:
                out_dir = Path(scratch) / f"{'-'.join(analyzers)}-{batch_size}"

                cpu: list[float] = []

                def audit() -> None:
                    start = time.process_time()
                    run_audit(
                        model, tokenizer, examples, out_dir, analyzers=analyzers, batch_size=batch_size,
                        max_length=args.tokens, head=head, model_id=DEFAULT_MODEL_ID, progress=False, fresh=True,
                    )
                    cpu.append(time.process_time() - start)

                seconds = median_seconds(audit, repeat=args.repeat, device=args.device)
                rows.append([
                    "+".join(analyzers), batch_size, f"{args.examples / seconds:.1f}",
                    f"{seconds * 1e3 / args.examples:.1f}", f"{seconds:.2f}", f"{statistics.median(cpu[1:]):.2f}",
                ])
    threads = os.environ.get("OMP_NUM_THREADS") or str(os.cpu_count())
    print(f"{DEFAULT_MODEL_ID}, {args.tokens} tokens, {args.examples} examples per audit, device {args.device},"
          f" {threads} CPU threads, median of {args.repeat}")
    print(table(["analyzers", "batch", "examples/s", "ms/example", "s/audit", "CPU s/audit"], rows))


if __name__ == "__main__":
    main()
