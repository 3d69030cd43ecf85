"""Compute an audit's batches in order, with the analyzers of batch k overlapping the forward pass of batch k+1.

`computed(model, tokenizer, batches, todo, plan)` yields the BatchOutput of each batch index in `todo`,
in that order. When the audit's analyzers read the trace alone (every one has `needs_model = False`) and no
evidence is measured, one worker thread analyses batch k (`analyze_batch`: analyzers, head sums, table
columns) while this thread runs the model on batch k+1 (`capture_batch`); the caller stores finished batches
meanwhile. Torch, NumPy and the compiled kernels release the GIL, so the two run side by side.

Only where the worker has a core (`worker_core_free`): the model runs on an accelerator (this thread mostly
waits for it), or the cores that other processes leave free outnumber torch's intra-op threads (a CPU forward
pass on torch's default threads keeps every core busy: docs/architecture.md, "Overlap", has the timings).

Why the outputs are the very ones `run_batch` computes, bit for bit:
- each stage is a function of its inputs alone: the worker gets the captured batch (its trace, decisions and
  examples), nothing else changes hands, and the outputs come back in batch order;
- randomness: `run_batch` seeds torch before the forward pass, which draws nothing (an eval-mode model without
  dropout: `check_reproducible`), so its analyzers start from the seeded state; the worker seeds torch right
  before each batch's analyzers, and this thread's forward passes draw nothing meanwhile;
- the model runs on this thread only: analyzers that run it (gradients, perturbations, head gates) and the
  evidence measures would run it on the worker too, while the collector's attention interception is
  process-wide during a recorded forward pass (`interpret.capture.hf.attention`), so with any of them every
  batch runs on this thread alone;
- the worker runs with the caller's grad and inference modes, and the thread counts are the process's
  (a reduction split over another number of threads could round differently); NumPy's BLAS is capped per
  job by `interpret.runtime.threads`.
At most two batches are in flight (one analysed, one captured), so memory holds two traces instead of one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch import nn

from interpret.analysis import registry
from interpret.audit.engine import BatchOutput, CapturedBatch, analyze_batch, capture_batch, run_batch
from interpret.pipeline import Plan
from interpret.reading.datasets import Example
from interpret.runtime import threads

# None overlaps where the worker has a core (`worker_core_free`); True wherever the analyzers allow it (tests,
# benchmarks/audit.py); False never. The outputs are the same either way.
ENABLED: bool | None = None


def overlappable(plan: Plan) -> bool:
    """Return whether the analyzers of one batch may run beside the next batch's forward pass: every analyzer
    reads the trace alone and no evidence (which runs the model) is measured."""
    if ENABLED is False or plan.evidence.enabled:
        return False
    return not any(registry.get(name).needs_model for name in plan.analyzers)


def worker_core_free(model: nn.Module) -> bool:
    """Return whether a worker thread beside `model`'s forward passes gets a core of its own (`core_free`)."""
    return core_free(any(parameter.device.type != "cpu" for parameter in model.parameters()))


def core_free(accelerated: bool) -> bool:
    """Return whether a worker thread beside the forward passes gets a core of its own: the model runs on an
    accelerator, or the free cores (`interpret.runtime.threads.free_cores`) outnumber torch's threads."""
    return accelerated or threads.free_cores() > torch.get_num_threads()


def computed(
    model: nn.Module, tokenizer: Any, batches: Sequence[Sequence[Example]], todo: Sequence[int], plan: Plan
) -> Iterator[BatchOutput]:
    """Yield the BatchOutput of every batch index in `todo`, in order (overlapped when `overlappable` and, by
    default, `worker_core_free`)."""
    if len(todo) < 2 or not overlappable(plan) or (ENABLED is None and not worker_core_free(model)):
        for index in todo:
            yield run_batch(model, tokenizer, batches[index], index, plan)
        return
    modes = (torch.is_grad_enabled(), torch.is_inference_mode_enabled())  # thread-local: handed to the worker
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-analyzers") as worker:
        running: Future[BatchOutput] | None = None
        try:
            for index in todo:
                captured = capture_batch(model, tokenizer, batches[index], index, plan)
                if running is not None:
                    yield running.result()
                running = worker.submit(_analyzed, captured, plan.seed, modes)
            if running is not None:
                yield running.result()
                running = None
        finally:
            if running is not None:  # stopped early (an error, or the consumer stopped): let the worker finish
                running.cancel()


def _analyzed(captured: CapturedBatch, seed: int, modes: tuple[bool, bool]) -> BatchOutput:
    """Return `analyze_batch` of `captured` run as `run_batch` runs it: torch seeded, with the caller's grad and
    inference modes (`modes`)."""
    grad, inference = modes
    with torch.inference_mode(inference), torch.set_grad_enabled(grad):
        torch.manual_seed(seed)
        return analyze_batch(captured)
