"""The analyzer contract: the `Analyzer` protocol and the `RunContext` it runs in.

A built-in analyzer and a third-party plugin implement exactly this and register through the entry-point
group `interpret.analyzers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import nn

from interpret.analyze.result import AnalyzerResult
from interpret.trace import Trace

GROUP = "interpret.analyzers"


@dataclass(frozen=True)
class RunContext:
    """What an analyzer may use besides the trace.

    model / tokenizer: for analyzers that re-run the model (`needs_model`); None otherwise.
    target: the class index (classifiers) or token id (language models) being explained; None = the
        model's own prediction.
    seed: for analyzers with randomness (baselines, sampling).
    workers: CPU threads an analyzer may use (0 = all cores).
    """

    model: nn.Module | None = None
    tokenizer: Any = None
    target: int | None = None
    seed: int = 0
    workers: int = 0
    device: torch.device | None = None


@runtime_checkable
class Analyzer(Protocol):
    """An analysis of a Trace.

    name equals the entry-point name; summary is one line for `analyzers list`; requires are the hook-name
    globs read from the trace; needs_model says whether `run` re-runs the model; Params is a frozen
    dataclass whose field metadata carries the help text ("help") of each parameter.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    version: ClassVar[str]
    requires: ClassVar[tuple[str, ...]]
    needs_model: ClassVar[bool]
    Params: ClassVar[type]

    def run(self, trace: Trace, params: Any, ctx: RunContext) -> AnalyzerResult:
        """Return the analysis of `trace` under `params`."""
        ...
