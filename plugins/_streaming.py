"""Shared by the analyzers' streamed strategies (docs/architecture.md, "Streaming is a strategy"): the
parameters only that strategy reads, the readout weights of each example over its real positions, the output
checks' tolerances, and placing a per-example vector back on the padded axis."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np
import torch

from interpret.analysis import Check
from interpret.plugins._attention import ReadoutRows, readout_weights, target_of
from interpret.plugins._per_step import refuse_steps
from interpret.streaming.capture import gradient_pass, real_positions
from interpret.streaming.pattern import StreamedLayer
from interpret.trace import Trace

# |A·V − z| relative to max|z| when the recomputed pattern is the kernel's: float32 rounding of a d_head-long
# sum (measured ≤ 3e-8 on the tiny families), or half-precision rounding of the kernel's own output.
OUTPUT_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 1e-2}
SWITCHES = ("auto", "on", "off")
METHODS = ("auto", "fused", "blocks")


def streamed(default: Any, help: str) -> Any:
    """Return a Params field that only the streamed strategy reads (`interpret.analysis.params.for_strategy`)."""
    return field(default=default, metadata={"help": help, "strategy": "streamed"})


def full(default: Any, help: str, streamed_as: Any = None) -> Any:
    """Return a Params field that only the full strategy (every pattern captured) reads; `streamed_as`: the value
    the streamed computation stands for, which a streamed run accepts (`interpret.analysis.params.check_strategy`)."""
    return field(default=default, metadata={"help": help, "strategy": "full", "streamed_as": streamed_as})


BLOCK_HELP = "streamed: working memory of one block of recomputed pattern rows, in MiB (at least 1)"
OFFLOAD_HELP = "streamed: keep what the gradient pass saves in host memory (CUDA): auto (from 4,096 tokens on), on, off"
RECOMPUTE_HELP = ("streamed: recompute each block in the backward pass instead of keeping its activations: auto (CPU,"
                  " from 4,096 tokens on), on, off")


def check_streamed(params: Any) -> None:
    """Refuse (ValueError) a value of a streamed-strategy field that no run could use."""
    if getattr(params, "block_mib", 1) < 1:
        raise ValueError(f"block_mib={params.block_mib} must be 1 or more; use e.g. 64")
    if getattr(params, "readout", "auto") != "auto" and not params.readout:
        raise ValueError("readout=() names no rows; use auto or positions, e.g. 0,5")
    for name, choices in (("offload", SWITCHES), ("recompute", SWITCHES), ("method", METHODS)):
        value = getattr(params, name, choices[0])
        if value not in choices:
            raise ValueError(f"{name}={value!r} is unknown; use {', '.join(choices[:-1])} or {choices[-1]}")


def example_weights(trace: Trace, targets, readout: ReadoutRows) -> list[tuple[np.ndarray, np.ndarray]]:
    """Return per example (its real positions [n], its readout weights [n])."""
    return [
        (positions, readout_weights(readout, target_of(targets, b), positions))
        for b, positions in enumerate(real_positions(trace))
    ]


# |restated lse − kept lse| / max(1, max |lse|): both float32 sums of the same products (half-precision inputs
# multiply exactly in float32), measured ≤ 1e-6 on the tiny families; a wrong mask or scale moves it by ≥ 1e-2.
LSE_TOLERANCE = 1e-5


# What a streamed check's refusal says to do: the streamed computation restates scaled dot-product attention (the
# module's scale, soft-capping, sinks) under a causal mask narrowed by a decoder's sliding window, or none, so a
# model whose attention adds more (a position bias, ALiBi, chunked or local attention, a scale applied outside
# the kernel) fails the checks by far more than rounding.
STREAMED_REMEDY = (
    "The streamed computation restates softmax(q·kᵀ·scale) under a causal mask (with a decoder's sliding window)"
    " or none, soft-capped scores and sinks; this model's attention adds more (a position bias, ALiBi, chunked or"
    " local attention, or a scale applied outside the kernel): run the full strategy (streaming off, with a larger"
    " capture budget) or give shorter inputs."
)


def lse_check(error: float, rows: str = "the first and last block of rows") -> Check:
    """Return the invariant that rows restated from q and k (`rows` of each layer) have the log-sum-exps the
    kernel kept."""
    return Check(
        error, LSE_TOLERANCE,
        f"largest |log Σ exp(restated scores) − captured lse| / max(1, max |lse|) on {rows} of each layer: the"
        " restated scores (a decoder's causal mask and sliding window, the module's scale, soft-capping, sinks)"
        " are the kernel's",
        remedy=STREAMED_REMEDY,
    )


def gradient_layers(trace: Trace, ctx: Any, name: str, params: Any,
                    step: Callable[[int, int, StreamedLayer], float]) -> tuple[list[int], Check]:
    """Run the streamed gradient methods' one autograd pass (`interpret.streaming.capture.gradient_pass`) and
    return (the layers in order, the output check): `step(layer index, example, its StreamedLayer)` takes each
    layer the score reaches as the backward pass reaches it and returns its output error. A target of several
    tokens is refused first (`_per_step.refuse_steps`)."""
    refuse_steps(ctx, name)
    worst, dtype = 0.0, torch.float32

    def consume(index: int, layers: list[StreamedLayer] | None) -> None:  # None: the score does not reach it
        nonlocal worst, dtype
        for b, layer in enumerate(layers or ()):
            worst, dtype = max(worst, step(index, b, layer)), layer.q.dtype

    order = gradient_pass(trace, ctx, name, consume, params.offload, params.recompute)
    return order, Check(  # the recomputed pattern reproduces the kernel's output z
        worst, OUTPUT_TOLERANCE.get(dtype, 3e-2),
        "largest |A·V − z| / max|z| on the last block of rows of each layer: the recomputed pattern (a decoder's"
        " causal mask and sliding window, the module's scale, soft-capping, sinks) is the kernel's",
        remedy=STREAMED_REMEDY,
    )
