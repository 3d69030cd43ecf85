"""Attention rollout (Abnar & Zuidema 2020), every variant of the literature, as an analyzer, full or streamed.

Full (every pattern captured). Arrays (batch first; padded positions are zero):
    rollout   [batch, query, key]        the full rollout (rows="all"); absent with rows="readout".
    readout   [batch, key]               the declared readout: the rollout rows the decision reads, weighted
                                         as it weighs them (w · R, w the decision's pooling: [CLS] for a
                                         CLS-pooled classifier, the last token of a decoder, every real
                                         position for a mean-pooled head), or the `readout` positions given.
    per_layer [batch, layer, query, key] cumulative rollout after each layer (per_layer=True, rows="all").
    image_readout [batch, image_key]     a text-image dual encoder whose vision tower pools its class token: the
                                         vision stack's rollout (every layer, the same fusion and residual) from
                                         that row, over the class token and patches.
Encoder-decoder models (Chefer et al. 2021 rules, attention-only):
    encoder [batch, enc, enc], decoder [batch, dec, dec], cross [batch, dec, enc]; readout [batch, enc] is
    the cross rows of the decoder positions the decision reads, weighted likewise.
Computed for the whole padded batch at once in torch on the patterns' device (`rollout_batch`, equal to the
per-example statement to 1e-12), except with a discard ratio or, on a CPU, a batch past `CPU_BATCH_ENTRIES`
entries of [batch, n, n]: then each example's real block (`rollout_math`).
Streamed (no pattern: each layer's q, k and the kernel's row log-sum-exps, `interpret.streaming.readout`): the
readout [batch, key] alone, in O(n·d) memory per layer, equal to rows="readout" (tests, 1e-5). Each layer's
first and last block of rows are restated from q and k and their log-sum-exps compared with the captured ones
(check `lse_error`): a scale, bias or mask the restatement does not reproduce is an error, not a result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.analysis.params import as_dict
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError, ConfigError
from interpret.plugins import rollout_batch, rollout_math
from interpret.plugins._attention import (
    READOUT_HELP, ReadoutRows, check_residual, examples, readout_weights, residual_field, row_sum_error, scatter, scatter_row,
    target_of,
)
from interpret.plugins._streaming import (
    BLOCK_HELP, check_streamed, example_weights, full, lse_check, streamed,
)
from interpret.streaming.capture import REQUIRES, layers_from_trace
from interpret.streaming.readout import rollout_readout
from interpret.trace import Trace

ROW_SUM_TOLERANCE = 1e-6
# On a CPU the batch is rolled out at once while its [batch, n, n] float64 arrays stay within 16 MiB; beyond,
# each example's real block (`benchmarks/rollout.py`, a padded batch of 32 of MiniLM's real attention at n,
# 3n/4, n/2, n/4 tokens, readout rows, 2 threads: 2.2x faster batched at n = 64, 1.4x at 256 (16 MiB),
# 0.28x at 384, where the arrays leave the cache and the padding is computed too).
CPU_BATCH_ENTRIES = 1 << 21


@dataclass(frozen=True)
class RolloutParams:
    """Parameters of attention rollout."""

    residual: float = residual_field()
    head_fusion: Literal["mean", "max", "min"] = field(default="mean", metadata={"help": "how heads are combined"})
    discard_ratio: float = full(
        0.0, "fraction of the lowest entries dropped per layer (readout kept), in [0, 1); needs residual > 0"
    )
    start_layer: int = field(default=0, metadata={"help": "first layer multiplied in"})
    readout: ReadoutRows = field(default="auto", metadata={"help": READOUT_HELP})
    rows: Literal["all", "readout"] = full(
        "all", "all query rows, or only the readout rows (O(L·n²); what a streamed run computes)", streamed_as="readout"
    )
    per_layer: bool = full(False, "also return the cumulative rollout after each layer")
    block_mib: int = streamed(64, BLOCK_HELP)
    method: Literal["auto", "fused", "blocks"] = streamed(
        "auto",
        "streamed: auto: one fused attention call per layer (transposed, from the kernel's lse) under mean fusion"
        " when the rows span more than a block; fused: always (mean fusion); blocks: rebuild pattern rows in blocks",
    )

    def __post_init__(self) -> None:
        check_residual(self.residual, "the rollout")
        if not 0.0 <= self.discard_ratio < 1.0:
            raise ValueError(f"discard_ratio={self.discard_ratio} is outside [0, 1); use e.g. 0.9 to drop 90%")
        if self.discard_ratio > 0.0 and self.residual == 0.0:
            raise ValueError(
                f"discard_ratio={self.discard_ratio} with residual=0 can leave a query with no attention at all"
                " (a row of zeros, then 0/0); use residual > 0 (the paper's 0.5) when discarding"
            )
        if self.head_fusion not in ("mean", "max", "min"):
            raise ValueError(f"head_fusion={self.head_fusion!r} is unknown; use mean, max or min")
        if self.start_layer < 0:
            raise ValueError(f"start_layer={self.start_layer} must be 0 or more; use 0 for every layer")
        if self.per_layer and self.rows == "readout":
            raise ValueError("per_layer needs rows='all'; drop per_layer or use rows=all")
        check_streamed(self)
        if self.method == "fused" and self.head_fusion != "mean":
            raise ValueError(f"method=fused needs head_fusion=mean, not {self.head_fusion}; use method=auto or blocks")


class Rollout:
    """Attention rollout: how attention mixes information from the input tokens through the layers."""

    name = "rollout"
    summary = "Attention rollout (Abnar & Zuidema 2020): residual-augmented attention multiplied through the layers."
    version = "2.1"  # 2.1: a padded batch rolled out at once (`rollout_batch`; last digits may differ from 2.0)
    requires = ("*attn.hook_pattern",)
    streamed_requires = REQUIRES
    needs_model = False
    provides = ("readout",)
    Params = RolloutParams

    def run(self, trace: Trace, params: RolloutParams, ctx: RunContext) -> AnalyzerResult:
        """Return the rollout of every example (arrays as the module docstring lists)."""
        if ctx.strategy == "streamed":
            return self._streamed(trace, params, ctx)
        try:
            if trace.meta.kind == "encoder-decoder":
                return self._encoder_decoder(trace, params, ctx)
            return self._single_stack(trace, params, ctx)
        except ConfigError as err:
            raise AnalyzerError(f"rollout: {err}") from None

    def _single_stack(self, trace: Trace, params: RolloutParams, ctx: RunContext) -> AnalyzerResult:
        captured = list(trace.meta.layers) or trace.layers("attn.hook_pattern")
        start = 0 if params.start_layer == 0 else _start_index(params.start_layer, captured, "collect it or ")
        batched = self._batched(trace, params, ctx, start) if params.discard_ratio == 0.0 else None
        readout, full, per_layer = batched or self._per_example(trace, params, ctx, start)
        arrays = {"readout": NamedArray(readout, ("batch", "key"))}
        views = [View("token_strip", "readout", "Rollout from the decision's rows")]
        checks = {
            "readout_sum_error": Check(
                row_sum_error(readout), ROW_SUM_TOLERANCE, "largest |Σ readout − 1| (a weighted mean of rows that sum to one)"
            )
        }
        if full is not None:
            arrays["rollout"] = NamedArray(full, ("batch", "query", "key"))
            views.insert(0, View("heatmap", "rollout", "Attention rollout [query × key]"))
            checks["row_sum_error"] = Check(row_sum_error(full), ROW_SUM_TOLERANCE, "largest |row sum − 1| of the rollout")
        if per_layer is not None:
            arrays["per_layer"] = NamedArray(per_layer, ("batch", "layer", "query", "key"))
            views.append(View("line", "per_layer", "Readout share by layer", {"row": "readout"}))
        image = _image_readout(trace, params, ctx)
        if image is not None:  # a dual encoder's vision tower, read from its class token
            arrays["image_readout"] = NamedArray(image, ("batch", "image_key"))
            views.append(View("token_strip", "image_readout", "Rollout over the image, from its class token"))
            checks["image_readout_sum_error"] = Check(
                row_sum_error(image), ROW_SUM_TOLERANCE, "largest |Σ image readout − 1| (a row of the image's rollout)"
            )
        return self._result(trace, params, arrays, checks, views, ctx)

    def _per_example(
        self, trace: Trace, params: RolloutParams, ctx: RunContext, start: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Return (readout [batch, pos], rollout [batch, pos, pos] with rows="all", per_layer [batch, layer, pos,
        pos] with per_layer) one example's real block at a time (`rollout_math`): any discard ratio."""
        pos = trace.encoded.pos
        full = np.zeros((trace.encoded.batch, pos, pos)) if params.rows == "all" else None
        readout = np.zeros((trace.encoded.batch, pos))
        layers = []
        for example in examples(trace):
            weights = readout_weights(params.readout, target_of(ctx.targets, example.index), example.positions)
            rows = [int(row) for row in np.flatnonzero(weights)]
            if params.discard_ratio == 0.0:  # the common case: one compiled pass over each layer's heads
                augmented = rollout_math.augmented_layers(
                    example.layers[start:], head_fusion=params.head_fusion, residual_weight=params.residual,
                    workers=ctx.workers or None,
                )
            else:  # discarding protects the readout tokens' entries whichever rows are returned
                augmented = rollout_math.augmented_attention(
                    example.pattern[start:], head_fusion=params.head_fusion, residual_weight=params.residual,
                    discard_ratio=params.discard_ratio, keep=rows,
                )
            if full is None:  # w · Â_{L−1} · … · Â_0, streamed: never the full product
                rolled = rollout_math.chain(augmented, weights=weights)[0]  # one row for one weight vector
                readout[example.index] = scatter_row(rolled, example.positions, pos)
                continue
            if params.per_layer:  # the cumulative products end in the full rollout: multiply once
                cumulative = rollout_math.cumulative(augmented, start)
                matrix = cumulative[-1]
                layers.append(np.stack([scatter(step, example.positions, pos) for step in cumulative]))
            else:
                matrix = rollout_math.chain(augmented)
            full[example.index] = scatter(matrix, example.positions, pos)
            readout[example.index] = scatter_row(weights @ matrix, example.positions, pos)
        return readout, full, np.stack(layers) if layers else None

    def _batched(
        self, trace: Trace, params: RolloutParams, ctx: RunContext, start: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None] | None:
        """Return what `_per_example` returns, for the whole padded batch at once (`rollout_batch`) on the
        patterns' device (no discard); None where the per-example statement runs instead: on a CPU a batch
        whose [batch, n, n] float64 arrays pass `CPU_BATCH_ENTRIES`, or a row that `rollout_batch.augmented`
        refuses (the per-example statement names it in its error)."""
        heads = [trace[f"blocks.{i}.attn.hook_pattern"].detach() for i in trace.layers("attn.hook_pattern")][start:]
        if not heads or (heads[0].device.type == "cpu" and heads[0][:, 0].numel() > CPU_BATCH_ENTRIES):
            return None
        device = heads[0].device
        mask = trace.encoded.attention_mask.bool()
        real = mask.to(device)
        weights = np.zeros((trace.encoded.batch, trace.encoded.pos))
        for index, row in enumerate(to_numpy(mask)):
            positions = np.flatnonzero(row)
            weights[index, positions] = readout_weights(params.readout, target_of(ctx.targets, index), positions)
        start_weights = torch.from_numpy(weights).to(device)
        if params.rows == "readout":
            row = rollout_batch.readout(heads, real, start_weights, params.head_fusion, params.residual)
            return None if row is None else (to_numpy(row), None, None)
        steps = rollout_batch.products(heads, real, params.head_fusion, params.residual, params.per_layer)
        if steps is None:
            return None
        row = torch.bmm(start_weights[:, None, :], steps[-1])[:, 0]
        if not params.per_layer:
            return to_numpy(row), to_numpy(steps[-1]), None
        before = torch.diag_embed(real.to(torch.float64))  # the identity on the real positions, before `start`
        return to_numpy(row), to_numpy(steps[-1]), to_numpy(torch.stack([before] * start + steps, dim=1))

    def _encoder_decoder(self, trace: Trace, params: RolloutParams, ctx: RunContext) -> AnalyzerResult:
        decoder = trace.encoded.decoder
        if decoder is None:
            raise AnalyzerError("rollout of an encoder-decoder trace needs its decoder inputs; collect them too.")
        enc_pos, dec_pos, batch = trace.encoded.pos, decoder.pos, trace.encoded.batch
        r_ee = np.zeros((batch, enc_pos, enc_pos))
        r_dd = np.zeros((batch, dec_pos, dec_pos))
        r_de = np.zeros((batch, dec_pos, enc_pos))
        readout = np.zeros((batch, enc_pos))
        cross_all = to_numpy(trace.stack("cross_attn.hook_pattern", "decoder.").detach().double())
        for enc, dec in zip(examples(trace, "encoder."), examples(trace, "decoder.")):
            cross = cross_all[enc.index][:, :, dec.positions][:, :, :, enc.positions]
            ee, dd, de = rollout_math.rollout_encoder_decoder(enc.pattern, dec.pattern, cross)
            r_ee[enc.index][np.ix_(enc.positions, enc.positions)] = ee
            r_dd[enc.index][np.ix_(dec.positions, dec.positions)] = dd
            r_de[enc.index][np.ix_(dec.positions, enc.positions)] = de
            weights = readout_weights(params.readout, target_of(ctx.targets, enc.index), dec.positions)
            readout[enc.index] = scatter_row(weights @ de, enc.positions, enc_pos)
        arrays = {
            "encoder": NamedArray(r_ee, ("batch", "query", "key")),
            "decoder": NamedArray(r_dd, ("batch", "query", "key")),
            "cross": NamedArray(r_de, ("batch", "query", "key")),
            "readout": NamedArray(readout, ("batch", "key")),
        }
        views = [
            View("heatmap", "cross", "Decoder → encoder relevance (Chefer et al. 2021)"),
            View("token_strip", "readout", "Relevance of the input tokens for the decision's decoder rows"),
        ]
        patterns = to_numpy(trace.stack("attn.hook_pattern", "encoder.").double())
        checks = {"pattern_row_sum_error": Check(row_sum_error(patterns), 1e-5, "encoder attention rows sum to one")}
        return self._result(trace, params, arrays, checks, views, ctx)

    def _streamed(self, trace: Trace, params: RolloutParams, ctx: RunContext) -> AnalyzerResult:
        """Return the readout [batch, key] carried back through the layers from q, k and lse (module docstring)."""
        per_example = layers_from_trace(trace, self.name, ctx.device)
        captured = trace.layers("attn.hook_q")
        start = _start_index(params.start_layer, captured, "")
        readout = np.zeros((trace.encoded.batch, trace.encoded.pos))
        worst = 0.0
        for b, (positions, weights) in enumerate(example_weights(trace, ctx.targets, params.readout)):
            row, error = rollout_readout(
                per_example[b][start:], weights, residual=params.residual, head_fusion=params.head_fusion,
                block_bytes=params.block_mib << 20, method=params.method,
            )
            readout[b] = scatter_row(row, positions, trace.encoded.pos)
            worst = max(worst, error)
        # Each block's pattern is a float32 softmax whose rows sum to one only up to float32 rounding: about
        # sqrt(n)·2⁻²⁴ per row (random-walk accumulation over n keys), carried through every layer. The check
        # allows four times that per layer (1e-6 at least), far below what a real fault (a lost mask, a wrong
        # scale) moves the sum; measured 1.4e-6 at 8,192 tokens over 32 layers on an H200.
        tolerance = float(max(1e-6, 4.0 * (len(captured) - start) * np.sqrt(trace.encoded.pos) * 2.0**-24))
        checks = {
            "readout_sum_error": Check(
                row_sum_error(readout), tolerance,
                "largest |Σ readout − 1| (a weighted mean of float32 rows that sum to one)",
            ),
            "lse_error": lse_check(worst),
        }
        views = [View("token_strip", "readout", "Rollout from the decision's rows (streamed)")]
        return self._result(trace, params, {"readout": NamedArray(readout, ("batch", "key"))}, checks, views, ctx)

    def _result(
        self, trace: Trace, params: RolloutParams, arrays: dict, checks: dict, views: list, ctx: RunContext
    ) -> AnalyzerResult:
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params, ctx.strategy), arrays=arrays,
            checks=checks, views=tuple(views), tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )


