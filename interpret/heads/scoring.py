"""`GatedModel`: a model's decision logits under head gates, and the per-example loss head importance
differentiates (Michel et al. 2019, "Are Sixteen Heads Really Better than One?", eq. 1-2).

It serves the reference models, every Hugging Face model the collector captures and a decision head on a
bare encoder (the default model) alike: rows go through the Capturable's own forward and the logits are read
by the same `DecisionReader` the decision step uses, with the gates of `interpret.capture.gates` applied at
the input of each attention output projection.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from interpret.capture.gates import head_gates
from interpret.capture.sites import Capturable, model_device
from interpret.decision.decide import DecisionReader, reader_for
from interpret.errors import AnalyzerError
from interpret.inputs import Encoded


@dataclass(frozen=True)
class GatedModel:
    """A model, its Capturable and DecisionReader, and which stack the gates act on (prefix)."""

    capturable: Capturable
    reader: DecisionReader
    prefix: str = ""

    @classmethod
    def of(cls, model: nn.Module, tokenizer: Any, probe: Encoded, head: nn.Module | None = None) -> GatedModel:
        """Return the GatedModel of `model`; `probe` (a small batch) tells a classifier from a language model."""
        from interpret.capture.api import capturable_for

        capturable = capturable_for(model, tokenizer)
        with torch.no_grad():
            output = capturable.run(probe.to(model_device(model)))
        reader = reader_for(model, capturable.kind, head, output)
        if reader.kind == "none":
            raise AnalyzerError(
                f"{type(model).__name__} makes no decision (no class or token logits); load it with a task head."
            )
        if reader.kind == "similarity":
            raise AnalyzerError(
                f"head importance measures a class or next-token loss; {type(model).__name__} scores text-image pairs,"
                " which have no loss to prune against."
            )
        if reader.one_logit:
            raise AnalyzerError(
                f"head importance measures a class or next-token loss; {type(model).__name__} has one output (a score:"
                " a reranker's, a reward model's, a regression), which has no class loss to prune against."
            )
        prefix = "encoder." if capturable.kind == "encoder-decoder" else ""
        return cls(capturable, reader, prefix)

    @property
    def gate_shape(self) -> tuple[int, int]:
        """(layers, heads) of the gates."""
        return self.capturable.n_layers, self.capturable.n_heads

    @property
    def kind(self) -> str:
        """The decision's kind: class (logits [batch, classes]) or token (logits [batch, pos, vocab])."""
        return self.reader.kind

    def logits(self, batch: Encoded, gates: Tensor | None = None) -> Tensor:
        """Return the decision logits ([rows, classes] or [rows, pos, vocab]) of `batch` under `gates`
        ([layer, head] or [rows, layer, head]; None: ungated)."""
        model = self.capturable.model
        if model.training:
            raise AnalyzerError(f"{type(model).__name__} is in training mode; call model.eval() first.")
        batch = batch.to(model_device(model))
        scope = nullcontext() if gates is None else head_gates(model, gates, prefix=self.prefix)
        with scope:
            output = self.capturable.run(batch)
        logits = self.reader.logits(output, batch)
        assert logits is not None
        return logits

    def losses(
        self, batch: Encoded, gates: Tensor | None, labels: Int[Tensor, " rows"] | None
    ) -> Float[Tensor, " rows"]:
        """Return each row's loss [rows] under `gates` (see `row_losses`)."""
        logits = self.logits(batch, gates)
        return row_losses(logits, self.reader.side_of(batch), labels, self.reader.kind)

    def predictions(self, batch: Encoded) -> Int[Tensor, " rows"]:
        """Return the ungated model's predicted class per row (class decisions only)."""
        with torch.no_grad():
            return self.logits(batch).argmax(-1)


def row_losses(
    logits: Tensor, batch: Encoded, labels: Int[Tensor, " rows"] | None, kind: str
) -> Float[Tensor, " rows"]:
    """Return each row's loss [rows]: cross-entropy of its class logits [rows, classes] against `labels`
    (the given labels, or the unpruned model's predictions in label-free mode); for token logits
    [rows, pos, vocab] the next-token loss Σ_t −log p(x_{t+1} | x_≤t) over the row's real positions."""
    if kind == "class":
        if labels is None:
            raise AnalyzerError("class losses need labels (given, or the model's own predictions).")
        return F.cross_entropy(_wide(logits), labels.to(logits.device), reduction="none")
    ids = batch.input_ids
    if ids is None:
        raise AnalyzerError("the next-token loss needs token ids; these inputs are embeddings.")
    ids = ids.to(logits.device)
    real = batch.attention_mask.to(logits.device).bool()
    # position t predicts t+1; both must be real (padding on either side is skipped)
    pairs = real[:, :-1] & real[:, 1:]
    token_loss = F.cross_entropy(
        _wide(logits[:, :-1]).flatten(0, 1), ids[:, 1:].flatten(), reduction="none"
    ).view(ids.shape[0], -1)
    return (token_loss * pairs).sum(-1)


def _wide(logits: Tensor) -> Tensor:
    """Return logits in float32 at least (half-precision logits lose the loss's digits), float64 kept."""
    return logits if logits.dtype == torch.float64 else logits.float()
