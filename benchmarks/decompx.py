"""DecompX's cost against one forward pass and against Integrated Gradients, by input length.

On the default model (MiniLM-L6 with its sentiment head), CPU, one thread by default, float32 and float64 (the
model and so the decomposition's working precision): for the shipped held-out sentences grouped by token count
(interpret/data/sentiment_heldout.jsonl) and for longer inputs made by joining them, per example (batch of 1):

    forward      one forward pass of the model and head (no gradients): the unit of the other columns
    collect      the capture decompx reads (one forward pass with its hook points), × forward
    decompx      `interpret.analyze(trace, "decompx")`, × forward (analyze only: the trace exists)
    IG           `integrated_gradients` with its default parameters (50 steps), × forward
    MiB          each method's peak resident memory above what was in use before it: one run in a fresh process
                 (the group's first input), so memory freed by earlier runs cannot hide it

Times are CPU time (process_time), the minimum of --repeat runs after a warm-up, for every sentence of the
group; a group's cell is the mean over its sentences. Cost grows as O(n² · d · d_mlp) for decompx (every
position's decomposition over every token) against O(steps · n · d · d_mlp) for IG, so the ratio decompx / IG
grows about linearly with n; the last column says where it crosses 1.

    python benchmarks/decompx.py [--repeat 3] [--per-group 3] [--long 64,128] [--threads 1] [--no-ig]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import peak_bytes, peak_in_fresh_process, table, timings  # noqa: E402

import interpret  # noqa: E402
from interpret.analysis.run import required_names, run_context  # noqa: E402

DATA = Path(interpret.__file__).parent / "data" / "sentiment_heldout.jsonl"
GROUPS = ((8, 12), (13, 16), (17, 20), (21, 64))  # token counts ([CLS] and [SEP] included) of the shipped sentences


def cpu_seconds(fn, repeat: int) -> float:
    """Return the least CPU time of `repeat` calls of fn() after one warm-up call."""
    return min(timings(fn, repeat, clock=time.process_time))


def inputs(tokenizer, per_group: int, long: list[int]) -> list[tuple[str, list[str]]]:
    """Return (label, texts) per group: shipped sentences by token count, then joined sentences of `long` tokens."""
    texts = [json.loads(line)["text"] for line in DATA.read_text(encoding="utf-8").splitlines()]
    counts = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    groups = []
    for low, high in GROUPS:
        chosen = [text for text, n in zip(texts, counts) if low <= n <= high][:per_group]
        if chosen:
            groups.append((f"shipped n={low}–{high}", chosen))
    for n in long:
        joined, at = "", 0
        while len(tokenizer(joined)["input_ids"]) < n:
            joined, at = (joined + " " + texts[at % len(texts)]).strip(), at + 1
        ids = tokenizer(joined, add_special_tokens=False)["input_ids"][: n - 2]
        groups.append((f"joined n={n}", [tokenizer.decode(ids)]))
    return groups


def measure(model, tokenizer, head, text: str, repeat: int, with_ig: bool) -> dict[str, float]:
    """Return the costs of one text (seconds; MiB) as the module docstring lists them."""
    names = list(dict.fromkeys(["*attn.hook_pattern", *required_names(["decompx"])]))
    trace = interpret.collect(model, tokenizer, [text], names=names)
    ids, mask = trace.encoded.input_ids, trace.encoded.attention_mask

    def forward():
        with torch.no_grad():
            return head(model(input_ids=ids, attention_mask=mask).last_hidden_state, mask)

    ctx = run_context(trace, model, tokenizer, head=head)
    out = {"n": trace.encoded.pos, "forward": cpu_seconds(forward, repeat)}
    out["collect"] = cpu_seconds(lambda: interpret.collect(model, tokenizer, [text], names=names), repeat)
    decompx = lambda: interpret.analyze(trace, "decompx", context=ctx)  # noqa: E731
    out["decompx"] = cpu_seconds(decompx, repeat)
    if with_ig:
        ig = lambda: interpret.analyze(trace, "integrated_gradients", context=ctx)  # noqa: E731
        out["ig"] = cpu_seconds(ig, max(1, repeat // 2) if out["n"] > 64 else repeat)
    return out


def child(method: str, dtype_name: str, text: str) -> None:
    """Print the peak bytes of one `method` run on `text` in this (fresh) process, after the model and trace."""
    from interpret.models.default_model import load_default

    model, tokenizer, head = load_default("cpu")
    model, head = model.to(getattr(torch, dtype_name)), head.to(getattr(torch, dtype_name))
    trace = interpret.collect(model, tokenizer, [text], names=list(dict.fromkeys(["*attn.hook_pattern", *required_names(["decompx"])])))
    ctx = run_context(trace, model, tokenizer, head=head)
    peak = peak_bytes(lambda: interpret.analyze(trace, method, context=ctx))
    print("n/a" if peak is None else peak)


def fresh_mib(method: str, dtype_name: str, text: str, threads: int) -> str:
    """Return the peak MiB of one `method` run in a fresh process ('n/a' where unmeasurable)."""
    peak = peak_in_fresh_process(__file__, ["--child", method, dtype_name, text, "--threads", str(threads)])
    return "n/a" if peak is None else f"{peak / 2**20:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--per-group", type=int, default=3, help="shipped sentences per length group")
    parser.add_argument("--long", default="64,128", help="token counts of the joined inputs (comma-separated)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--no-ig", action="store_true", help="skip Integrated Gradients")
    parser.add_argument("--child", nargs=3, metavar=("METHOD", "DTYPE", "TEXT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        child(*args.child)
        return
    from interpret.models.default_model import load_default

    model, tokenizer, head = load_default("cpu")
    long = [int(n) for n in args.long.split(",") if n]
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        model, head = model.to(dtype), head.to(dtype)
        for label, texts in inputs(tokenizer, args.per_group, long):
            runs = [measure(model, tokenizer, head, text, args.repeat, not args.no_ig) for text in texts]
            mean = {key: statistics.mean(run[key] for run in runs) for key in runs[0]}
            ratio = {key: statistics.mean(run[key] / run["forward"] for run in runs) for key in ("collect", "decompx", "ig") if key in mean}
            rows.append([
                dtype_name, label, f"{mean['n']:.1f}", f"{1000 * mean['forward']:.1f}", f"{ratio['collect']:.1f}",
                f"{ratio['decompx']:.1f}", f"{ratio['ig']:.1f}" if "ig" in ratio else "—",
                f"{statistics.mean(run['decompx'] / run['ig'] for run in runs):.2f}" if "ig" in ratio else "—",
                fresh_mib("decompx", dtype_name, texts[0], args.threads),
                fresh_mib("integrated_gradients", dtype_name, texts[0], args.threads) if "ig" in mean else "—",
            ])
            print(table(["dtype", "inputs", "n", "forward ms", "collect ×", "decompx ×", "IG ×", "decompx / IG",
                         "decompx MiB", "IG MiB"], rows[-1:]).splitlines()[-1], flush=True)
    print(f"\nCPU time per example (batch 1, {args.threads} thread(s), min of {args.repeat}) as a multiple of one forward"
          " pass of the model and head; MiB: peak resident memory above the start of the call.")
    print(table(["dtype", "inputs", "n", "forward ms", "collect ×", "decompx ×", "IG ×", "decompx / IG",
                 "decompx MiB", "IG MiB"], rows))


if __name__ == "__main__":
    main()
