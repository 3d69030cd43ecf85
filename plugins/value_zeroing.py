"""Value zeroing (Mohebbi, Zuidema, Chrupała & Alishahi 2023, "Quantifying Context Mixing in Transformers",
EACL): how much the output of a block changes when one token's value vectors are zeroed in that block.

For layer l and each token j, the block is run again on its own input with v_j = 0 in every head of its
attention (the token still attends and is attended to; only what it passes on is removed), and

    C^l_ij = 1 − cos(x̃^{l, ¬j}_i, x̃^l_i)           (cosine distance of the block outputs)

each row over its sum; the layers are aggregated by rollout, R = C^{L−1} · … · C^0 (the paper's global
analysis), and the readout is w · R for the decision's pooling w.

How: one pass of the model on `rows` copies of the example records what every block receives (hidden states
and keyword arguments: masks, rotary embeddings); then each block is called again on those inputs, row r
zeroing the value of token j_r through a scoped wrapper of transformers' attention-kernel lookup (restored
on exit, also when it raises). The last row of every call zeroes nothing and must reproduce the trace's
block output (`replay_error`). Cost per example: about one forward of `rows` copies plus L · ⌈n / (rows−1)⌉
block calls of `rows` rows; memory bounded by `max_rows`.

Arrays (batch first; padding zero):
    rollout   [batch, query, key]         R.
    readout   [batch, key]                w · R.
    per_layer [batch, layer, query, key]  each layer's C (per_layer=True).
Encoders and decoders whose attention goes through transformers' attention interface (the generic
adapter's families); not encoder-decoders (cross attention: the paper zeroes self-attention values).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from interpret.analysis import AnalyzerResult, Check, RunContext
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.estimate.memory import check_memory
from interpret.plugins import _contributions, _decompose
from interpret.plugins._attention import target_of
from interpret.trace import Trace

REPLAY_TOLERANCE = 1e-4  # relative; the replay runs the very kernels of the captured pass


@dataclass(frozen=True)
class ValueZeroingParams:
    """Parameters of value zeroing."""

    max_rows: int = field(default=64, metadata={"help": "rows per block call (tokens zeroed at once + 1); bounds memory"})
    per_layer: bool = field(default=False, metadata={"help": "also return each layer's matrix"})

    def __post_init__(self) -> None:
        if self.max_rows < 2:
            raise ValueError(f"max_rows={self.max_rows} leaves no row to zero a token in; use 2 or more (e.g. 64)")


class ValueZeroing:
    """Value zeroing: cosine distance of each block's output when one token's values are zeroed, rolled out."""

    name = "value_zeroing"
    summary = "Value zeroing (Mohebbi et al. 2023): output change when a token's values are zeroed, rolled out."
    version = "1.0"
    requires = ("*attn.hook_pattern", "*hook_resid_post")
    needs_model = True
    provides = ("readout",)
    Params = ValueZeroingParams

    def run(self, trace: Trace, params: ValueZeroingParams, ctx: RunContext) -> AnalyzerResult:
        """Return the value-zeroing rollout and readout (arrays as the module docstring lists)."""
        _decompose.check_kind(trace, self.name)
        if ctx.model is None:
            raise AnalyzerError(f"{self.name} runs the model's blocks; pass model= to analyze.")
        captured, layers = trace.layers("attn.hook_pattern"), list(range(trace.meta.n_layers))
        if captured != layers or trace.layers("hook_resid_post") != layers:
            raise AnalyzerError(f"{self.name} aggregates every layer; collect all layers (no layers= selection).")
        blocks = [ctx.module(f"blocks.{layer}.hook_resid_pre") for layer in layers]
        attentions = [ctx.module(f"blocks.{layer}.attn.hook_v") for layer in layers]
        batch, pos = trace.encoded.batch, trace.encoded.pos
        rows_max = min(pos, params.max_rows - 1) + 1
        d_model = int(trace["blocks.0.hook_resid_post"].shape[-1])
        heads = int(trace["blocks.0.attn.hook_pattern"].shape[1])
        item = trace["blocks.0.hook_resid_post"].element_size()
        # the recorded block inputs of every layer, one block's attention and MLP activations, the maps
        estimate = rows_max * pos * (len(layers) * d_model * item + heads * pos * 4 + 8 * d_model * item)
        estimate += batch * (2 + (len(layers) if params.per_layer else 0)) * pos * pos * 8
        check_memory(self.name, estimate, f"{rows_max} copies of each example at n={pos}; lower max_rows")
        out = _contributions.new_maps(batch, pos, len(layers) if params.per_layer else None)
        replay_error = 0.0
        mask = trace.encoded.attention_mask.bool().cpu()
        for b in range(batch):
            positions = torch.nonzero(mask[b]).flatten()
            n = len(positions)
            calls = -(-n // (params.max_rows - 1))  # block calls per layer; then as few rows as they need
            rows = -(-n // calls) + 1
            encoded = trace.encoded.rows(torch.full((rows,), b, dtype=torch.long))
            inputs = _record_block_inputs(ctx.run, encoded, blocks)
            matrices = []
            for layer, (block, attention) in enumerate(zip(blocks, attentions)):
                original = trace[f"blocks.{layer}.hook_resid_post"][b].detach().double().cpu()[positions]  # [n, d_model]
                distance = torch.zeros((n, n), dtype=torch.float64)
                for start in range(0, n, rows - 1):
                    zeroed = positions[start : start + rows - 1]  # token j_r of row r; the last row zeroes nothing
                    args, kwargs = inputs[layer]
                    with torch.no_grad(), _zeroing(ctx, attention, zeroed.tolist(), rows):
                        result = block(*args, **kwargs)
                    output = (result[0] if isinstance(result, tuple) else result).detach().double().cpu()[:, positions]
                    replay_error = max(replay_error, _decompose.relative(output[-1], original))
                    cosine = torch.nn.functional.cosine_similarity(output[: len(zeroed)], original[None], dim=-1)  # [r, n]
                    distance[:, start : start + len(zeroed)] = (1.0 - cosine).T
                matrices.append(_decompose.row_normalised(to_numpy(distance.clamp(min=0.0))))
            _contributions.roll_out(out, b, to_numpy(positions), matrices, target_of(ctx.targets, b))
        return _contributions.result(
            self, trace, params, out, ("Value zeroing, rolled out [query × key]", "Value zeroing from the decision's rows"),
            {"replay_error": Check(replay_error, REPLAY_TOLERANCE, "relative |replayed block output − the trace's| (no token zeroed)")},
        )


class _Stop(Exception):
    """Raised by the last block's hook: the recording pass needs nothing after it."""


