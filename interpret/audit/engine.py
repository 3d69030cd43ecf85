"""The audit engine's two reusable steps: compute one batch, store consecutive batches as one checked part.

`run_batch(model, tokenizer, batch, index, plan) -> BatchOutput` runs the audit's `interpret.pipeline.Plan` on
one batch and depends on nothing but its arguments (it seeds torch itself), so any engine (this process's loop
in `interpret.audit.runner`, or one that spreads batches over workers) computes the same rows;
`write_part(store, outputs)` stores the outputs of consecutive batches, in index order, as one part of an
`AuditDir` (the caller holds the directory's `AuditLock`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import nn

from interpret.audit.kernel import audit_kernel
from interpret.audit.parts import EVIDENCE_TABLE, AuditDir
from interpret.audit.stats import HeadSums, head_sums
from interpret.audit.tables import Columns, example_columns, example_frame, token_columns, token_frame
from interpret.errors import InputError
from interpret.evidence.aggregate import evidence_rows
from interpret.pipeline import Captured, Plan, analyzed, capture
from interpret.reading.datasets import Example, model_inputs


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


def run_batch(model: nn.Module, tokenizer: Any, batch: Sequence[Example], index: int, plan: Plan) -> BatchOutput:
    """Return batch `index`'s tokens rows, examples rows and head-map sums (depends on nothing but its inputs)."""
    with audit_kernel(model, plan.attention):  # capture and model-running analyzers alike
        # Seeded per batch, so a batch's numbers never depend on which batches this process ran before it.
        torch.manual_seed(plan.seed)
        return analyze_batch(capture_batch(model, tokenizer, batch, index, plan))


@dataclass(frozen=True)
class CapturedBatch:
    """A batch after the model ran on it: its index, its examples and their capture (`interpret.pipeline`)."""

    index: int
    batch: tuple[Example, ...]
    captured: Captured


def capture_batch(model: nn.Module, tokenizer: Any, batch: Sequence[Example], index: int, plan: Plan) -> CapturedBatch:
    """Return batch `index` captured by `pipeline.capture`: the model's forward pass with the plan's hook names
    recorded, and the decisions read from it (the model's eval-mode forward draws no random numbers:
    `check_reproducible`), with the attention implementation `plan.attention`."""
    try:
        with audit_kernel(model, plan.attention):
            captured = capture(plan, model, tokenizer, model_inputs(batch),
                               gold=[example.label for example in batch])
    except InputError as err:
        raise InputError(f"example rows {batch[0].row}-{batch[-1].row}: {err}") from None
    return CapturedBatch(index=index, batch=tuple(batch), captured=captured)


def analyze_batch(captured: CapturedBatch) -> BatchOutput:
    """Return the BatchOutput of `pipeline.analyzed` on a captured batch: after `torch.manual_seed(plan.seed)`
    (`run_batch`, or the overlap worker), with the model's attention as it is (`run_batch` and `run_audit` switch
    it to `plan.attention`; switching it here would race with a capture on another thread)."""
    ran = analyzed(captured.captured)
    batch, trace, results = captured.batch, ran.captured.trace, ran.results
    rows = [example.row for example in batch]
    return BatchOutput(
        index=captured.index,
        rows=tuple(rows),
        tokens=token_columns(batch, trace.encoded, results),
        examples=example_columns(batch, trace.encoded, ran.captured.decided, results),
        stats=head_sums(results),
        evidence=evidence_rows(ran.measured, rows) if ran.captured.plan.evidence.enabled else None,
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
