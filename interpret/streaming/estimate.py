"""What a streamed report takes, estimated before the model loads (torch-free, like `interpret.estimate`).

A streamed run captures no pattern: per example, each layer's queries, keys, values and z, [pos, d_model]
each (float32 at most), and no attention view is embedded. `streamed_estimate` turns the full run's
`ReportEstimate` into the streamed one: capture 4·layers·pos·d_model·4 bytes per example, no view bytes, and
each analyzer's working memory one block of pattern rows (`DEFAULT_BLOCK_BYTES`) and its float64 vectors.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from interpret.estimate import ReportEstimate, page_base_bytes

BLOCK_BYTES = 64 << 20  # interpret.streaming.pattern.DEFAULT_BLOCK_BYTES, without importing torch
_HIDDEN_KEYS = ("hidden_size", "d_model", "n_embd", "dim")


def hidden_size(directory: Path | None, n_heads: int) -> int:
    """Return the model's d_model from config.json (its text config for a multimodal one), else 64·n_heads."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text(encoding="utf-8")) if directory else {}
    except (OSError, ValueError):
        config = {}
    for source in (config, config.get("text_config") or {}):
        for key in _HIDDEN_KEYS:
            value = source.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return 64 * max(n_heads, 1)


def streamed_estimate(estimate: ReportEstimate, d_model: int, n_layers: int, analyzers: int, fmt: str) -> ReportEstimate:
    """Return `estimate` as a streamed run takes it: O(pos·d_model) capture, no attention views."""
    n = estimate.tokens
    capture = 4 * n_layers * n * d_model * 4  # q, k, v and z of every layer, float32
    output = page_base_bytes() if fmt == "html" else 0
    parts = dict(estimate.parts)
    parts["capture"] = 3 * estimate.examples * capture
    parts["analyzers"] = analyzers * (BLOCK_BYTES + 8 * (n_layers + 2) * n * estimate.examples)
    parts["serialize"] = 2 * output
    return dataclasses.replace(
        estimate, layers=0, heads=0, view_values=0, view_bytes=0, output_bytes=output, capture_bytes=capture,
        memory_bytes=sum(parts.values()), parts=parts,
    )