def _record_block_inputs(
    run: Callable[[Any], Any], encoded: Any, blocks: list[nn.Module]
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Return what every block received (args, kwargs) in one pass of the model on `encoded`."""
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    handles = []

    def record(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen.append((args, dict(kwargs)))
        if module is blocks[-1]:
            raise _Stop

    try:
        for block in blocks:
            handles.append(block.register_forward_pre_hook(record, with_kwargs=True))
        with torch.no_grad(), contextlib.suppress(_Stop):
            run(encoded)
    finally:
        for handle in handles:
            handle.remove()
    if len(seen) != len(blocks):
        raise AnalyzerError(f"value_zeroing saw {len(seen)} of {len(blocks)} blocks run; this model's blocks are not called once each.")
    return seen


@contextlib.contextmanager
def _zeroing(ctx: RunContext, attention: nn.Module, tokens: list[int], rows: int) -> Iterator[None]:
    """Within the context, `attention`'s kernel receives value[r, :, tokens[r], :] = 0 for each row r < len(tokens).

    The kernel lookup of transformers' attention interface is wrapped while the context lasts and restored
    on exit (also when the block raises); other modules' kernels pass through unchanged.
    """
    row_index = torch.arange(len(tokens))
    token_index = torch.tensor(tokens, dtype=torch.long)
    fired = []

    def wrap(kernel: Callable[..., Any]) -> Callable[..., Any]:
        def zeroing_kernel(module, query, key, value, attention_mask, *args, **kwargs):  # noqa: ANN001, ANN202
            if module is attention:
                if value.shape[0] != rows:
                    raise AnalyzerError(
                        f"value_zeroing feeds {rows} rows (one per zeroed token) but {type(module).__name__}'s"
                        f" attention kernel received {value.shape[0]}: the model packs its rows into one sequence"
                        " (a packed vision tower), so no row's values can be zeroed alone; use alti or globenc."
                    )
                value = value.clone()
                value[row_index.to(value.device), :, token_index.to(value.device), :] = 0.0  # [batch, kv_head, pos, d_head]
                fired.append(True)
            return kernel(module, query, key, value, attention_mask, *args, **kwargs)

        return zeroing_kernel

    with ctx.attention_kernels(wrap):
        yield
    if not fired:
        raise AnalyzerError("value_zeroing: the block's attention did not go through transformers' attention interface.")
