"""What the first report after installing pays for compiling: `interpret report` twice in fresh processes.

Each repeat points numba at an empty cache directory (NUMBA_CACHE_DIR), runs `interpret report --text TEXT`
(the first call: every kernel the run needs is compiled and written to the cache), then runs the same
command again (the second call: the kernels load from the cache). A warm-up report beforehand fits the
default model's head once, so that neither timed call pays for it. Printed: wall and CPU seconds of each
call (median of --repeat, with the min), and the first call's extra cost.

A second table times each compiled kernel alone in a fresh process with an empty cache (compile, run once,
write the cache) against loading it from that cache in another fresh process, after numba's own start-up
(a trivial compiled function), so it shows what a first call is made of. The specialised flow kernel and
the bounds kernel compile only for long inputs; rollout's augmentation only for layers above
`interpret.runtime.threads.SERIAL_WORK` head entries.

    python benchmarks/first_call.py [--text TEXT] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import table  # noqa: E402

TEXT = "The film was a quiet, patient delight, and the cast made every scene feel honest."

# Child mode: compile or load one kernel on a tiny input and print the seconds it took.
KERNELS = {
    "compact flow (_small_flow)": (
        "from interpret.plugins._small_flow import small_max_flows as k\n"
        "caps = np.full((3, 4, 4), 0.25); i = np.zeros(1, np.int64)\n"
        "call = lambda: k(caps, i, i, 1e-15, np.zeros(1), np.zeros((3, 4, 4)),"
        " *[np.empty(16, np.int64) for _ in range(4)])\n"
    ),
    "specialised flow (_dinic)": (
        "from interpret.plugins._dinic import max_flow_pairs as k, workspace\n"
        "caps = np.full((3, 4, 4), 0.25); i = np.zeros(1, np.int64); ranges = np.zeros((4, 3, 4), np.int64)\n"
        "ranges[1] = 4; ranges[3] = 4\n"
        "call = lambda: k(caps, i, i, 1e-15, ranges, np.ones((1, 4)), i, np.empty((0, 4)), i[:0], np.zeros(1),"
        " *workspace(3, 4))\n"
    ),
    "flow bounds (_dinic.flow_bounds)": (
        "from interpret.plugins._dinic import flow_bounds as k\n"
        "caps = np.full((3, 4, 4), 0.25); i = np.zeros(1, np.int64)\n"
        "call = lambda: k(caps, i, i, np.empty((1, 4)), np.empty((1, 4)), np.empty(4))\n"
    ),
    "augmentation (_augment, float32)": (
        "from interpret.plugins._augment import augment_rows as k\n"
        "heads = np.full((2, 4, 4), 0.25, np.float32)\n"
        "call = lambda: k(heads, 0, 0.5, np.empty((4, 4)), 0, 4)\n"
    ),
}
CHILD = (
    "import time, numba, numpy as np\n"
    "import interpret.plugins\n"
    "@numba.njit\n"
    "def start_up(x):\n"
    "    return x + 1\n"
    "start_up(1)\n"  # numba's own start-up, paid by a first and a second call alike
    "{setup}"
    "begin = time.perf_counter(); call(); print(time.perf_counter() - begin)\n"
)


def run_report(text: str, cache: Path, out: Path) -> tuple[float, float]:
    """Return (wall, CPU seconds) of one `interpret report` in a fresh process using the numba cache `cache`."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        ["interpret", "report", "--text", text, "-o", str(out)], env=env, check=True, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def kernel_seconds(setup: str, cache: Path) -> float:
    """Return the seconds of one call of a kernel in a fresh process with numba cache `cache`."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    code = CHILD.format(setup=setup)
    done = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def summary(values: list[float]) -> str:
    """Return 'median (min)' of seconds."""
    return f"{statistics.median(values):.2f} ({min(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        run_report(args.text, root / "warm-up", root / "warm-up.html")  # fits the default head once
        first: list[tuple[float, float]] = []
        second: list[tuple[float, float]] = []
        for attempt in range(args.repeat):
            cache = root / f"cache-{attempt}"
            first.append(run_report(args.text, cache, root / "first.html"))
            second.append(run_report(args.text, cache, root / "second.html"))
        kernels = []
        for name, setup in KERNELS.items():
            compiles, loads = [], []
            for attempt in range(args.repeat):
                cache = root / f"kernel-{len(kernels)}-{attempt}"
                compiles.append(kernel_seconds(setup, cache))
                loads.append(kernel_seconds(setup, cache))
            kernels.append([name, summary(compiles), summary(loads)])
    extra_wall = [a[0] - b[0] for a, b in zip(first, second)]
    extra_cpu = [a[1] - b[1] for a, b in zip(first, second)]
    print(f"interpret report --text {args.text!r} ({len(args.text.split())} words), fresh process each;"
          f" {args.repeat} repeats, median (min); load average {os.getloadavg()[0]:.1f};"
          f" {time.strftime('%Y-%m-%d %H:%M')}")
    print(table(
        ["call", "wall s", "cpu s"],
        [
            ["first (empty numba cache)", summary([w for w, _ in first]), summary([c for _, c in first])],
            ["second (kernels cached)", summary([w for w, _ in second]), summary([c for _, c in second])],
            ["first − second", summary(extra_wall), summary(extra_cpu)],
        ],
    ))
    print()
    print(table(["kernel", "compile + first run s", "load from cache + run s"], kernels))


if __name__ == "__main__":
    main()
