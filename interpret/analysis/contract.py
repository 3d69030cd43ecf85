"""The analyzer contract: the `Analyzer` protocol and the `RunContext` it runs in.

A built-in analyzer and a third-party plugin implement exactly this and register through the entry-point
group `interpret.analyzers`; `interpret.registration.analyzer_rules` checks every attribute listed here, with these
types. docs/architecture.md explains the contract with a complete example plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from interpret.analysis.result import AnalyzerResult
from interpret.analysis.runner import Forward
from interpret.errors import AnalyzerError
from interpret.target import Target
from interpret.trace import Trace

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from interpret.inputs import Encoded
    from interpret.analysis.runner import GradCapture, ModelRunner

Strategy = Literal["full", "streamed"]
STRATEGIES: tuple[str, ...] = ("full", "streamed")


@dataclass(frozen=True)
class RunContext:
    """What an analyzer may use besides the trace.

    targets: one Target per example of the trace (what each example's explanation is for: the class or
        tokens scored, the positions the decision reads and their pooling weights). Never assume example 0's.
    model / tokenizer: the model and its tokenizer (None when the caller gave no model).
    seed: for analyzers with randomness (baselines, sampling).
    workers: CPU threads an analyzer may use (0 = the cores this process may use).
    device: where the model runs (None: no model).
    runner: runs the model for analyzers that need to (`needs_model`); use it through the methods below.
    strategy: the computation the plan chose for this analyzer: "full" (what `requires` names is in the trace)
        or "streamed" (only an analyzer that declares `streamed_requires`: no pattern was captured).

    Running the model (each raises AnalyzerError when no model was given):
        score(encoded, ...) -> Tensor [rows]      the targets' scores with autograd on
        score_output(model_output, encoded) -> Tensor [batch]   the same read from an output the model gave
                                                   already (trace.output), without running it
        capture(encoded, names, ...) -> GradCapture   hook tensors that stay in the autograd graph + score
        embedding_layer(side) -> nn.Module         the module whose output Captum's layer methods attribute to
        embeddings(encoded, ...) -> Tensor [rows, pos, d_model]   that module's output for these inputs
        head_gates(gates) -> context manager       scale each head's output (gates [layer, head] or
                                                   [rows, layer, head]); gradients flow to the gates
        gate_shape -> (layers, heads)
    The model's structure (the Capturable the runner holds, so a plugin never builds its own):
        module(hook) -> nn.Module | None           the module a hook point is read from
        sizes(hook) -> {axis: size}                a hook point's static sizes (head, d_head, ...)
        run(encoded) -> output                     the model's raw output (e.g. to record each block's inputs)
        attention_kernels(wrap) -> context manager  transformers' attention kernels wrapped (value zeroing)
    """

    targets: tuple[Target, ...] = ()
    model: nn.Module | None = None
    tokenizer: Any = None
    seed: int = 0
    workers: int = 0
    device: torch.device | None = None
    runner: ModelRunner | None = None
    strategy: Strategy = "full"

    def _runner(self) -> ModelRunner:
        if self.runner is None:
            raise AnalyzerError("this analyzer runs the model; pass model= (and tokenizer=) to analyze.")
        return self.runner

    def score(self, encoded: Encoded, **forward: Any) -> Tensor:
        """Return each row's target score [rows] with autograd on.

        encoded: the batch the targets belong to (usually `trace.encoded`); each row of the run is one of its
            examples. forward: the fields of `interpret.analysis.runner.Forward` (examples, input_ids, inputs_embeds,
            pixel_values, gates, step, output, contrast), documented there.
        """
        return self._runner().score(encoded, Forward(**forward))

    def score_output(self, model_output: Any, encoded: Encoded, **forward: Any) -> Tensor:
        """Return each example's target score [batch] read from `model_output`, the model's own output on the whole of
        `encoded` (such as `trace.output`, the captured forward pass's), without running the model again.
        Keywords: step, output, contrast, as for `score`."""
        return self._runner().score_output(model_output, encoded, Forward(**forward))

    def capture(self, encoded: Encoded, names: Sequence[str], **forward: Any) -> GradCapture:
        """Run the model once with autograd on and return the hook tensors of `names` (globs) kept in the graph,
        with the score of that same forward pass: `torch.autograd.grad(cap.score.sum(), cap["...hook_pattern"])`
        is ∂score/∂pattern per row. Patterns are captured where the real query and key enter the attention
        (exactly as `collect` does) and, under SDPA, the kernel's outputs stay bit-identical while gradients
        flow through the pattern. Padded positions are not zeroed here. Keywords as for `score`."""
        return self._runner().capture(encoded, names, Forward(**forward))

    def embedding_layer(self, side: Literal["main", "decoder"] = "main") -> nn.Module:
        """Return the token-embedding module of `side` (the module Captum's layer methods attribute to)."""
        return self._runner().embedding_layer(side)

    def embeddings(self, encoded: Encoded, *, input_ids: Tensor | None = None, examples: Tensor | None = None) -> Tensor:
        """Return the embedding layer's output [rows, pos, d_model] for the examples' ids (or `input_ids`)."""
        return self._runner().embeddings(encoded, input_ids=input_ids, examples=examples)

    def head_gates(self, gates: Tensor) -> AbstractContextManager[None]:
        """Return a context in which head h of layer l is scaled by gates[l, h] (or gates[row, l, h])."""
        return self._runner().head_gates(gates)

    @property
    def gate_shape(self) -> tuple[int, int]:
        """Return (layers, heads) of the gates the model takes."""
        return self._runner().gate_shape

    def module(self, hook: str) -> nn.Module | None:
        """Return the module hook point `hook` (a canonical name) is read from, None where the model has no such
        hook point: the block for blocks.{i}.hook_resid_pre/post, the attention (its kernel's module) for
        attn.hook_q/k/v/pattern, the heads' output projection for attn.hook_z, the norm for *.hook_normalized."""
        site = self._runner().sites.get(hook)
        return None if site is None else site.module

    def sizes(self, hook: str) -> Mapping[str, int]:
        """Return the static axis sizes of hook point `hook` (head, d_head, d_model, d_mlp as it has them)."""
        site = self._runner().sites.get(hook)
        if site is None:
            raise AnalyzerError(f"{type(self.model).__name__} has no hook point {hook}.")
        return site.sizes

    def run(self, encoded: Encoded) -> Any:
        """Return the model's raw output on the rows of `encoded` through the forward pass `score` runs (no
        target read, autograd as the caller has it), e.g. to record what each block receives."""
        return self._runner().capturable.run(encoded)

    def attention_kernels(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> AbstractContextManager[None]:
        """Return a context in which every kernel transformers' attention interface hands out is `wrap(kernel)`: a
        function called as the kernel is, `(module, query, key, value, attention_mask, ...)`, that must call it."""
        from interpret.capture.hf.kernels import wrapped_kernels

        return wrapped_kernels(wrap)

    @property
    def head(self) -> nn.Module | None:
        """Return the decision head run after the model (hidden states, mask -> logits), or None when the
        model's own output is the decision (for analyzers whose rules must reach every module of the score)."""
        return self._runner().reader.head


@runtime_checkable
class Analyzer(Protocol):
    """An analysis of a Trace. Every attribute below is required and checked when the plugin loads.

    name: equals the entry-point name (snake_case, the method's name).
    summary: one line for `interpret analyzers list`.
    version: the analyzer's own version string; bump it when its numbers change (audits fingerprint it).
    requires: the hook-name globs it reads from the trace (any sequence of strings; may be empty).
    streamed_requires (optional): declares a streamed computation, run when the run streams (`ctx.strategy`),
        and names the hook-name globs it reads instead (no [n, n] pattern; may be empty). Params fields that
        only one computation reads say so in metadata["strategy"] ("full" or "streamed").
    needs_model: whether `run` runs the model through the context (gradients, perturbations, gates).
    provides: what its results declare, a subset of ("readout", "head_map"): "readout" — a per-token
        importance for the decision (`AnalyzerResult.readout_of`); "head_map" — a per-example [layer, head]
        score (`AnalyzerResult.head_map`). The audit tabulates only these, and refuses an analyzer that
        provides neither before any model runs.
    Params: a frozen dataclass constructible with its defaults; each field's metadata["help"] documents it;
        `__post_init__` refuses (ValueError) combinations that cannot give a meaningful result.
    run(self, trace, params, ctx): returns the AnalyzerResult; keeps no hooks or global state.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    version: ClassVar[str]
    requires: ClassVar[Sequence[str]]
    needs_model: ClassVar[bool]
    provides: ClassVar[Sequence[str]]
    Params: ClassVar[type]

    def run(self, trace: Trace, params: Any, ctx: RunContext) -> AnalyzerResult:
        """Return the analysis of `trace` under `params`."""
        ...
