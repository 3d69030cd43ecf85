"""Per-head attention statistics as an analyzer: how spread out each head's attention is, and how much of
it goes to special tokens ([CLS], [SEP], ...), per example; full (from every [head, n, n] pattern) or streamed
(from each layer's queries, keys and row log-sum-exps, one fused attention call per chunk of heads,
`interpret.streaming.entropy`: O(n·d) memory, equal to the full statistics, tests 1e-5).

Arrays (batch first):
    entropy            [batch, layer, head]  mean over real query rows of −Σ_k p·log p over real keys (nats;
                                             0·log 0 = 0). 0 = every row on one key; log n = uniform. Where
                                             the layers have different head counts (Swin's and SegFormer's
                                             stages) the head axis is 1: each layer's mean over its heads.
                                             Where the attention has sinks (`trace.meta.sinks`: a row's keys
                                             hold less than one, the sink the rest, s = 1 − Σ_k p), the sink
                                             is one more outcome of the row: −Σ_k p·log p − s·log s.
    special_attention  [batch, layer, head]  mean over real query rows of the attention on special keys.
    n_real             [batch]               real positions per example (the aggregation weight is 1).
It declares a head map (`entropy`), which the audit averages over examples into heads.csv; it has no
readout, because it says nothing about which token drove the decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from interpret.analysis import AnalyzerResult, Check, HeadMap, NamedArray, RunContext, View
from interpret.analysis.params import as_dict
from interpret.arrays import to_numpy
from interpret.plugins._streaming import check_streamed, full, lse_check, streamed
from interpret.streaming.capture import REQUIRES, layers_from_trace, real_positions
from interpret.streaming.entropy import row_statistics
from interpret.trace import Trace

CHUNK_ELEMENTS = 1 << 18  # float64 elements per step of `head_statistics` on a CPU (2 MiB: stays in cache)
# On an accelerator (no cache to stay in; each step is a dozen kernel launches): 128 MiB per buffer, so a
# batch of 32 examples of 64 tokens on a 6-layer, 12-head model is one step, not 32.
DEVICE_CHUNK_ELEMENTS = 1 << 24
LOG_FLOOR = -1e4  # stands for log 0 (see `head_statistics`)


@dataclass(frozen=True)
class EntropyParams:
    """Parameters of the attention statistics."""

    stack: Literal["auto", "encoder", "decoder"] = full(
        "auto", "which self-attention stack: auto (the only one, or the encoder's)"
    )
    block_mib: int = streamed(64, "streamed: working memory of one chunk of heads' fused call, in MiB (at least 1)")

    def __post_init__(self) -> None:
        check_streamed(self)


class AttentionEntropy:
    """Per-head attention entropy and attention on special tokens."""

    name = "attention_entropy"
    summary = "Per-head attention entropy (nats) and share of attention on special tokens, per example."
    version = "1.2"  # 1.2: an attention sink is one more outcome of its row; 1.1: float64 statistics in chunks
    requires = ("*attn.hook_pattern",)
    streamed_requires = REQUIRES
    needs_model = False
    provides = ("head_map",)
    Params = EntropyParams

    def run(self, trace: Trace, params: EntropyParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-example [layer, head] statistics (arrays as the module docstring lists)."""
        if ctx.strategy == "streamed":
            return self._streamed(trace, params, ctx)
        stack = "decoder" if params.stack == "decoder" else "encoder"
        prefix = f"{stack}." if trace.meta.kind == "encoder-decoder" else ""
        side = trace.encoded.decoder if prefix == "decoder." and trace.encoded.decoder is not None else trace.encoded
        indices = trace.layers("attn.hook_pattern", prefix)
        if not indices:
            trace.stack("attn.hook_pattern", prefix)  # raises HookNameError, naming what was captured
        layers = [trace[f"{prefix}blocks.{i}.attn.hook_pattern"].detach() for i in indices]
        real = side.attention_mask.to(layers[0].device).bool()
        special = side.special.to(layers[0].device).bool() & real
        heads = sorted({layer.shape[1] for layer in layers})
        sinks = trace.meta.sinks
        if len(heads) == 1:
            entropy, on_special, row_sum_error = head_statistics(layers, real, special, sinks=sinks)
            how = ""
        else:  # stages with their own head counts (Swin, SegFormer): one [layer, head] table cannot hold them
            entropy, on_special, row_sum_error = _head_means(layers, real, special, sinks)
            how = f"; mean over each layer's heads, which number {heads[0]} to {heads[-1]}"
        checks = {
            "pattern_row_sum_error": Check(
                row_sum_error, 1e-4,
                "largest (row sum − 1) of the attention rows the statistics read, whose sinks take the rest"
                if sinks else "largest |row sum − 1| of the attention rows the statistics read",
            )
        }
        return self._result(trace, params, ctx, to_numpy(entropy), to_numpy(on_special), real, checks, how)

    def _streamed(self, trace: Trace, params: EntropyParams, ctx: RunContext) -> AnalyzerResult:
        per_example = layers_from_trace(trace, self.name, ctx.device)
        special = (trace.encoded.special.bool() & trace.encoded.attention_mask.bool()).cpu()
        batch, n_layers = trace.encoded.batch, len(per_example[0])
        n_heads = per_example[0][0].heads if n_layers else 0
        entropy = np.zeros((batch, n_layers, n_heads))
        on_special = np.zeros_like(entropy)
        worst = 0.0
        for b, positions in enumerate(real_positions(trace)):
            keys = special[b, positions]
            for index, layer in enumerate(per_example[b]):
                rows, share, error = row_statistics(layer, keys, params.block_mib << 20)
                entropy[b, index] = to_numpy(rows.mean(-1))
                on_special[b, index] = to_numpy(share.mean(-1))
                worst = max(worst, error)
        checks = {"lse_error": lse_check(worst, "every row")}
        return self._result(trace, params, ctx, entropy, on_special, trace.encoded.attention_mask, checks, ", streamed")

    def _result(self, trace: Trace, params: EntropyParams, ctx: RunContext, entropy: np.ndarray,
                on_special: np.ndarray, real: Tensor, checks: dict, how: str) -> AnalyzerResult:
        """Return the result of the statistics [batch, layer, head] of the examples whose real positions are `real`
        (`how`: what the titles add after the unit, ", streamed" or "; mean over ...")."""
        detail = f" ({how.lstrip(',; ')})" if how else ""
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params, ctx.strategy),
            arrays={
                "entropy": NamedArray(entropy, ("batch", "layer", "head")),
                "special_attention": NamedArray(on_special, ("batch", "layer", "head")),
                "n_real": NamedArray(to_numpy(real.sum(-1)).astype(np.float64), ("batch",)),
            },
            checks=checks,
            views=(
                View("table", "entropy", f"Attention entropy by layer and head (nats{how})"),
                View("table", "special_attention", f"Attention on special tokens by layer and head{detail}"),
            ),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            head_map=HeadMap("entropy"),
        )


