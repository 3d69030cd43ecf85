"""`ModelRunner`: how an analyzer runs the model — each example's target score with autograd on, a
grad-enabled capture, the embedding layer, and head gates. Analyzers reach it through `RunContext`.

The runner serves the reference models, every Hugging Face model the collector captures (eager or SDPA)
and a decision head on a bare encoder (the default model) alike: it feeds rows through the Capturable's own
forward and reads the decision's logits with the same `DecisionReader` the decision step used, so the
score an analyzer differentiates is the score of the decision being explained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interpret.capture.engine import capture, hooked, select_sites
from interpret.capture.gates import head_gates
from interpret.capture.sites import Capturable, Site, Sink
from interpret.decision.decide import DecisionReader
from interpret.errors import AnalyzerError
from interpret.inputs import Encoded
from interpret.target import Target


@dataclass(frozen=True)
class Forward:
    """One forward pass of the runner: what it feeds and what it scores (the keywords of `RunContext.score` and
    `RunContext.capture`, which build it).

    examples: [rows] (long) which example of the batch each row is (default: every example once, in order), so
        an integration path of many rows per example scores each row against its own example's target.
    input_ids [rows, pos] / inputs_embeds [rows, pos, d_model] / pixel_values: replace the inputs of those rows
        (masks and decoder inputs are the examples' own).
    gates: head gates [layer, head] (all rows) or [rows, layer, head] (each row its own).
    step: score only target step `step` (one token of a continuation); None sums every step.
    output: "logit" or "logprob" (log-softmax over classes or the vocabulary; log σ of a SigLIP pair's logit).
    contrast: subtract the contrast's score when the target has one (score = target − contrast).
    """

    input_ids: Tensor | None = None
    inputs_embeds: Tensor | None = None
    pixel_values: Tensor | None = None
    examples: Tensor | None = None
    gates: Tensor | None = None
    step: int | None = None
    output: Literal["logit", "logprob"] = "logit"
    contrast: bool = True


@dataclass(frozen=True)
class GradCapture:
    """Hook tensors of one forward pass kept in the autograd graph, and that pass's target scores.

    tensors: by canonical hook name, shaped as each hook point documents (padding not zeroed).
    score: [rows] each row's target score (see `ModelRunner.score`).
    output: the model's raw output of the pass.
    """

    tensors: dict[str, Tensor]
    score: Float[Tensor, " rows"]
    output: Any

    def __getitem__(self, name: str) -> Tensor:
        return self.tensors[name]

    def stack(self, suffix: str, prefix: str = "") -> Tensor:
        """Return `{prefix}blocks.{i}.{suffix}` over the captured layers stacked on axis 1 (in the graph)."""
        names = sorted(
            (name for name in self.tensors if name.startswith(f"{prefix}blocks.") and name.endswith(f".{suffix}")),
            key=lambda name: int(name[len(prefix) + len("blocks."):].split(".")[0]),
        )
        if not names:
            raise AnalyzerError(f"no {prefix}blocks.{{i}}.{suffix} was captured; name it in capture(names=...).")
        return torch.stack([self.tensors[name] for name in names], dim=1)


class ModelRunner:
    """Runs one model for analyzers, against one Target per example of the batch they explain."""

    def __init__(
        self, capturable: Capturable, reader: DecisionReader, targets: Sequence[Target], gate_prefix: str = ""
    ) -> None:
        self.capturable = capturable
        self.reader = reader
        self.targets = tuple(targets)
        self.gate_prefix = gate_prefix

    @property
    def model(self) -> nn.Module:
        """The model being run."""
        return self.capturable.model

    @property
    def gate_shape(self) -> tuple[int, int]:
        """(layers, heads) of the head gates of the model's main stack."""
        return self.capturable.n_layers, self.capturable.n_heads

    @cached_property
    def sites(self) -> dict[str, Site]:
        """The Capturable's sites by canonical hook name."""
        return {site.name: site for site in self.capturable.sites}

    def score(self, encoded: Encoded, forward: Forward = Forward(), *, grad: bool = True) -> Float[Tensor, " rows"]:
        """Return each row's target score [rows] for `forward` (`RunContext.score`), with autograd on unless `grad`
        is False (scores only, e.g. the faithfulness re-runs of `interpret.evidence.removal`)."""
        rows, batch = self._batch(encoded, forward)
        with self._gated(forward.gates), (torch.enable_grad() if grad else torch.no_grad()):
            result = self.capturable.run(batch)
        return self._scores(result, batch, rows, forward)

    def score_output(self, model_output: Any, encoded: Encoded, forward: Forward = Forward()) -> Float[Tensor, " batch"]:
        """Return each example's target score [batch] read from `model_output`, the model's output on the whole of
        `encoded` (`RunContext.score_output`), without running the model; `forward` may set step, output and
        contrast, not inputs or examples."""
        if any(value is not None for value in (forward.examples, forward.input_ids, forward.inputs_embeds,
                                                forward.pixel_values, forward.gates)):
            raise AnalyzerError("score_output reads an output the model already gave for the whole batch; pass no"
                                " examples, inputs or gates (use score to run the model on them).")
        return self._scores(model_output, encoded, self._rows(encoded, None), forward)

    def capture(self, encoded: Encoded, names: Sequence[str], forward: Forward = Forward()) -> GradCapture:
        """Return the tensors of `names` (globs) in the autograd graph with the same pass's scores."""
        rows, batch = self._batch(encoded, forward)
        sites = select_sites(self.capturable, list(names), None)
        with self._gated(forward.gates):
            tensors, result, _ = capture(self.capturable, batch, sites, budget_bytes=None, grad=True)
        return GradCapture(tensors, self._scores(result, batch, rows, forward), result)

    @contextmanager
    def live_pass(
        self, encoded: Encoded, names: Sequence[str], sink_for: Callable[[Site], Sink], forward: Forward = Forward()
    ) -> Iterator[Float[Tensor, " rows"]]:
        """Run the model once with autograd on and yield each row's target score [rows] (logits, with the
        contrast; `forward` as for `score`: every example once by default), the sites of `names` (globs) hooked to
        `sink_for(site)` until the block exits: a backward pass run inside it fires the sinks again wherever it
        recomputes a checkpointed block. For a pass that reads the hook tensors as the backward pass needs them
        (`interpret.streaming.capture.gradient_pass`), without a capture's estimate or log line."""
        rows, batch = self._batch(encoded, forward)
        sites = select_sites(self.capturable, list(names), None)
        with hooked(self.capturable, sites, sink_for, grad=True), self._gated(forward.gates), torch.enable_grad():
            result = self.capturable.run(batch)
            yield self._scores(result, batch, rows, forward)

    def embedding_layer(self, side: Literal["main", "decoder"] = "main") -> nn.Module:
        """Return the token-embedding module of `side`."""
        module = self.capturable.embedding(side)
        if module is None:
            raise AnalyzerError(
                f"{type(self.model).__name__} has no token-embedding layer on its {side} side; attribute to"
                " its inputs_embeds instead."
            )
        return module

    def embeddings(
        self, encoded: Encoded, *, input_ids: Tensor | None = None, examples: Tensor | None = None
    ) -> Float[Tensor, "rows pos d_model"]:
        """Return the embedding layer's output [rows, pos, d_model] for the examples' ids (or `input_ids`)."""
        rows = self._rows(encoded, examples)
        ids = input_ids if input_ids is not None else encoded.rows(rows).input_ids
        if ids is None:
            raise AnalyzerError("these inputs are embeddings or pixels, not token ids; pass input_ids=.")
        return self.embedding_layer()(ids)

    def head_gates(self, gates: Tensor) -> Any:
        """Return a context in which head h of layer l is scaled by gates[..., l, h]."""
        return head_gates(self.model, gates, prefix=self.gate_prefix)

    @contextmanager
    def _gated(self, gates: Tensor | None) -> Iterator[None]:
        if gates is None:
            yield
            return
        with self.head_gates(gates):
            yield

    def _batch(self, encoded: Encoded, forward: Forward) -> tuple[Tensor, Encoded]:
        """Return (each row's example [rows], the rows of `encoded` with `forward`'s inputs in place of their own)."""
        rows = self._rows(encoded, forward.examples)
        batch = encoded.rows(rows, input_ids=forward.input_ids, inputs_embeds=forward.inputs_embeds,
                             pixel_values=forward.pixel_values)
        self._check_eval()
        return rows, batch

    def _rows(self, encoded: Encoded, examples: Tensor | None) -> Tensor:
        if encoded.batch != len(self.targets):
            raise AnalyzerError(
                f"the run context holds {len(self.targets)} targets but the batch has {encoded.batch} examples;"
                " score the batch the targets were resolved for (trace.encoded)."
            )
        if examples is None:
            return torch.arange(encoded.batch)
        return examples.detach().to("cpu", torch.long)

    def _check_eval(self) -> None:
        if self.model.training:
            raise AnalyzerError(
                f"{type(self.model).__name__} is in training mode (dropout would make every score random);"
                " call model.eval() first."
            )

    def _log_probabilities(self, logits: Tensor) -> Tensor:
        """Return the decision's log-probabilities: log-softmax over classes or the vocabulary; log σ of one logit
        where it is a probability (a sigmoid-trained dual encoder, SigLIP; a one-output classifier whose config
        declares a sigmoid). CLIP's logit of one pair has none, nor has a score (a reranker's, a reward model's)."""
        if not self.reader.one_logit:
            return logits.log_softmax(-1)
        if not self.reader.sigmoid:
            what = ("no probability of one text-image pair (its softmax runs over a batch of candidates)"
                    if self.reader.kind == "similarity" else
                    "one output and no probability of it (a score: its config declares no sigmoid)")
            raise AnalyzerError(f"{type(self.model).__name__} gives {what}; score its logit instead.")
        return torch.nn.functional.logsigmoid(logits)

    def _scores(self, result: Any, batch: Encoded, rows: Tensor, forward: Forward) -> Float[Tensor, " rows"]:
        logits = self.reader.logits(result, batch)
        if logits is None:
            raise AnalyzerError(
                f"{type(self.model).__name__} makes no decision to score (no class or token logits); load it with a"
                " task head or pass head=."
            )
        step, contrast = forward.step, forward.contrast
        if forward.output == "logprob":
            logits = self._log_probabilities(logits)
        picks: list[tuple[int, int | None, int, float]] = []  # (row, position or None, id, sign)
        for row, example in enumerate(rows.tolist()):
            target = self.targets[example]
            if target.kind == "none":
                raise AnalyzerError(f"example {example} has no decision to score (its target is 'none').")
            if target.kind == "similarity":  # one logit per row: its text and its image
                if step not in (None, 0):
                    raise AnalyzerError(f"step {step} does not exist: example {example}'s similarity has one step.")
                picks.append((row, None, 0, 1.0))
                continue
            steps = range(len(target.ids)) if step is None else [step]
            for i in steps:
                if i >= len(target.ids):
                    raise AnalyzerError(f"step {i} does not exist: example {example}'s target has {len(target.ids)} steps.")
                position = target.positions[i] if target.kind == "token" else None
                picks.append((row, position, target.ids[i], 1.0))
                if contrast and target.contrast:
                    picks.append((row, position, target.contrast[i], -1.0))
        device = logits.device
        row_index = torch.tensor([p[0] for p in picks], device=device)
        ids = torch.tensor([p[2] for p in picks], device=device)
        signs = torch.tensor([p[3] for p in picks], device=device, dtype=logits.dtype)
        if self.reader.kind == "similarity":
            values = logits[row_index]
        elif self.reader.kind == "class":
            values = logits[row_index, ids]
        else:
            positions = torch.tensor([p[1] for p in picks], device=device)
            values = logits[row_index, positions, ids]
        scores = torch.zeros(len(rows), device=device, dtype=logits.dtype)
        return scores.index_add(0, row_index, values * signs)
