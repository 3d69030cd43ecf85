"""Peak memory of an audit's batch, from the model's config and the examples' token counts, before it loads.

An audit holds one batch at a time, or two where the analysis of one overlaps the capture of the next
(`interpret.audit.overlap`: trace-only analyzers, no evidence, a core free for the worker): then the capture
and the forward pass below count twice. On a local Ray cluster of CPU actors each actor holds all of it. Its
batches are fixed (batch i holds examples i·size … i·size + size − 1, padded to the longest), so the largest
is known from the token counts. For a batch of `rows` examples padded to `tokens` tokens, `estimate_batch`
adds up:

- base: the interpreter and libraries (`BASE_MEMORY`; on CUDA its runtime's host memory on top);
- weights: the weight files at the dtype they load in;
- capture: every layer's [head, n, n] pattern of every row, float32 (`pattern_bytes`), or streamed, each
  layer's q, k, v and z [n, d_model];
- forward: what the forward pass holds besides: one block's activations (`block_bytes`) and one layer's
  scores and pattern;
- analyzers: per analyzer the report's statement (`estimate.report.analyzer_bytes`): a float64 copy of one
  example's patterns and float64 [layers + 2, n, n] results per row (streamed: one block and its float64
  vectors, `streamed_analyzer_bytes`);
- evidence: one removal pass (`evidence_bytes`) when the audit measures evidence;
- gradients: the largest backward pass of an analyzer that runs the model (they run one after another,
  `estimate.report.GradientPass`): streamed, what `gradient_pass_bytes` keeps; full, `full_gradient_bytes`:
  every block's activations, every layer's pattern and its gradient ([rows, head, n, n] twice, in the
  model's dtype) and their float64 product ∇A ⊙ A (`plugins/_pattern_grad.py`, attention × gradient's and
  gradient-weighted rollout's).

Measured on the default model (MiniLM-L6, batch 32, CPU): rollout + entropy at 122 tokens peaked at 1.01 GB
(stated 1.17 GB), at 502 tokens at 3.78 GB (5.93 GB); the default audit (attnlrp, which forms no float64
product, so the gradient term is about twice its due) 2.25 GB (3.10 GB) and 11.4 GB (21.4 GB). Meant to err
high; `tests/cli/test_long_input.py` compares it with a measured run (peak <= stated <= 2 x peak).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from interpret.estimate.facts import ModelFacts
from interpret.estimate.heads import batch_lengths
from interpret.estimate.memory import pattern_bytes
from interpret.estimate.report import (
    GradientPass, analyzer_bytes, base_bytes, block_bytes, evidence_bytes, loaded_weight_bytes,
    streamed_analyzer_bytes, streamed_capture_bytes,
)


@dataclass(frozen=True)
class BatchEstimate:
    """The estimated peak of an audit batch of `rows` examples padded to `tokens` tokens: memory_bytes in all,
    parts its terms by name (module docstring)."""

    rows: int
    tokens: int
    memory_bytes: int
    parts: dict[str, int]


@dataclass(frozen=True)
class AuditWork:
    """What an audit runs, as its estimate needs it: analyzers (how many), patterns (whether it captures
    every [head, n, n] pattern: False when it streams), evidence (whether it measures it), gradients (one
    GradientPass per analyzer that runs the model), dtype (--dtype; None: float32), cuda (the model's device),
    weight_bytes (the weight files' size), traces (batches alive at once: 2 where the analysis overlaps),
    host_workers (Ray actors that run the batches on this machine's CPU, each loading the model: 0 where the
    batches run in this process or on other machines and devices)."""

    analyzers: int
    patterns: bool
    evidence: bool = False
    gradients: tuple[GradientPass, ...] = ()
    dtype: str | None = None
    cuda: bool = False
    weight_bytes: int = 0
    traces: int = 1
    host_workers: int = 0


def estimate_batch(facts: ModelFacts, rows: int, tokens: int, work: AuditWork) -> BatchEstimate:
    """Return the BatchEstimate of one batch of `rows` examples padded to `tokens` tokens (module docstring)."""
    n, n_heads = tokens, facts.n_heads
    itemsize = facts.loaded_itemsize(work.dtype)
    if work.patterns:
        example = pattern_bytes(facts.n_layers * n_heads, n)
        capture, analyzers = rows * example, analyzer_bytes(facts, work.analyzers, rows, example, n * n)
    else:
        capture = rows * streamed_capture_bytes(facts, n)
        analyzers = streamed_analyzer_bytes(facts, work.analyzers, rows, n)
    parts = {
        "base": base_bytes(work.cuda),
        "weights": loaded_weight_bytes(facts, work.weight_bytes, work.dtype),
        "capture": work.traces * capture,
        "forward": work.traces * (block_bytes(facts, rows * n, itemsize) + 2 * rows * pattern_bytes(n_heads, n)),
        "analyzers": analyzers,
        "evidence": evidence_bytes(n, n_heads) if work.evidence else 0,
        "gradients": max((each.bytes(facts, n, rows, itemsize, work.cuda) for each in work.gradients), default=0),
    }
    if work.host_workers:  # every actor holds all of it; this process (the driver) its base and the weights
        parts = {**{name: work.host_workers * size for name, size in parts.items()},
                 "driver": parts["base"] + parts["weights"]}
    return BatchEstimate(rows=rows, tokens=n, memory_bytes=sum(parts.values()), parts=parts)


def estimate_audit(facts: ModelFacts, lengths: Sequence[int], batch_size: int, work: AuditWork) -> BatchEstimate:
    """Return the largest BatchEstimate of the audit's batches: `lengths` (tokens per example, in input order)
    taken `batch_size` at a time."""
    shapes = set(batch_lengths(list(lengths), batch_size)) or {(0, 0)}
    return max((estimate_batch(facts, rows, n, work) for rows, n in shapes), key=lambda each: each.memory_bytes)


def largest_batch_size(facts: ModelFacts, lengths: Sequence[int], batch_size: int, work: AuditWork, limit: int) -> int:
    """Return a batch size up to `batch_size` whose audit fits in `limit` bytes, found by bisection (0: not even
    1 fits). The estimate grows with the batch size but for where the batches' boundaries fall, so this is the
    largest that fits or one a little below it; it always fits."""
    low, high = 0, batch_size  # fits(low) holds (0 by convention)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_audit(facts, lengths, middle, work).memory_bytes <= limit:
            low = middle
        else:
            high = middle - 1
    return low

