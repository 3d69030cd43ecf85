"""Memory budgets, the machine's memory, and sizes in words: what every estimate is held against and how a
refusal names it (bytes, FLOPs, the value to raise a limit to). Neither torch nor numpy at import.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from interpret.errors import AnalyzerError

GIB = 1 << 30
CAPTURE_BUDGET = 2 * GIB  # bytes of captured tensors per example, as interpret.explain and collect bound them
BASE_MEMORY = 600 << 20  # the interpreter with torch, transformers, numpy and the toolkit imported, rounded up
# On CUDA, the runtime's host memory on top (context, kernels' images, cuBLAS workspaces): a report on a tiny
# model measured 1.78 GB resident on an H200 (torch 2.11, CUDA 13) against 1.06 GB estimated without it.
CUDA_HOST_MEMORY = GIB
MEMORY_LIMIT_BYTES = 8 * GIB  # a decomposition analyzer refuses above this estimate, before any work
ROWS_PER_PASS = 64  # rows of one evidence pass; all removals of an example go through ceil(rows / 64) passes
PASS_BYTES = GIB  # an evidence pass's activations are kept under about this many bytes (long inputs: fewer rows)
BLOCK_BYTES = 64 << 20  # working memory of one streamed block of pattern rows: scores and pattern, float32
OFFLOAD_TOKENS = 4096  # "auto" offloads (CUDA) and recomputes blocks from this many tokens of batch × length


def pattern_bytes(patterns: int, n: int) -> int:
    """Return the bytes of `patterns` float32 [n, n] attention patterns (one per layer and head captured)."""
    return 4 * patterns * n * n


def pass_row_bytes(pos: int, heads: int) -> int:
    """Return what one row of `pos` tokens is taken to hold in an evidence pass: one layer's float32 attention
    scores and pattern (2 · heads · pos²) and a generous 16 · 1024 · pos of other activations."""
    return 4 * pos * (2 * heads * pos + 16 * 1024)


def rows_per_pass(pos: int, heads: int, limit: int = ROWS_PER_PASS, budget: int = PASS_BYTES) -> int:
    """Return how many rows of `pos` tokens one evidence pass may take: at most `limit`, and few enough that
    their `pass_row_bytes` stay under `budget` bytes (one row at least)."""
    return max(1, min(limit, budget // pass_row_bytes(pos, heads)))


def gradient_policy(on_cuda: bool, tokens: int, offload: str, recompute: str) -> tuple[bool, bool]:
    """Return whether the streamed gradient pass over `tokens` tokens (batch × length) offloads what autograd
    saves to the host (CUDA: offload "on", or "auto" from `OFFLOAD_TOKENS`) and whether it recomputes blocks
    (recompute "on", or "auto" on the CPU from `OFFLOAD_TOKENS`)."""
    offloads = on_cuda and (offload == "on" or (offload == "auto" and tokens >= OFFLOAD_TOKENS))
    recomputes = recompute == "on" or (recompute == "auto" and tokens >= OFFLOAD_TOKENS and not on_cuda)
    return offloads, recomputes


def longest_within(budget: int, patterns: int) -> int:
    """Return the most tokens n whose `patterns` float32 [n, n] patterns fit in `budget` bytes."""
    return math.isqrt(budget // pattern_bytes(max(patterns, 1), 1))


def check_memory(name: str, estimate: int, what: str) -> None:
    """Raise AnalyzerError when `estimate` bytes exceed MEMORY_LIMIT_BYTES, naming what grows and the way out."""
    if estimate > MEMORY_LIMIT_BYTES:
        raise AnalyzerError(
            f"{name} would hold about {estimate / GIB:.1f} GiB ({what}), above {MEMORY_LIMIT_BYTES / GIB:.0f} GiB;"
            " use shorter inputs or fewer examples per call."
        )


def physical_memory() -> int | None:
    """Return the memory this process may use: the machine's physical memory, or its control group's limit
    (cgroup v2 `memory.max`, v1 `memory.limit_in_bytes`) when that is lower; None where neither is known."""
    limits = []
    try:
        limits.append(int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES")))
    except (AttributeError, ValueError, OSError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else None


def default_memory(gpu: bool = False) -> int | None:
    """Return the default --max-memory: 80% of the GPU's memory (gpu) or of this process's, None when unknown."""
    if gpu:
        import torch  # only asked once the run is known to be on a CUDA device, so torch is loaded

        return int(torch.cuda.get_device_properties(0).total_memory * 0.8)
    memory = physical_memory()
    return int(memory * 0.8) if memory else None


def human_bytes(n: int | float, binary: bool = False) -> str:
    """Return bytes in decimal units with three significant digits ('716 MB', '1.07 GB', '950 kB'), or
    `binary` in KiB, MiB, GiB with one decimal ('1.5 GiB', the capture engine's log and refusals)."""
    units = (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)) if binary else (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
    for unit, size in units:
        if n >= size:
            return f"{n / size:.1f} {unit}" if binary else f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def sci(value: float) -> str:
    """Return `value` to two significant digits in e-notation, e.g. 1.26e15 -> '1.3e15'."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _two_digits_up(value: float) -> tuple[int, int]:
    """Return (digits, exponent): `value` rounded up to two significant digits is digits · 10^(exponent − 1),
    digits from 10 to 100 and exponent the power of ten of `value` itself."""
    exponent = math.floor(math.log10(value)) if value > 0 else 0
    return math.ceil(value / 10 ** (exponent - 1) - 1e-9), exponent


def round_up(value: float) -> str:
    """Return `value` rounded up to two significant digits in e-notation, e.g. 1.24e15 -> '1.3e15'."""
    digits, exponent = _two_digits_up(value)
    return f"{digits / 10:.1f}e{exponent}" if digits < 100 else f"1.0e{exponent + 1}"


def round_up_bytes(size: int) -> str:
    """Return a --max-bytes value a little above `size`, to two significant digits (e.g. '1.2GB', '53MB')."""
    target = size * 1.05
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if target >= scale:
            digits, exponent = _two_digits_up(target / scale)
            return f"{digits * 10.0 ** (exponent - 1):.{max(0, 1 - exponent)}f}{unit}"
    return str(math.ceil(target))
