"""The decision step: which output of the model is being explained, one `Target` per example.

`reader_for` says how a model's output becomes the logits of its decision, and where the decision reads
the sequence (its pooling); `decide` reads those logits from a trace's output and resolves each example's
Target from what the user asked (`TargetRequest`): the prediction by default, a class or token they name,
the example's gold label, and an optional contrast.

What the decision reads (the rows attention analyzers start from):
    classifier pooled on the first token ([CLS], ViT's class token)  → that position
    classifier pooled by mean (a head on a bare encoder, ModernBERT with classifier_pooling="mean", BEiT's
        use_mean_pooling, the reference EncoderClassifier with pooling="mean")  → every real position, 1/n each
    decoder classifier (GPT-2, Llama ...ForSequenceClassification)  → the last real token
    language model  → the position(s) whose logits score the target token(s)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from interpret.errors import InputError
from interpret.inputs import Encoded
from interpret.labels import resolve_class, resolve_labels
from interpret.target import Pooling, Target, TargetKind, TargetSource, uniform_pooling
from interpret.trace import ModelKind, Trace


@dataclass(frozen=True)
class TargetRequest:
    """What the user asked to explain, resolved into one Target per example by `decide`.

    target: a class index or label (classifiers) or a token (language models); None: the prediction.
    contrast: the alternative class or token for a contrastive explanation (score = target − contrast).
    gold: explain each example's gold label instead of the prediction (classifiers; `audit --target gold`).
    """

    target: int | str | None = None
    contrast: int | str | None = None
    gold: bool = False


@dataclass(frozen=True)
class Decision:
    """One example's decision: what the model predicted and what is explained.

    predicted / predicted_index / predicted_probability: the model's own top choice (at the first target
        position for language models).
    probability: the target's probability (a product over steps for several target tokens).
    gold: the example's gold label, when the input gave one: for a class decision the name of the class it
        names (`interpret.labels`: "0" and "negative" both become "negative"), else as given.
    gold_index: the class the gold label names (class decisions).
    contrast_probability: the contrast's probability, read as the target's (None without a contrast).
    """

    target: Target
    predicted: str = ""
    predicted_index: int | None = None
    predicted_probability: float | None = None
    probability: float | None = None
    gold: str | None = None
    gold_index: int | None = None
    contrast_probability: float | None = None

    @property
    def kind(self) -> TargetKind:
        """The target's kind: class, token or none."""
        return self.target.kind

    @property
    def correct(self) -> bool | None:
        """Whether the predicted class is the gold label's (None without a gold label or a class decision)."""
        if self.gold_index is None or self.target.kind != "class":
            return None
        return self.predicted_index == self.gold_index

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict of every field and the target."""
        return {
            "predicted": self.predicted,
            "predicted_index": self.predicted_index,
            "predicted_probability": self.predicted_probability,
            "probability": self.probability,
            "contrast_probability": self.contrast_probability,
            "gold": self.gold,
            "correct": self.correct,
            "target": self.target.to_dict(),
        }


@dataclass(frozen=True)
class DecisionReader:
    """How a model's output becomes the logits its decision reads.

    kind: "class" (logits [batch, classes]), "token" (logits [batch, pos, vocab] on `side`) or "none".
    pooling: where a class decision reads the sequence: first, last or mean over real positions; token
        decisions read their target positions ("targets").
    side: "main", or "decoder" for an encoder-decoder (its positions are the decoder's).
    head: a module mapping the hidden states [batch, pos, d_model] and mask [batch, pos] to class logits.
    labels: the class names (empty for token decisions).
    masked_lm: token logits of an encoder (a masked language model): its next-token decision reads the first
        mask token of the input when there is one.
    """

    kind: TargetKind
    pooling: Pooling = "first"
    side: Literal["main", "decoder"] = "main"
    head: nn.Module | None = None
    labels: tuple[str, ...] = ()
    masked_lm: bool = False

    def logits(self, output: Any, encoded: Encoded) -> Tensor | None:
        """Return the decision's logits: [batch, classes] for a class decision, [batch, pos, vocab] for tokens."""
        if self.head is not None:
            hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output
            return self.head(hidden, encoded.attention_mask)
        if self.kind == "none":
            return None
        return getattr(output, "logits", output)

    def pooling_of(self, encoded: Encoded, example: int) -> tuple[tuple[int, float], ...]:
        """Return the (position, weight) pairs a class decision reads in `example`."""
        side = self.side_of(encoded)
        real = torch.nonzero(side.attention_mask[example] != 0).flatten().tolist()
        if not real:
            return ()
        if self.pooling == "first":
            return ((real[0], 1.0),)
        if self.pooling == "last":
            return ((real[-1], 1.0),)
        return uniform_pooling(real)

    def side_of(self, encoded: Encoded) -> Encoded:
        """Return the Encoded whose positions the decision reads (the decoder side of an encoder-decoder)."""
        if self.side == "decoder" and encoded.decoder is not None:
            return encoded.decoder
        return encoded


def reader_for(model: nn.Module, kind: ModelKind, head: nn.Module | None = None, output: Any = None) -> DecisionReader:
    """Return the DecisionReader of `model` (of model kind `kind`), or of `head` on a bare encoder.

    `output` (the model's output of some forward pass) tells a class model from a language model when the
    model's class does not (reference models, HF classes with either head).
    """
    side: Literal["main", "decoder"] = "decoder" if kind == "encoder-decoder" else "main"
    if head is not None:
        labels = tuple(str(label) for label in getattr(head, "labels", ()) or ())
        return DecisionReader("class", _head_pooling(head), "main", head, labels)
    logits = getattr(output, "logits", output)
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        return DecisionReader("none", side=side)
    config = getattr(model, "config", None)
    if logits.dim() == 2:
        pooling: Pooling = "last" if kind in ("decoder", "encoder-decoder") else _class_pooling(model)
        return DecisionReader("class", pooling, side, None, _class_labels(config, int(logits.shape[-1])))
    vocab = getattr(config, "vocab_size", None)
    if logits.dim() == 3 and vocab == logits.shape[-1]:
        return DecisionReader("token", "targets", side, masked_lm=kind == "encoder")
    return DecisionReader("none", side=side)


def _head_pooling(head: nn.Module) -> Pooling:
    """Return how a head pools: its `pooling` attribute, else mean (a head sees every hidden state)."""
    declared = getattr(head, "pooling", "mean")
    if declared not in ("first", "last", "mean"):
        raise InputError(f"the head declares pooling={declared!r}; a head pools by 'first', 'last' or 'mean'.")
    return declared


def _class_pooling(model: nn.Module) -> Pooling:
    """Return where an encoder classifier reads the sequence: mean when its config says so, else the first token."""
    config = getattr(model, "config", None)
    reference = getattr(config, "pooling", None)
    if reference in ("first", "mean"):
        return reference
    if getattr(config, "classifier_pooling", None) == "mean" or getattr(config, "use_mean_pooling", False):
        return "mean"
    return "first"


def _class_labels(config: Any, size: int) -> tuple[str, ...]:
    id2label = getattr(config, "id2label", None)
    if isinstance(id2label, dict) and len(id2label) == size:
        return tuple(str(id2label[i]) for i in range(size))
    return tuple(f"class {i}" for i in range(size))


def structural_targets(trace: Trace) -> tuple[Target, ...]:
    """Return targets of kind "none" that read the first real token (the last for decoders, and the last
    decoder token of an encoder-decoder): what attention analyzers read when no model says how it decides."""
    reader = DecisionReader("none", "last" if trace.meta.kind in ("decoder", "encoder-decoder") else "first",
                            "decoder" if trace.meta.kind == "encoder-decoder" else "main")
    return tuple(Target("none", pooling=reader.pooling_of(trace.encoded, b)) for b in range(trace.encoded.batch))


def decide(
    model: nn.Module,
    trace: Trace,
    tokenizer: Any = None,
    request: TargetRequest | None = None,
    head: nn.Module | None = None,
    gold: Sequence[str | None] | None = None,
) -> list[Decision]:
    """Return one Decision per example of `trace`, each with its resolved Target.

    gold: the examples' gold labels (None where unknown), shown beside the prediction and used with
    `request.gold`; a class decision reads them all by `interpret.labels.resolve_labels` (refusing a label
    that names no class).
    """
    request = request or TargetRequest()
    reader = reader_for(model, trace.meta.kind, head, trace.output)
    encoded = trace.encoded
    golds = list(gold) if gold is not None else [None] * encoded.batch
    if len(golds) != encoded.batch:
        raise InputError(f"{len(golds)} gold labels for {encoded.batch} examples; give one per example.")
    with torch.no_grad():
        logits = reader.logits(trace.output, encoded)
    if reader.kind == "none" or logits is None:
        if request.target is not None or request.contrast is not None or request.gold:
            raise InputError(
                "this model makes no decision to target (no class or token logits); load it with a task head"
                " (e.g. ...ForSequenceClassification) or pass head=, or drop the target."
            )
        return [Decision(target, gold=golds[b]) for b, target in enumerate(structural_targets(trace))]
    if reader.kind == "class":
        classes = resolve_labels(golds, reader.labels)
        return [_class_decision(reader, logits[b], encoded, b, request, classes[b]) for b in range(encoded.batch)]
    return [_token_decision(reader, logits[b], encoded, b, tokenizer, request, golds[b]) for b in range(encoded.batch)]


def _class_decision(
    reader: DecisionReader, logits: Tensor, encoded: Encoded, example: int, request: TargetRequest, gold: int | None
) -> Decision:
    probabilities = logits.double().softmax(-1).cpu()
    labels = reader.labels
    best = int(probabilities.argmax())
    source: TargetSource
    if request.gold:
        if gold is None:
            raise InputError(f"example {example} has no gold label; give every example a label to explain gold targets.")
        index, source = gold, "gold"
    elif request.target is not None:
        index, source = resolve_class(request.target, labels), "given"
    else:
        index, source = best, "prediction"
    contrast = () if request.contrast is None else (resolve_class(request.contrast, labels),)
    if contrast and contrast[0] == index:
        raise InputError(f"the contrast {labels[index]!r} equals the target; contrast it with another class.")
    target = Target(
        "class", (index,), (), (labels[index],), contrast, tuple(labels[i] for i in contrast), source,
        reader.pooling_of(encoded, example),
    )
    rival = float(probabilities[contrast[0]]) if contrast else None
    name = None if gold is None else labels[gold]
    return Decision(target, labels[best], best, float(probabilities[best]), float(probabilities[index]), name, gold,
                    rival)


def _token_decision(
    reader: DecisionReader,
    logits: Tensor,
    encoded: Encoded,
    example: int,
    tokenizer: Any,
    request: TargetRequest,
    gold: str | None,
) -> Decision:
    side = reader.side_of(encoded)
    real = torch.nonzero(side.attention_mask[example] != 0).flatten().tolist()
    if not real:
        return Decision(Target("none"), gold=gold)
    if request.gold:
        raise InputError("gold targets need a classifier; for a language model give the target token with --target.")
    continuation = side.continuation[example] if side.continuation else 0
    if continuation and request.target is not None:
        raise InputError("give either a continuation or a target token, not both.")
    ids_row = side.input_ids[example] if side.input_ids is not None else None
    source: TargetSource
    if continuation:
        if ids_row is None or continuation >= len(real):
            raise InputError(f"example {example}: the continuation needs a prompt of at least one token before it.")
        steps = real[len(real) - continuation - 1:]
        positions = tuple(steps[:-1])
        ids = tuple(int(ids_row[p]) for p in steps[1:])
        source = "given"
    else:
        position = _readout_position(side, example, real, tokenizer if reader.masked_lm else None)
        positions = (position,)
        if request.target is not None:
            ids, source = (resolve_token(request.target, tokenizer, int(logits.shape[-1])),), "given"
        else:
            ids, source = (int(logits[position].argmax()),), "prediction"
    contrast = () if request.contrast is None else (resolve_token(request.contrast, tokenizer, int(logits.shape[-1])),) * len(ids)
    if contrast and any(a == b for a, b in zip(ids, contrast)):
        raise InputError("the contrast token equals the target token; contrast it with another token.")
    # Only the rows the decision reads: a long input's [pos, vocab] in float64 would be gigabytes.
    read = torch.as_tensor(positions, device=logits.device)
    log_probabilities = logits.index_select(0, read).double().log_softmax(-1).cpu()  # [len(positions), vocab]
    first = log_probabilities[0]
    best = int(first.argmax())
    probability = float(sum(log_probabilities[k, i] for k, i in enumerate(ids)).exp())
    rival = float(sum(log_probabilities[k, i] for k, i in enumerate(contrast)).exp()) if contrast else None
    target = Target(
        "token", ids, positions, tuple(_token_label(tokenizer, i) for i in ids), contrast,
        tuple(_token_label(tokenizer, i) for i in contrast), source, uniform_pooling(positions),
    )
    return Decision(target, _token_label(tokenizer, best), best, float(first[best].exp()), probability, gold,
                    contrast_probability=rival)


def _readout_position(side: Encoded, example: int, real: list[int], mask_tokenizer: Any) -> int:
    """Return the position whose logits the next-token decision reads: the last real one, or for a masked
    language model (pass its tokenizer as `mask_tokenizer`) the first mask token when the input has one."""
    mask_id = getattr(mask_tokenizer, "mask_token_id", None)
    if mask_id is not None and side.input_ids is not None:
        masked = [p for p in real if int(side.input_ids[example, p]) == mask_id]
        if masked:
            return masked[0]
    return real[-1]


def resolve_token(target: int | str, tokenizer: Any, vocab: int) -> int:
    """Return the token id that `target` names: an id, a token as the tokenizer writes it, or a text that
    is exactly one token."""
    if isinstance(target, int) and not isinstance(target, bool) or (isinstance(target, str) and target.isdigit()):
        index = int(target)
        if 0 <= index < vocab:
            return index
        raise InputError(f"token id {index} does not exist; this vocabulary has ids 0..{vocab - 1}.")
    text = str(target)
    if tokenizer is None:
        raise InputError(f"target token {text!r} needs the tokenizer; pass tokenizer= or give a token id.")
    vocabulary = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    if text in vocabulary:
        return int(vocabulary[text])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    unknown = getattr(tokenizer, "unk_token_id", None)
    if len(ids) == 1 and (ids[0] != unknown or unknown is None):
        return int(ids[0])
    if unknown is not None and unknown in ids:
        raise InputError(f"target {text!r} is not in the vocabulary; give a token the tokenizer knows, or a token id.")
    raise InputError(
        f"target {text!r} is {len(ids)} tokens, not one; give a single token as the tokenizer writes it"
        " (e.g. with its word-start marker) or a token id."
    )


def _token_label(tokenizer: Any, index: int) -> str:
    if tokenizer is None:
        return str(index)
    return str(tokenizer.convert_ids_to_tokens(int(index)))
