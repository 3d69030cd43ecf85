"""benchmarks/long_context.py's peak of a case: on CUDA every case but s_rollout records no stages, and
`max(reading, *{}.values())` (max of one int) crashed every such case with a TypeError."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "long_context.py"


def test_a_case_without_stages_has_the_peak_of_its_run() -> None:
    spec = importlib.util.spec_from_file_location("long_context", BENCHMARK)
    assert spec is not None and spec.loader is not None
    long_context = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(long_context)
    assert long_context.peak_bytes(5 << 30, {}) == 5 << 30
    assert long_context.peak_bytes(5 << 30, {"collect": 6 << 30, "analyze": 4 << 30}) == 6 << 30
    assert long_context.peak_bytes(7 << 30, {"collect": 6 << 30}) == 7 << 30
