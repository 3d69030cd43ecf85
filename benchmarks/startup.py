"""Start-up time of the `interpret` command: `--help`, `--version` and `analyzers list` in fresh processes, and
how fast a report that cannot fit is refused (512 tokens on the default model: the views alone pass 20 MB).

Usage: python benchmarks/startup.py [--repeat 7] [--warmup 1]
Each command runs `--repeat` times in a new Python process (the console script's own interpreter, through
`python -m interpret`), after `--warmup` unmeasured runs that warm the file cache. Printed per command: min
and median wall seconds, peak resident memory (from the child's rusage), whether the child imported torch,
transformers, numpy or numba, and the ratio of its median to the floor (`python -c pass`). Two yardsticks
run in the same loop, interleaved with the commands so that machine noise hits all of them alike:
`python -c pass` (the interpreter alone) and `python -c "import torch, transformers"` (what every start-up
paid before the CLI imported lazily).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# _bench (the table) imports torch: it is imported only after the measurements, because a child started by a
# parent holding torch would report the parent's resident set as its own peak (ru_maxrss survives fork+exec).
_HERE = Path(__file__).resolve().parent

HEAVY = ("torch", "transformers", "numpy", "numba")
# A child prints which heavy modules it ended up importing, after the command ran, on stderr's last line.
_PROBE = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: print(json.dumps([m for m in {heavy!r} if m in sys.modules]), file=sys.stderr))\n"
    "sys.argv = ['interpret', *{args!r}]\n"
    "import runpy\n"
    "runpy.run_module('interpret', run_name='__main__')\n"
)
_LONG = " ".join(["word"] * 600)
COMMANDS: dict[str, list[str]] = {
    "interpret --help": ["--help"],
    "interpret --version": ["--version"],
    "interpret analyzers list": ["analyzers", "list"],
    "interpret report (512 tokens, refused)": ["report", "--text", _LONG, "--max-length", "512", "-o", "-"],
}
EXPECTED = {"interpret report (512 tokens, refused)": 2}  # exit codes other than 0
YARDSTICKS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "python -c 'import torch, transformers'": ["-c", "import torch, transformers"],
}


def run_once(argv: Sequence[str], expected: int = 0) -> tuple[float, int, str]:
    """Return (wall seconds, peak RSS bytes of the child, its stderr) of one fresh `python ARGV`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=err, env=_env())
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not the largest child so far
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    if child.returncode != expected:
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}: {stderr.strip()[-300:]}")
    return seconds, usage.ru_maxrss * 1024, stderr  # ru_maxrss is KiB on Linux


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def main(argv: Sequence[str] | None = None) -> None:
    """Print the start-up table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args(argv)
    cases = {name: ["-c", _PROBE.format(heavy=HEAVY, args=command)] for name, command in COMMANDS.items()}
    cases.update(YARDSTICKS)
    times: dict[str, list[float]] = {name: [] for name in cases}
    peaks: dict[str, int] = {}
    imported: dict[str, str] = {}
    for round_index in range(args.warmup + args.repeat):
        for name, command in cases.items():  # interleaved: a slow spell of the machine hits every case
            seconds, peak, stderr = run_once(command, EXPECTED.get(name, 0))
            if round_index < args.warmup:
                continue
            times[name].append(seconds)
            peaks[name] = peak
            if name in COMMANDS:
                imported[name] = ", ".join(json.loads(stderr.strip().splitlines()[-1])) or "none"
    sys.path.insert(0, str(_HERE))
    from _bench import table

    floor = statistics.median(times["python -c pass"])
    rows = [
        [name, f"{min(t):.3f}", f"{statistics.median(t):.3f}", f"{peaks[name] / 2**20:.0f}",
         imported.get(name, "-"), f"{statistics.median(t) / floor:.1f}"]
        for name, t in times.items()
    ]
    print(f"start-up, {args.repeat} runs each after {args.warmup} warm-up, fresh processes, interleaved")
    print(table(["command", "min s", "median s", "peak MiB", "heavy imports", "× python -c pass"], rows))


if __name__ == "__main__":
    main()