def _head_means(
    layers: Sequence[Tensor], real: Bool[Tensor, "batch key"], special: Bool[Tensor, "batch key"], sinks: bool = False,
) -> tuple[Tensor, Tensor, float]:
    """Return `head_statistics` of layers [batch, head, query, key] whose head counts differ, each layer's averaged
    over its heads: entropy and special attention [batch, layer, 1] (the head axis holds the mean), the worst row
    sum error."""
    per_layer = [head_statistics([layer], real, special, sinks=sinks) for layer in layers]
    entropy = torch.cat([stats[0].mean(-1, keepdim=True) for stats in per_layer], dim=1)
    on_special = torch.cat([stats[1].mean(-1, keepdim=True) for stats in per_layer], dim=1)
    errors = [stats[2] for stats in per_layer]
    return entropy, on_special, max(errors) if not any(np.isnan(errors)) else float("nan")


def attention_entropy(
    pattern: Float[Tensor, "batch layer head query key"], real: Bool[Tensor, "batch key"]
) -> Float[Tensor, "batch layer head"]:
    """Return each example's mean over real query rows of −Σ p·log p over real keys (nats, float64)."""
    return head_statistics(list(pattern.unbind(1)), real)[0]


def head_statistics(
    layers: Sequence[Float[Tensor, "batch head query key"]],
    real: Bool[Tensor, "batch key"],
    special: Bool[Tensor, "batch key"] | None = None,
    sinks: bool = False,
) -> tuple[Float[Tensor, "batch layer head"], Float[Tensor, "batch layer head"], float]:
    """Return per example, layer and head the mean over real query rows of the entropy −Σ_k p·log p over real
    keys (nats) and of the attention on `special` keys (zeros without them), and the largest |row sum − 1| of
    the real rows, all computed in float64 from the layers' patterns (any float dtype). With `sinks` each row's
    sink holds s = 1 − Σ_k p, one more outcome (−s·log s joins the entropy), and the error is the largest
    row sum − 1 (a row may hold less than one, never more).

    The float64 work goes through one reused [layer, batch slice, head, query, key] buffer of about
    CHUNK_ELEMENTS (DEVICE_CHUNK_ELEMENTS off the CPU), not a whole [batch, layer, head, query, key] tensor:
    large fresh allocations cost their page faults on every call, more than the arithmetic. p·log p with
    p = 0 is 0 (entr(0) = 0).
    """
    batch, n_heads, q_len, k_len = layers[0].shape
    device = layers[0].device
    chunk = CHUNK_ELEMENTS if device.type == "cpu" else DEVICE_CHUNK_ELEMENTS
    step = max(1, chunk // max(1, len(layers) * n_heads * q_len * k_len))
    buffer = torch.empty(len(layers), min(step, batch), n_heads, q_len, k_len, dtype=torch.float64, device=device)
    logs = torch.empty_like(buffer)
    real64 = real.to(torch.float64)
    special64 = None if special is None else special.to(torch.float64)
    entropy, on_special, row_sum_errors = [], [], []
    for start in range(0, batch, step):
        stop = min(start + step, batch)
        pattern, log_p = buffer[:, : stop - start], logs[:, : stop - start]
        rows = real[start:stop]
        for index, layer in enumerate(layers):
            pattern[index].copy_(layer[start:stop])
        # log 0 = −inf is clamped to LOG_FLOOR, below the log of the least positive float64 (−744.4), so
        # 0·log 0 gives 0 while every positive p keeps its own log (NaN stays NaN).
        torch.log(pattern, out=log_p).clamp_(min=LOG_FLOOR).mul_(pattern)
        # [layer, batch, head, query]; padding keys drop out of the contraction with the real-key mask
        if bool(rows.all()):
            row_entropy = log_p.sum(-1).neg_()
        else:
            row_entropy = torch.einsum("lbhqk,bk->lbhq", log_p, real64[start:stop]).neg_()
        row_sums = pattern.sum(-1).masked_fill_(~rows[None, :, None, :], 1.0)
        if sinks:
            sink = (1.0 - row_sums).clamp_(min=0.0)
            row_entropy -= sink * torch.log(sink).clamp_(min=LOG_FLOOR)
        entropy.append(_mean_over_real_rows(row_entropy, rows))
        if special64 is not None:
            row_special = torch.einsum("lbhqk,bk->lbhq", pattern, special64[start:stop])
            on_special.append(_mean_over_real_rows(row_special, rows))
        excess = (row_sums - 1.0) if sinks else (row_sums - 1.0).abs()
        row_sum_errors.append(excess.amax().clamp(min=0.0) if row_sums.numel() else row_sums.new_zeros(()))
    row_sum_error = float(torch.stack(row_sum_errors).amax())  # NaN when any real row holds one
    entropy_all = torch.cat(entropy, 1).transpose(0, 1)  # [batch, layer, head]
    special_all = torch.cat(on_special, 1).transpose(0, 1) if on_special else torch.zeros_like(entropy_all)
    return entropy_all, special_all, row_sum_error


def _mean_over_real_rows(
    per_row: Float[Tensor, "layer batch head query"], real: Bool[Tensor, "batch query"]
) -> Float[Tensor, "layer batch head"]:
    counts = real.sum(-1).clamp(min=1).to(per_row.dtype)[:, None]
    return per_row.masked_fill(~real[None, :, None, :], 0.0).sum(-1) / counts
