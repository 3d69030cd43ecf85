"""Exact attention flow (Abnar & Zuidema 2020) as an analyzer; the graph, the normalisation and the solvers
are stated in plugins/flow_math.py.

Arrays (batch first; padded positions are zero):
    flow    [batch, query, key]   every pair (rows="all"); absent with rows="readout".
    readout [batch, key]          the declared readout: the flow from the decision. When the decision reads one
                                  row ([CLS], a decoder's last token) it is that row; when it reads several
                                  with weights w (a mean-pooled head), the max-flow from a virtual source
                                  joined to each top-layer node (L, i) by an arc of capacity w_i
                                  (`flow_math.max_flow_from`), normalised the same way.
Encoder-decoder traces use the encoder's self-attention (the paper defines flow for one stack), read out
from the first encoder token (or the `readout` positions given): the decision reads decoder positions, which
that graph does not hold.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import numpy as np

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.analysis.params import as_dict
from interpret.errors import AnalyzerError, ConfigError
from interpret.plugins import flow_math, rollout_math
from interpret.runtime import threads
from interpret.plugins._attention import (
    READOUT_HELP, ExampleHeads, ReadoutRows, check_residual, examples, readout_weights, residual_field, row_sum_error,
    scatter, scatter_row, target_of,
)
from interpret.target import Target
from interpret.trace import Trace

CAPACITY_TOLERANCE = 1e-9
FLOW_BOUND_TOLERANCE = 1e-9
ROW_SUM_TOLERANCE = 1e-9
# Element operations (~1 ns) per pair × layer × n² of the solver, for `threads.threads_for`: a readout row of
# 64 tokens on MiniLM (64 pairs, 6 layers) takes ~2.5 ms, about 0.4 ns per pair·layer·n² entry.
PAIR_WORK = 0.4


@dataclass(frozen=True)
class FlowParams:
    """Parameters of attention flow."""

    residual: float = residual_field()
    readout: ReadoutRows = field(default="auto", metadata={"help": READOUT_HELP})
    rows: Literal["all", "readout"] = field(
        default="readout", metadata={"help": "only the readout rows (n max-flows) or every query row (n² max-flows)"}
    )
    solver: Literal["dinic", "scipy"] = field(
        default="dinic",
        metadata={"help": "dinic: exact float64 (numba); scipy: capacities scaled by 2^30, rounded down (≤ 1e-9 low per min-cut arc)"},
    )
    normalize: Literal["row", "none"] = field(
        default="row",
        metadata={
            "help": "row: each row's max-flows divided by their sum, so a row sums to 1 (the paper's attention"
            " flow); none: the raw max-flow values (each at most 1, a row sums to far more)"
        },
    )

    def __post_init__(self) -> None:
        check_residual(self.residual, "the flow")
        if self.normalize not in ("row", "none"):
            raise ValueError(f"normalize={self.normalize!r} is unknown; use 'row' (the paper's) or 'none'")


class Flow:
    """Attention flow: the maximum flow of attention from a readout token down to each input token."""

    name = "flow"
    summary = "Attention flow (Abnar & Zuidema 2020): exact max-flow through the residual-augmented attention graph."
    version = "3.0"
    requires = ("*attn.hook_pattern",)
    needs_model = False
    provides = ("readout",)
    Params = FlowParams

    def run(self, trace: Trace, params: FlowParams, ctx: RunContext) -> AnalyzerResult:
        """Return the flow of every example (arrays as the module docstring lists)."""
        prefix = "encoder." if trace.meta.kind == "encoder-decoder" else ""
        pos = trace.encoded.pos
        full = np.zeros((trace.encoded.batch, pos, pos))
        readout = np.zeros((trace.encoded.batch, pos))
        found = list(examples(trace, prefix))
        for example in found:
            _check_cost(len(example.layers), len(example.positions))
        # Examples are independent graphs: with several, they share the cores (each solved on one thread, so
        # its numbers do not depend on how many run beside it); one example spreads its pairs instead.
        work = int(sum(
            len(example.layers) * len(example.positions) ** (4 if params.rows == "all" else 3) * PAIR_WORK
            for example in found
        ))
        example_threads = threads.threads_for(work, ctx.workers or None) if len(found) > 1 else 1
        workers = 1 if example_threads > 1 else ctx.workers or None
        errors = np.zeros(len(found))

        def solve(start: int, stop: int) -> None:
            for number in range(start, stop):
                example = found[number]
                target = None if prefix else target_of(ctx.targets, example.index)
                errors[number] = _example_flow(example, target, params, workers, full, readout, pos)

        # BLAS held at one thread around the whole run: the solvers' own one-thread caps then nest inside it
        # and restore one thread in any order (threadpoolctl's limits are process-wide).
        with threads.blas_threads(0) if example_threads > 1 else contextlib.nullcontext():
            threads.run([partial(solve, *span) for span in threads.spans(len(found), example_threads)], example_threads)
        capacity_error = float(errors.max(initial=0.0))
        arrays = {"readout": NamedArray(readout, ("batch", "key"))}
        views = [View("token_strip", "readout", "Attention flow from the decision")]
        if params.rows == "all":
            arrays["flow"] = NamedArray(full, ("batch", "query", "key"))
            views.insert(0, View("heatmap", "flow", "Attention flow [query × key]"))
        values = full if params.rows == "all" else readout
        bound = float(max(0.0, values.max(initial=0.0) - 1.0))
        checks = {
            "capacity_row_sum_error": Check(
                capacity_error, CAPACITY_TOLERANCE, "largest |row sum − 1| of the graph's capacities"
            ),
            "flow_bound_excess": Check(bound, FLOW_BOUND_TOLERANCE, "how far any pair's flow exceeds the source's capacity 1"),
        }
        if params.normalize == "row":
            checks["row_sum_error"] = Check(
                row_sum_error(values), ROW_SUM_TOLERANCE, "largest |row sum − 1| of the row-normalised flow"
            )
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params), arrays=arrays,
            checks=checks, views=tuple(views), tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )


def _example_flow(
    example: ExampleHeads, target: Target | None, params: FlowParams, workers: int | None,
    full: np.ndarray, readout: np.ndarray, pos: int,
) -> float:
    """Write one example's flow rows into full [batch, pos, pos] (rows="all") and readout [batch, pos]; return
    the largest |row sum − 1| of its graph's capacities."""
    readout_of = params.readout if target is not None or params.readout != "auto" else (0,)
    weights = readout_weights(readout_of, target, example.positions)
    try:
        augmented = rollout_math.augmented_layers(example.layers, residual_weight=params.residual, workers=workers)
        if params.rows == "all":
            flow = flow_math.max_flow_matrix(
                augmented, None, method=params.solver, workers=workers, normalize=params.normalize
            )
            full[example.index] = scatter(flow, example.positions, pos)
        rows = np.flatnonzero(weights)
        if len(rows) == 1:  # one row read: that row of the flow (already computed with rows="all")
            row = (full[example.index][example.positions[rows[0]], example.positions] if params.rows == "all"
                   else flow_math.max_flow_matrix(augmented, [int(rows[0])], method=params.solver,
                                                  workers=workers, normalize=params.normalize)[0])
        else:
            row = flow_math.max_flow_from(
                augmented, weights, method=params.solver, workers=workers, normalize=params.normalize
            )
    except ConfigError as err:
        raise AnalyzerError(f"flow: {err}") from None
    readout[example.index] = scatter_row(row, example.positions, pos)
    return row_sum_error(augmented)


# Flow needs the whole residual-augmented graph: L·n² float64 capacities and the solver's arrays of the same
# size per example (12 layers at 2,048 tokens is 5e7 edges, about 0.4 GB each).
FLOW_MAX_EDGES = 50_000_000


def _check_cost(layers: int, n: int) -> None:
    """Raise AnalyzerError when the flow graph of `layers` layers over `n` tokens has more than FLOW_MAX_EDGES edges."""
    edges = layers * n * n
    if edges > FLOW_MAX_EDGES:
        raise AnalyzerError(
            f"flow: the graph of {layers} layers over {n} tokens has {edges:.2e} edges, over the bound of"
            f" {FLOW_MAX_EDGES:.0e} (flow needs the whole graph); use analyzers that stream (rollout,"
            " attention_x_gradient, gradient_weighted_rollout: streaming=on) or shorter inputs."
        )
