"""Exact attention flow (Abnar & Zuidema 2020) as an analyzer.

The layered graph has a node per (layer, position); the arc from (l, i) down to (l − 1, j) has capacity
Â_l[i, j], the residual-augmented, head-averaged attention with rows renormalised. flow[q, k] is the maximum
flow from (L, q) to input token (0, k), solved exactly per pair (plugins/flow_math.py).

Arrays (batch first; padded positions are zero):
    flow    [batch, query, key]   every pair (rows="all"); absent with rows="readout".
    readout [batch, key]          the declared readout: the flow from the decision. When the decision reads one
                                  row ([CLS], a decoder's last token) it is that row; when it reads several
                                  with weights w (a mean-pooled head), it is the max-flow from one virtual node
                                  joined to each top-layer node (L, i) by an arc of capacity w_i.
Encoder-decoder traces use the encoder's self-attention (the paper defines flow for one stack), read out
from the first encoder token (or the `readout` positions given): the decision reads decoder positions, which
that graph does not hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from interpret.analyze import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.analyze.params import as_dict
from interpret.errors import AnalyzerError, ConfigError
from interpret.plugins import flow_math, rollout_math
from interpret.plugins._attention import ReadoutRows, examples, readout_weights, row_sum_error, scatter, scatter_row, target_of
from interpret.trace import Trace

CAPACITY_TOLERANCE = 1e-9
FLOW_BOUND_TOLERANCE = 1e-9


@dataclass(frozen=True)
class FlowParams:
    """Parameters of attention flow."""

    residual: float = field(default=0.5, metadata={"help": "weight w of the identity: w·I + (1−w)·A, rows renormalised"})
    readout: ReadoutRows = field(
        default="auto",
        metadata={"help": "rows read out: auto (the rows the decision reads, weighted as it pools) or positions, e.g. 0,5"},
    )
    rows: Literal["all", "readout"] = field(
        default="readout", metadata={"help": "only the readout rows (n max-flows) or every query row (n² max-flows)"}
    )
    solver: Literal["dinic", "scipy"] = field(
        default="dinic", metadata={"help": "dinic: exact float64 (numba); scipy: integer capacities scaled by 2^30"}
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.residual <= 1.0:
            raise ValueError(f"residual={self.residual} is outside [0, 1]")


class Flow:
    """Attention flow: the maximum flow of attention from a readout token down to each input token."""

    name = "flow"
    summary = "Attention flow (Abnar & Zuidema 2020): exact max-flow through the residual-augmented attention graph."
    version = "2.0"
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
        capacity_error = 0.0
        for example in examples(trace, prefix):
            target = None if prefix else target_of(ctx.targets, example.index)
            readout_of = params.readout if target is not None or params.readout != "auto" else (0,)
            weights = readout_weights(readout_of, target, example.positions)
            try:
                augmented = rollout_math.augmented_layers(example.layers, residual_weight=params.residual)
                if params.rows == "all":
                    flow = flow_math.max_flow_matrix(augmented, None, method=params.solver, workers=ctx.workers or None)
                    full[example.index] = scatter(flow, example.positions, pos)
                row = self._from_decision(augmented, weights, params, ctx)
            except ConfigError as err:
                raise AnalyzerError(f"flow: {err}") from None
            capacity_error = max(capacity_error, row_sum_error(augmented))
            readout[example.index] = scatter_row(row, example.positions, pos)
        arrays = {"readout": NamedArray(readout, ("batch", "key"))}
        views = [View("token_strip", "readout", "Attention flow from the decision")]
        if params.rows == "all":
            arrays["flow"] = NamedArray(full, ("batch", "query", "key"))
            views.insert(0, View("heatmap", "flow", "Attention flow [query × key]"))
        bound = float(max(0.0, (full if params.rows == "all" else readout).max(initial=0.0) - 1.0))
        checks = {
            "capacity_row_sum_error": Check(
                capacity_error, CAPACITY_TOLERANCE, "largest |row sum − 1| of the graph's capacities"
            ),
            "flow_bound_excess": Check(bound, FLOW_BOUND_TOLERANCE, "how far any pair's flow exceeds the source's capacity 1"),
        }
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params), arrays=arrays,
            checks=checks, views=tuple(views), tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )

    @staticmethod
    def _from_decision(augmented: np.ndarray, weights: np.ndarray, params: FlowParams, ctx: RunContext) -> np.ndarray:
        """Return the flow [n] from the decision: one top row, or a virtual node feeding the rows it reads."""
        rows = np.flatnonzero(weights)
        if len(rows) == 1:
            return flow_math.max_flow_matrix(augmented, [int(rows[0])], method=params.solver, workers=ctx.workers or None)[0]
        top = np.zeros((1, *augmented.shape[1:]))
        top[0, 0] = weights  # one more layer whose node 0 is the decision, with an arc of capacity w_i to node i
        graph = np.concatenate([augmented, top])
        return flow_math.max_flow_matrix(graph, [0], method=params.solver, workers=ctx.workers or None)[0]
