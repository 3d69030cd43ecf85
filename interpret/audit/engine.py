"""The audit engine's two reusable steps: compute one batch, store consecutive batches as one checked part.

`run_batch(model, tokenizer, batch, index, settings) -> BatchOutput` depends on nothing but its arguments
(it seeds torch itself), so any engine (this process's loop in `interpret.audit.runner`, or one that spreads
batches over workers) computes the same rows; `write_part(store, outputs)` stores the outputs of consecutive
batches, in index order, as one part of an `AuditDir` (the caller holds the directory's `AuditLock`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import nn

from interpret.analyze import AnalyzerResult, analyze
from interpret.analyze.run import run_context
from interpret.audit.kernel import audit_kernel
from interpret.audit.parts import EVIDENCE_TABLE, AuditDir
from interpret.audit.stats import HeadSums, head_sums
from interpret.audit.tables import Columns, example_columns, example_frame, token_columns, token_frame
from interpret.collect import collect
from interpret.datasets import Example
from interpret.decision import Decision, TargetRequest, decide
from interpret.errors import InputError
from interpret.evidence import evaluate_evidence
from interpret.evidence.aggregate import evidence_rows
from interpret.trace import Trace


@dataclass(frozen=True)
class BatchSettings:
    """What every batch of one audit is computed with (picklable apart from `head`, which is a module)."""

    analyzers: tuple[str, ...]
    params: Mapping[str, Mapping[str, Any]]
    hook_names: tuple[str, ...]
    max_length: int | None
    head: nn.Module | None
    seed: int
    explain_gold: bool
    evidence: bool = False  # also measure each readout's faithfulness (interpret.evidence)
    attention: str | None = None  # the attention implementation the model runs with (interpret.audit.kernel)
    removal: str | None = None  # how the evidence removes tokens (None: interpret.evidence.removal.default_removal)
    streamed: tuple[str, ...] = ()  # the analyzers run streamed (their strategy; the rest run full)


@dataclass(frozen=True)
class BatchOutput:
    """One computed batch: its index, its examples' row ids, its table columns (`interpret.audit.tables`:
    plain lists and arrays, converted to pandas once per part) and its head-map sums."""

    index: int
    rows: tuple[int, ...]
    tokens: Columns
    examples: Columns
    stats: HeadSums
    evidence: pd.DataFrame | None = None  # one row per example × method when the audit measures evidence


def run_batch(model: nn.Module, tokenizer: Any, batch: Sequence[Example], index: int, settings: BatchSettings) -> BatchOutput:
    """Return batch `index`'s tokens rows, examples rows and head-map sums (depends on nothing but its inputs)."""
    with audit_kernel(model, settings.attention):  # capture and model-running analyzers alike
        # Seeded per batch, so a batch's numbers never depend on which batches this process ran before it.
        torch.manual_seed(settings.seed)
        return analyze_batch(capture_batch(model, tokenizer, batch, index, settings), model, tokenizer, settings)


@dataclass(frozen=True)
class CapturedBatch:
    """A batch after the model ran on it: its examples, the trace and each example's decision."""

    index: int
    batch: tuple[Example, ...]
    trace: Trace
    decided: tuple[Decision, ...]


def capture_batch(
    model: nn.Module, tokenizer: Any, batch: Sequence[Example], index: int, settings: BatchSettings
) -> CapturedBatch:
    """Return batch `index` captured: the model's forward pass with the audit's hook names recorded, and the
    decisions read from it (the model's eval-mode forward draws no random numbers: `check_reproducible`), with
    the attention implementation `settings.attention`."""
    texts = [example.text for example in batch]
    try:
        with audit_kernel(model, settings.attention):
            trace = collect(model, tokenizer, texts, names=list(settings.hook_names), max_length=settings.max_length)
    except InputError as err:
        raise InputError(f"example rows {batch[0].row}-{batch[-1].row}: {err}") from None
    gold = [example.label for example in batch]
    decided = decide(model, trace, tokenizer, TargetRequest(gold=settings.explain_gold), settings.head, gold)
    return CapturedBatch(index=index, batch=tuple(batch), trace=trace, decided=tuple(decided))


def analyze_batch(captured: CapturedBatch, model: nn.Module, tokenizer: Any, settings: BatchSettings) -> BatchOutput:
    """Return the BatchOutput of running the audit's analyzers (and evidence, when asked) on a captured batch.

    Called right after `capture_batch` and `torch.manual_seed(settings.seed)` (`run_batch`), or on the
    overlap worker, which seeds torch itself first (`interpret.audit.overlap`). Analyzers that run the model
    run it as it is: inside `run_batch` or `run_audit`, that is with `settings.attention` (switching it here
    would race with a capture on another thread).
    """
    trace, decided, batch = captured.trace, captured.decided, captured.batch
    context = run_context(
        trace, model, tokenizer, head=settings.head, targets=[d.target for d in decided], seed=settings.seed
    )
    results: list[AnalyzerResult] = [
        analyze(trace, name, params=settings.params[name], context=context,
                strategy="streamed" if name in settings.streamed else "full") for name in settings.analyzers
    ]
    rows = [example.row for example in batch]
    found = evidence_rows(evaluate_evidence(trace, results, context, removal=settings.removal), rows) if settings.evidence else None
    return BatchOutput(
        index=captured.index,
        rows=tuple(rows),
        tokens=token_columns(batch, trace.encoded, results),
        examples=example_columns(batch, trace.encoded, decided, results),
        stats=head_sums(results),
        evidence=found,
    )


def write_part(store: AuditDir, outputs: Sequence[BatchOutput]) -> None:
    """Store the outputs of consecutive batches (in index order) as one part of `store`."""
    indices = [output.index for output in outputs]
    if not indices or indices != list(range(indices[0], indices[0] + len(indices))):
        raise ValueError(f"a part holds consecutive batches in order, not {indices}")
    tables = {
        "tokens": token_frame([output.tokens for output in outputs]),
        "examples": example_frame([output.examples for output in outputs]),
    }
    if store.tables[-1] == EVIDENCE_TABLE:
        tables[EVIDENCE_TABLE] = pd.concat([output.evidence for output in outputs], ignore_index=True)
    rows = [row for output in outputs for row in output.rows]
    store.write_part(indices[0], indices[-1], rows, tables, [output.stats for output in outputs])