def _image_readout(trace: Trace, params: RolloutParams, ctx: RunContext) -> np.ndarray | None:
    """Return a text-image dual encoder's rollout over its image [batch, image_key]: the vision stack's
    (`vision.blocks.{i}`, every captured layer, the same fusion and residual) from the rows its decision reads of
    the image (`Target.image_pooling`: its class token); None without an image side, or where the tower pools
    with an attention head (no row stands for what the decision reads)."""
    image = trace.encoded.image
    layers = trace.layers("attn.hook_pattern", "vision.") if image is not None else []
    if image is None or not layers or any(not target.image_pooling for target in ctx.targets):
        return None
    patterns = [to_numpy(trace[f"vision.blocks.{i}.attn.hook_pattern"]) for i in layers]  # [batch, head, q, k]
    real = to_numpy(image.attention_mask.bool())
    readout = np.zeros((image.batch, image.pos))
    for b in range(image.batch):
        positions = np.flatnonzero(real[b])
        heads = [pattern[b][:, positions][:, :, positions] for pattern in patterns]
        augmented = rollout_math.augmented_layers(heads, head_fusion=params.head_fusion,
                                                  residual_weight=params.residual, workers=ctx.workers or None)
        weights = ctx.targets[b].image_weights(image.pos)[positions]
        readout[b] = scatter_row(rollout_math.chain(augmented, weights=weights)[0], positions, image.pos)
    return readout


def _start_index(start_layer: int, captured: list[int], remedy: str) -> int:
    """Return `start_layer` as an index into the `captured` layers; `remedy` begins the advice when it is not one."""
    if start_layer not in captured:
        raise AnalyzerError(
            f"start_layer={start_layer} was not captured (captured layers: {captured}); {remedy}pick one of those."
        )
    return captured.index(start_layer)
