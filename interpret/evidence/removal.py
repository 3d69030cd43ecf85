"""Removing tokens from an example and scoring what is left: the one operation every faithfulness metric uses.

A removal is a boolean mask over an example's positions (True = removed). Three ways to remove a token:

- ``delete``: the token is taken out of the sequence; the tokens after it move up one position (the row is
  compacted on the tokenizer's padding side and padded with the pad token, attention mask 0). This is the
  removal of ERASER (DeYoung et al. 2020, §4: "x_i \\ r_i", the input with the rationale tokens deleted).
- ``mask``: the token is replaced by the tokenizer's mask token ([MASK]), or its pad token when it has none;
  positions do not move.
- ``zero``: the token's embedding (the output of the token-embedding layer, before position embeddings) is
  set to zero; positions do not move.

Default (`default_removal`): ``delete`` for every text model, since ERASER's comprehensiveness and
sufficiency are defined by deleting tokens and the follow-up literature on Transformer encoders and
decoders (e.g. Ferrando et al. 2022 and Modarressi et al. 2022 on BERT; ALTI-Logit on GPT-2) deletes as well;
``zero`` when the inputs are embeddings without token ids.

What may be removed (`candidates`): real, non-special positions; for a language model's token target, the
positions before its first target position (the decision's own row and a continuation are kept); for a
class decision that reads one position (a decoder classifier's last token), every position but that one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from interpret.analysis.contract import RunContext
from interpret.analysis.runner import Forward, ModelRunner
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.estimate.memory import ROWS_PER_PASS, rows_per_pass
from interpret.inputs import Encoded, pad_token_id
from interpret.request import REMOVALS
from interpret.target import Target

Removal = Literal["delete", "mask", "zero"]

def default_removal(encoded: Encoded) -> Removal:
    """Return the removal the literature uses for these inputs: "delete" for token ids, else "zero"."""
    return "delete" if encoded.input_ids is not None else "zero"


def candidates(encoded: Encoded, example: int, target: Target, *, decoder_side: bool = False) -> Int[np.ndarray, " n"]:
    """Return the positions of `example` that may be removed [n], in order (see the module docstring).

    decoder_side: the decision reads an encoder-decoder's decoder, so its positions say nothing about the
    (encoder) input's positions, of which every real, non-special one may be removed.
    """
    real = encoded.attention_mask[example].bool() & ~encoded.special[example].bool()
    keep = to_numpy(real).copy()
    if decoder_side:
        return np.flatnonzero(keep)
    if target.kind == "token" and target.positions:
        keep[min(target.positions):] = False
    if target.kind == "class" and len(target.pooling) == 1:
        keep[target.pooling[0][0]] = False
    return np.flatnonzero(keep)


@dataclass
class RemovalScorer:
    """Scores each example with sets of its tokens removed: the decision's probability m(x \\ r).

    m is the probability of the explained target (softmax over classes or the vocabulary; a continuation's
    steps multiply; σ of one logit where that is a probability), never a contrast: ERASER's m(x)_j. A decision of
    one logit that is no probability (a score: a reranker's, a reward model's, CLIP's similarity) is measured as
    that logit (`measure`).
    """

    ctx: RunContext
    encoded: Encoded
    removal: str  # a Removal; checked here, since callers pass user input
    rows_per_pass: int = ROWS_PER_PASS  # at most; fewer for long inputs (`rows_per_pass`)

    def __post_init__(self) -> None:
        if self.removal not in REMOVALS:
            raise AnalyzerError(f"removal {self.removal!r} is not one of {', '.join(REMOVALS)}.")
        if self.ctx.runner is None:
            raise AnalyzerError("evidence re-runs the model with tokens removed; pass model= (and tokenizer=).")
        if self.encoded.input_ids is None and self.removal != "zero":
            raise AnalyzerError(f"removal {self.removal!r} needs token ids; these inputs are embeddings: use zero.")
        if self.encoded.reads_media:
            raise AnalyzerError("evidence removes tokens of text inputs; this model reads pixels or audio.")

    @property
    def measure(self) -> Literal["probability", "logit"]:
        """What m is: the decision's probability, or its logit where it has none (`DecisionReader.has_probability`)."""
        runner = self.ctx.runner
        return "probability" if runner is None or runner.reader.has_probability else "logit"

    def probabilities(self, example: int, removed: Bool[np.ndarray, "rows pos"]) -> Float[np.ndarray, " rows"]:
        """Return m(x \\ r) [rows] for each removal mask [rows, pos] of `example` (True = removed)."""
        return self._passes(example, removed, classes=False) if len(removed) else np.empty(0)

    def distributions(self, example: int, removed: Bool[np.ndarray, "rows pos"]) -> Float[np.ndarray, "rows classes"]:
        """Return the class probabilities [rows, classes] (softmax of the decision's logits) with each removal
        mask [rows, pos] of `example` applied: what the model decides on the edited inputs, in one pass per
        `rows_per_pass` rows. Class decisions only."""
        return self._passes(example, removed, classes=True) if len(removed) else np.empty((0, 0))

    def _passes(self, example: int, removed: Bool[np.ndarray, "rows pos"], classes: bool) -> np.ndarray:
        """Return `_pass` over the rows of `removed` in passes of at most `rows_per_pass` rows, concatenated."""
        removed = np.asarray(removed, dtype=bool)
        # deleted rows are as wide as the example (`_deleted`), so its passes are the same alone and in a batch
        width = int(self.encoded.attention_mask[example].sum()) if self.removal == "delete" else self.encoded.pos
        step = rows_per_pass(width, self.ctx.gate_shape[1], limit=self.rows_per_pass)
        return np.concatenate([self._pass(example, torch.from_numpy(removed[start:start + step]), classes)
                               for start in range(0, len(removed), step)])

    @torch.no_grad()
    def _pass(self, example: int, removed: Tensor, classes: bool = False) -> np.ndarray:
        """Return m(x \\ r) [rows], or with `classes` the class probabilities [rows, classes]."""
        runner = self.ctx.runner
        assert runner is not None
        rows = len(removed)
        examples = torch.full((rows,), example, dtype=torch.long)
        if self.removal == "delete":
            return self._deleted(example, removed, classes)
        if self.removal == "mask":
            ids = self.encoded.input_ids[example].expand(rows, -1).clone()
            ids[removed.to(ids.device)] = _mask_id(self.ctx.tokenizer)
            return _probabilities(runner, self.encoded, examples, classes, input_ids=ids)
        embeds = self._embeddings(example, rows)
        embeds = embeds * (~removed).to(embeds.device, embeds.dtype).unsqueeze(-1)
        return _probabilities(runner, self.encoded, examples, classes, inputs_embeds=embeds)

    def _embeddings(self, example: int, rows: int) -> Tensor:
        if self.encoded.inputs_embeds is not None:
            return self.encoded.inputs_embeds[example].expand(rows, -1, -1).clone()
        one = torch.tensor([example])
        return self.ctx.embeddings(self.encoded, examples=one).detach().expand(rows, -1, -1).clone()

    def _deleted(self, example: int, removed: Tensor, classes: bool = False) -> np.ndarray:
        """Score rows with the removed tokens taken out of the sequence (positions after them move up).

        Rows are as wide as the example's real tokens, not the batch: padding the batch needed is no part of
        the example, and leaving it out makes the example's scores the same alone and in any batch.
        """
        runner = self.ctx.runner
        assert runner is not None
        encoded, target = self.encoded, self.ctx.targets[example]
        left = _pads_left(encoded, example)
        base = encoded.rows(torch.tensor([example]))
        real = encoded.attention_mask[example].bool().cpu()
        rows, pos = len(removed), int(real.sum())
        ids = torch.full((rows, pos), pad_token_id(self.ctx.tokenizer), dtype=encoded.input_ids.dtype)
        mask = torch.zeros((rows, pos), dtype=encoded.attention_mask.dtype)
        special = torch.ones((rows, pos), dtype=torch.bool)
        types = None if encoded.token_type_ids is None else torch.zeros((rows, pos), dtype=encoded.token_type_ids.dtype)
        targets: list[Target] = []
        for row in range(rows):
            kept = torch.nonzero(real & ~removed[row]).flatten()
            place = torch.arange(pos - len(kept), pos) if left else torch.arange(len(kept))
            ids[row, place] = encoded.input_ids[example, kept].cpu()
            mask[row, place] = 1
            special[row, place] = encoded.special[example, kept].cpu().bool()
            if types is not None:  # a deleted token's segment goes with it; padding's is 0, as the tokenizer pads
                types[row, place] = encoded.token_type_ids[example, kept].cpu()
            moved = {int(old): int(new) for old, new in zip(kept, place)}
            positions = target.positions if decoder_side(self.ctx, encoded) else tuple(moved[p] for p in target.positions)
            targets.append(replace(target, positions=positions, pooling=()))
        batch = replace(
            base.rows(torch.zeros(rows, dtype=torch.long)),
            input_ids=ids.to(encoded.input_ids.device),
            attention_mask=mask.to(encoded.attention_mask.device),
            special=special.to(encoded.special.device),
            token_type_ids=None if types is None else types.to(encoded.token_type_ids.device),
            tokens=[["" for _ in range(pos)] for _ in range(rows)],
            word_ids=(),
        )
        rerun = ModelRunner(runner.capturable, runner.reader, targets, runner.gate_prefix)
        return _probabilities(rerun, batch, torch.arange(rows), classes)


def _probabilities(
    runner: ModelRunner, encoded: Encoded, examples: Tensor, classes: bool = False, **inputs: Tensor
) -> np.ndarray:
    """Return m [rows]: exp of each row's target log-probability (no contrast; the logit itself for a decision
    without a probability), row r being example examples[r] of `encoded` with `inputs` (input_ids or inputs_embeds
    [rows, ...]) in place of its own: `ModelRunner.score` (the Capturable's forward, the decision's own reader)
    without autograd, which removal does not need. classes: return the softmax of the decision's class logits
    [rows, classes] instead."""
    if classes:
        batch = encoded.rows(examples, **inputs)
        logits = runner.reader.logits(runner.capturable.run(batch), batch)
        if logits is None or logits.dim() != 2:
            raise AnalyzerError("only a class decision has class probabilities to re-read after a removal.")
        return to_numpy(logits.double().softmax(-1))
    if not runner.reader.has_probability:
        logits = runner.score(encoded, Forward(examples=examples, output="logit", contrast=False, **inputs), grad=False)
        return to_numpy(logits.double())
    scores = runner.score(encoded, Forward(examples=examples, output="logprob", contrast=False, **inputs), grad=False)
    return to_numpy(scores.double().exp())


def decoder_side(ctx: RunContext, encoded: Encoded) -> bool:
    """Return whether the decision reads the decoder of an encoder-decoder (its positions are not the input's)."""
    return ctx.runner is not None and ctx.runner.reader.side == "decoder" and encoded.decoder is not None


def _pads_left(encoded: Encoded, example: int) -> bool:
    mask = encoded.attention_mask[example]
    return bool(mask[0] == 0 and mask[-1] != 0)


def _mask_id(tokenizer: object) -> int:
    mask = getattr(tokenizer, "mask_token_id", None)
    return int(mask) if mask is not None else pad_token_id(tokenizer)


def removal_masks(
    pos: int, order: Int[np.ndarray, " n"], counts: Sequence[int], *, most_relevant: bool
) -> Bool[np.ndarray, "steps pos"]:
    """Return masks [steps, pos] removing, per step, the `count` most (or least) relevant tokens of `order`.

    order: candidate positions sorted most relevant first.
    """
    masks = np.zeros((len(counts), pos), dtype=bool)
    ranked = order if most_relevant else order[::-1]
    for step, count in enumerate(counts):
        masks[step, ranked[:count]] = True
    return masks
