"""Long inputs: peak memory and time of the streaming readouts beside a plain SDPA forward and eager
`output_attentions`, on a Llama-shaped decoder built from a config (random weights).

    python benchmarks/long_context.py                      # CPU: 4 layers, 8 heads of 64, GQA (2 KV heads), 1k..8k
    python benchmarks/long_context.py --lengths 1024,2048,4096,8192,16384
    python benchmarks/long_context.py --device cuda --size 6b --lengths 8192
    python benchmarks/long_context.py --window 512 --lengths 4096    # Mistral-shaped: a sliding window on every layer

Cases, each measured in a fresh process (`python long_context.py --child ...`; this parent imports no torch, so
the child's peak resident set is its own):
    sdpa       model(ids) under no_grad, attn_implementation="sdpa": the floor.
    eager      model(ids, output_attentions=True) under no_grad, eager attention: every [head, n, n] pattern of
               every layer. Skipped (with its estimate) above --eager-bound bytes of patterns.
    s_rollout  interpret.collect of hook_q, hook_k, hook_lse (the SDPA kernel's own lse, through the recorder;
               offload=True on CUDA) + `rollout`, streamed: what `explain(limits=Limits(streaming=...))` runs.
    s_rollout_k one forward inside `interpret.capture.kernel.kernel_records` (SDPA served by the fused kernel,
               which keeps q, k and its own lse) + `rollout_readout` over `KernelLayers` (the streaming API one
               level down: no trace, no decision step; --offload keeps q, k in pinned host memory on CUDA).
    s_attgrad  interpret.collect of one small hook + `attention_x_gradient`, streamed, with
               rows=readout (its own autograd pass through the model, then the readout rows rebuilt; "auto":
               on CUDA from 4,096 tokens what autograd saves goes to pinned host memory, on the CPU blocks are
               recomputed in the backward pass; --grad-params recompute=on,offload=off,rows=all etc. override).
    s_entropy  interpret.collect as s_rollout + `attention_entropy`, streamed (per-head entropy, one
               fused call per layer); compared with the entropy of the eager patterns where eager ran.
    grad_floor plain PyTorch, no toolkit: the SDPA forward and one backward pass of the last row's top logit to
               the input embeddings, parameters frozen, under the memory policy s_attgrad's "auto" picks (from
               4,096 tokens: every block under non-reentrant checkpointing on the CPU, autograd's saved tensors
               in pinned host memory on CUDA). What any method that needs ∂score/∂(every layer) costs at least:
               the yardstick of s_attgrad beside the forward's.
--window W builds the same shape as a Mistral decoder (Llama with a sliding window of W keys on every layer):
the streamed cases then rebuild each layer's rows in blocks (the fused kernels apply a causal mask only), and
grad_floor's hand-written loop (no mask: SDPA's causal one) ignores the window, so there it is a lower bound.
Streamed cases with the suffix _aten (s_rollout_aten, s_rollout_k_aten, s_entropy_aten, s_attgrad_aten) run
their twin with the Triton kernels unimportable, i.e. on PyTorch's float32 fused kernels (on CUDA the
memory-efficient kernel; interpret.streaming.transposed), as on a machine without Triton; the twin's note then
gives max |twin − _aten| / max |_aten| (both float32 arithmetic; the goal: 1e-5). Each row's note names the
kernel that ran the fused calls (triton where interpret.streaming.triton_attention was imported). The CPU has
no Triton path: there the twins are the same computation.
--interleave times the cases (not eager) alternately in one process instead, repeat rounds after a warm-up,
and prints their time ratios to sdpa under the same load (no memory column): on a shared machine the ratios of
separate processes mean little.
Memory: CPU, the process's peak resident set (VmHWM) and its rise above the resident set once the model and
inputs exist, and (column "alloc GiB") the peak of the bytes the run's tensors held, from one more run under
torch.profiler's memory events: the allocator's view, free of what glibc keeps after a free, as CUDA's
figure is; CUDA, torch.cuda.max_memory_allocated and its rise above the weights and inputs. Time: min and
median of --repeat runs after one warm-up. Equality: the streaming rollout's readout against the rollout of
the eager patterns (rollout_math, float64), where eager ran.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = {
    # Llama-shaped: hidden, layers, heads, kv heads, MLP, vocab.
    "small": dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                  intermediate_size=1408, vocab_size=512),
    "6b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               intermediate_size=11008, vocab_size=32000),
}
CASES = ("sdpa", "eager", "s_rollout", "s_rollout_k", "s_attgrad", "s_entropy", "grad_floor")
ROLLOUTS = ("s_rollout", "s_rollout_k")
STREAMED = (*ROLLOUTS, "s_attgrad", "s_entropy")  # the cases whose fused calls a _aten twin runs without Triton
ATEN = "_aten"


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(key)


def _allocated_peak(run) -> int:  # noqa: ANN001 (a zero-argument callable)
    """Return the most bytes the CPU tensors allocated during `run()` held at once (profiler memory events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    held = peak = 0
    for _, size in events:
        held += size
        peak = max(peak, held)
    return peak


def peak_bytes(reading: int, stages: dict[str, int]) -> int:
    """Return the case's peak: the largest of the whole run's `reading` and each stage's own peak (only
    s_rollout records stages, on CUDA; `max(x, *{}.values())` was max of one int, a TypeError)."""
    return max([reading, *stages.values()])


def _child(args: argparse.Namespace) -> None:
    """Run one case in this fresh process and print one JSON line."""
    if args.case.endswith(ATEN):  # the twin without Triton: its import fails as where Triton is not installed
        sys.modules["interpret.streaming.triton_attention"] = None  # type: ignore[assignment]
    case_name, args.case = args.case, args.case.removesuffix(ATEN)
    import numpy as np
    import torch
    import transformers

    from torch.utils.checkpoint import checkpoint

    import interpret
    from interpret.reference import vocab
    from interpret.streaming.capture import REQUIRES
    from interpret.capture.kernel import kernel_records
    from interpret.streaming.kernel import KernelLayers
    from interpret.streaming.readout import rollout_readout

    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if args.size == "6b" else torch.float32
    tokenizer = vocab.word_tokenizer("the cat sat on mat a dog saw red blue".split(), model_max_length=1 << 20)
    shape = {**SIZES[args.size], "vocab_size": max(SIZES[args.size]["vocab_size"], len(tokenizer))}
    config_class, model_class = (transformers.MistralConfig, transformers.MistralForCausalLM) if args.window else (
        transformers.LlamaConfig, transformers.LlamaForCausalLM)
    window = {"sliding_window": args.window} if args.window else {}
    config = config_class(**shape, **window, max_position_embeddings=max(args.n, 4096), pad_token_id=0, bos_token_id=2,
                          eos_token_id=3)
    config._attn_implementation = "eager" if args.case == "eager" else "sdpa"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype on its device: no float32 copy of 5.9B weights first
    with torch.device(args.device):
        model = model_class(config).to(dtype).eval()
    torch.set_default_dtype(default)
    if args.case in ("grad_floor", "interleave"):
        for param in model.parameters():
            param.requires_grad_(False)  # as the streaming gradient pass does; the analyzers restore flags they change
    block = {"block_mib": args.block_mib}
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, len(tokenizer), (1, args.n), generator=generator).to(args.device)

    stages: dict[str, int] = {}  # s_rollout on CUDA: the peak of each stage (collect, analyze)

    def floor():  # the SDPA forward and one backward to the embeddings, parameters frozen (the docstring's grad_floor)
        long_input = args.n >= 4096
        saved = torch.autograd.graph.save_on_cpu(pin_memory=True) if cuda and long_input else contextlib.nullcontext()
        embeddings = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        with saved:
            if long_input and not cuda:
                hidden = embeddings
                positions = torch.arange(args.n, device=ids.device)[None]
                rotary = model.model.rotary_emb(hidden, positions)
                mask = None  # one unpadded sequence: SDPA's own causal mask
                for block in model.model.layers:
                    hidden = checkpoint(block, hidden, attention_mask=mask, position_ids=positions,
                                        position_embeddings=rotary, use_reentrant=False)
                    hidden = hidden[0] if isinstance(hidden, tuple) else hidden
                logits = model.lm_head(model.model.norm(hidden[:, -1]))
            else:
                logits = model(inputs_embeds=embeddings).logits[:, -1]
            score = logits.max()
        torch.autograd.grad(score, [embeddings])
        return None

    def run(case: str = args.case):  # one measured run; the readout [n] of the rollout cases, or None
        if case == "sdpa":
            with torch.no_grad():
                model(ids)
            return None
        if case == "eager":
            with torch.no_grad():
                return model(ids, output_attentions=True).attentions
        if case == "s_rollout":
            if cuda:
                torch.cuda.reset_peak_memory_stats()  # the stages' peaks below; the case's peak is their max
            trace = interpret.collect(model, tokenizer, ids, names=list(REQUIRES), budget_bytes=None, offload=cuda)
            if cuda:  # the two stages' own peaks, for the note: where a peak above SDPA's comes from
                stages["collect"] = max(stages.get("collect", 0), torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
            result = interpret.analyze(trace, "rollout", params=block, model=model, tokenizer=tokenizer,
                                       strategy="streamed")
            if cuda:
                stages["analyze"] = max(stages.get("analyze", 0), torch.cuda.max_memory_allocated())
            return result["readout"][0]
        if case == "grad_floor":
            return floor()
        if case == "s_entropy":
            trace = interpret.collect(model, tokenizer, ids, names=list(REQUIRES), budget_bytes=None, offload=cuda)
            return interpret.analyze(trace, "attention_entropy", params=block, strategy="streamed")["entropy"][0]  # [layer, head]
        if case == "s_rollout_k":
            with torch.no_grad(), kernel_records(offload=args.offload) as records:
                model(ids)
            weights = np.zeros(args.n)
            weights[-1] = 1.0  # the decision of a causal LM reads its last row
            layers = KernelLayers(records, 0, ids.device)
            return rollout_readout(layers, weights, block_bytes=args.block_mib << 20)[0]
        trace = interpret.collect(model, tokenizer, ids, names=["blocks.0.attn.hook_z"], budget_bytes=None)
        extra = dict(item.split("=", 1) for item in args.grad_params.split(",") if item)
        result = interpret.analyze(trace, "attention_x_gradient", strategy="streamed", params={**block, "rows": "readout", **extra},
                                   model=model, tokenizer=tokenizer)
        return result["readout"][0]

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if args.case == "interleave":  # every case in this one process, alternating: ratios under the same load
        cases = [case for case in args.cases.split(",") if case != "eager" and not case.endswith(ATEN)]
        for case in cases:
            run(case)  # warm-up
        timings: dict[str, list[float]] = {case: [] for case in cases}
        for _ in range(args.repeat):
            for case in cases:
                sync()
                start = time.perf_counter()
                run(case)
                sync()
                timings[case].append(time.perf_counter() - start)
        print(json.dumps({"interleaved": timings}))
        return
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")
        base = _status_kib("VmRSS") * 1024
    times = []
    output = None
    for attempt in range(args.repeat + 1):
        sync()
        start = time.perf_counter()
        output = run()
        sync()
        if attempt:  # the first run warms up
            times.append(time.perf_counter() - start)
        if args.case == "eager":
            output = output if attempt == args.repeat else None
    peak = peak_bytes(torch.cuda.max_memory_allocated() if cuda else _status_kib("VmHWM") * 1024, stages)
    kernel = "triton" if sys.modules.get("interpret.streaming.triton_attention") else "aten"
    record = {"case": case_name, "n": args.n, "min_s": min(times), "median_s": statistics.median(times),
              "peak": peak, "base": base, "stages": stages, "kernel": kernel if args.case in STREAMED else None}
    if not cuda and args.case != "eager":  # the allocator's view, after the resident-set peak is read
        record["alloc"] = _allocated_peak(run)
    if args.case == "eager" and args.out:  # the reference rollout of the eager patterns (after the peak is read)
        from interpret.plugins import rollout_math

        pattern = torch.stack([layer[0] for layer in output]).float().cpu().numpy()  # [layer, head, n, n]
        del output
        augmented = rollout_math.augmented_attention(pattern, head_fusion="mean", residual_weight=0.5)
        weights = np.zeros(args.n)
        weights[-1] = 1.0
        np.save(args.out, rollout_math.chain(augmented, weights=weights)[0])
        logs = np.log(np.where(pattern > 0, pattern, 1.0))  # 0·log 0 = 0
        np.save(args.out.replace(".npy", "_entropy.npy"), -(pattern * logs).sum(-1).mean(-1))  # [layer, head]
    elif args.case in STREAMED and args.out:
        np.save(args.out, np.asarray(output))
    print(json.dumps(record))


def _run_case(case: str, n: int, args: argparse.Namespace, out: str) -> dict | str:
    command = [sys.executable, __file__, "--child", "--case", case, "--n", str(n), "--device", args.device,
               "--size", args.size, "--repeat", str(args.repeat), "--out", out, "--block-mib", str(args.block_mib)]
    command += ["--window", str(args.window)] if args.window else []
    command += ["--offload"] if args.offload else []
    command += ["--grad-params", args.grad_params] if args.grad_params else []
    command += ["--cases", args.cases] if case == "interleave" else []
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return f"over {args.timeout} s"
    if args.log_dir:  # each child's stderr, for a failure's whole story
        Path(args.log_dir, f"{case}_{n}.err").write_text(done.stderr)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return "out of memory" if "memory" in tail.lower() or done.returncode in (-9, 137) else f"failed: {tail[:60]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _interleaved(args: argparse.Namespace) -> None:
    """Print min and median time of each case, timed alternately in one process per length, and its ratio to sdpa."""
    import statistics

    print(f"{'n':>6} {'case':<11} {'min s':>8} {'median s':>9} {'x sdpa (median)':>16} {'x sdpa (min)':>13}")
    for n in [int(x) for x in args.lengths.split(",")]:
        found = _run_case("interleave", n, args, "")
        if isinstance(found, str):
            print(f"{n:>6} {'interleave':<11}  {found}")
            continue
        timings = found["interleaved"]
        sdpa = timings.get("sdpa")
        for case, times in timings.items():
            ratios = ("", "")
            if sdpa:
                ratios = (f"{statistics.median(times) / statistics.median(sdpa):.2f}", f"{min(times) / min(sdpa):.2f}")
            print(f"{n:>6} {case:<11} {min(times):>8.2f} {statistics.median(times):>9.2f} {ratios[0]:>16} {ratios[1]:>13}",
                  flush=True)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--lengths", default="1024,2048,4096,8192")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--eager-bound", type=float, default=6e9, help="skip eager above this many bytes of patterns")
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--log-dir", default="", help="write each case's stderr there")
    parser.add_argument("--block-mib", type=int, default=64, help="the streamed analyzers' block_mib")
    parser.add_argument("--window", type=int, default=0, help="a Mistral decoder with this sliding window (0: Llama)")
    parser.add_argument("--interleave", action="store_true",
                        help="time the cases (not eager) alternately in one process: ratios under the same load, no memory")
    parser.add_argument("--offload", action="store_true", help="s_rollout_k keeps q, k in pinned host memory (CUDA)")
    parser.add_argument("--grad-params", default="", help="s_attgrad's further parameters, e.g. recompute=on,offload=off")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.window < 0:
        parser.error(f"--window {args.window} is negative; give the sliding window in tokens, or 0 for none")
    if args.child:
        _child(args)
        return
    import numpy as np

    shape = SIZES[args.size]
    itemsize = 2 if args.size == "6b" else 4
    window = f", sliding window {args.window}" if args.window else ""
    print(f"{'Mistral' if args.window else 'Llama'}-shaped decoder '{args.size}' ({shape['num_hidden_layers']} layers{window},"
          f" {shape['num_attention_heads']}"
          f" heads of {shape['hidden_size'] // shape['num_attention_heads']}, {shape['num_key_value_heads']} KV heads),"
          f" {args.device}, {os.cpu_count()} CPUs, median of {args.repeat} after a warm-up;"
          f" {'one process, cases alternating' if args.interleave else 'fresh process per case'}")
    if args.interleave:
        _interleaved(args)
        return
    print(f"{'n':>6} {'case':<16} {'min s':>8} {'median s':>9} {'peak GiB':>9} {'rise GiB':>9} {'x sdpa peak':>12}"
          f" {'x sdpa time':>12} {'alloc GiB':>10} {'x sdpa alloc':>13}  note")
    with tempfile.TemporaryDirectory() as scratch:
        for n in [int(x) for x in args.lengths.split(",")]:
            rows: dict[str, dict | str] = {}
            for case in args.cases.split(","):
                patterns = shape["num_hidden_layers"] * shape["num_attention_heads"] * n * n * itemsize
                if case == "eager" and patterns > args.eager_bound:
                    rows[case] = f"skipped: patterns alone {patterns / 2**30:.1f} GiB"
                    continue
                rows[case] = found = _run_case(case, n, args, str(Path(scratch) / f"{case}_{n}.npy"))
                # each case as it ends, on stderr: what a run stopped before the table still shows
                done = found if isinstance(found, str) else f"median {found['median_s']:.3f} s, peak {_gib(found['peak'])} GiB"
                print(f"[{n} {case}] {done}", file=sys.stderr, flush=True)
            sdpa = rows.get("sdpa")
            for case, row in rows.items():
                if isinstance(row, str):
                    print(f"{n:>6} {case:<16} {'':>8} {'':>9} {'':>9} {'':>9} {'':>12} {'':>12} {'':>10} {'':>13}  {row}")
                    continue
                ratio_peak = ratio_time = ratio_alloc = alloc = ""
                if isinstance(sdpa, dict):
                    ratio_peak = f"{row['peak'] / sdpa['peak']:.2f}"
                    ratio_time = f"{row['median_s'] / sdpa['median_s']:.2f}"
                if "alloc" in row:
                    alloc = _gib(row["alloc"])
                    ratio_alloc = f"{row['alloc'] / sdpa['alloc']:.2f}" if isinstance(sdpa, dict) and sdpa.get("alloc") else ""
                notes = []
                if case in ROLLOUTS:  # against the eager patterns' rollout, else against the other streamed one
                    reference = "eager" if isinstance(rows.get("eager"), dict) else next(
                        (other for other in ROLLOUTS if other != case and isinstance(rows.get(other), dict)), None)
                    if reference is not None:
                        streamed = np.load(Path(scratch) / f"{case}_{n}.npy")
                        full = np.load(Path(scratch) / f"{reference}_{n}.npy")
                        notes.append(f"max |streamed - {'full rollout' if reference == 'eager' else reference}| = {np.abs(streamed - full).max():.1e}")
                if case == "s_entropy" and isinstance(rows.get("eager"), dict):
                    streamed = np.load(Path(scratch) / f"{case}_{n}.npy")
                    full = np.load(Path(scratch) / f"eager_{n}_entropy.npy")
                    notes.append(f"max |entropy - eager patterns' entropy| = {np.abs(streamed - full).max():.1e}")
                if case in STREAMED and isinstance(rows.get(case + ATEN), dict):  # Triton's against PyTorch's float32
                    streamed = np.load(Path(scratch) / f"{case}_{n}.npy")
                    aten = np.load(Path(scratch) / f"{case}{ATEN}_{n}.npy")
                    notes.append(f"max |{case} - {case}{ATEN}| / max |{case}{ATEN}| = {np.abs(streamed - aten).max() / np.abs(aten).max():.1e}")
                if row.get("kernel") and args.window and n > args.window:
                    notes.append("rows rebuilt in blocks over each window")
                elif row.get("kernel"):
                    notes.append(f"fused calls: {row['kernel']}")
                if row.get("stages"):
                    notes.append("peak GiB by stage: " + ", ".join(f"{k} {_gib(v)}" for k, v in row["stages"].items()))
                note = "; ".join(notes)
                print(f"{n:>6} {case:<16} {row['min_s']:>8.2f} {row['median_s']:>9.2f} {_gib(row['peak']):>9}"
                      f" {_gib(row['peak'] - row['base']):>9} {ratio_peak:>12} {ratio_time:>12} {alloc:>10}"
                      f" {ratio_alloc:>13}  {note}", flush=True)


if __name__ == "__main__":
    main()
