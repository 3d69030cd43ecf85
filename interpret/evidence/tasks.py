"""Known-answer tasks whose decisive evidence is known but not trivial, to tell explanation methods apart.

Each task is a binary classification of random filler sentences, learnt by a tiny Hugging Face BERT
classifier (post-norm, d_model 32, 2 layers) whose trained weights the package ships (`task_model`: training
is seeded but not reproducible bit for bit across CPUs, so what is asserted about the models would move with
the machine), with the positions of the evidence that decides each example recorded when the sentence is
made. BERT rather than the reference EncoderClassifier (v1) so that the decomposition methods, which need a
Hugging Face family's norms and projections, run on the tasks too:

- ``negation``: every sentence holds "good" once; label 0 iff a "not" comes before it (a marker that counts
  only after a negation); most positives hold a "not" after "good", which negates nothing. Evidence of a
  negated example: that "not" and "good".
- ``cooccur``: label 1 iff both "alpha" and "beta" occur; a negative holds one of them, or neither.
  Evidence of a positive: both.
- ``distractor``: label 1 iff "!" occurs; every sentence holds 3–6 copies of "wow", frequent and irrelevant.
  Evidence of a positive: the "!".
- ``balance``: label 1 iff "up" occurs more often than "down", always one vote apart (3-5 against 2-4).
  Evidence: the tokens of the majority, which support the decision; the minority's tokens, just as necessary
  to attend to, oppose it, so a method that reads only where attention goes cannot tell support from
  opposition and recovers little more than the majority's share (about 0.57); a method that sees what the
  attended tokens contribute (signed gradients, decompositions) can recover all of it.
- ``far``: long sentences (32–48 words); label 1 iff "!" occurs, always in the last fifth, far from the
  [CLS] row the decision reads. Evidence of a positive: the "!".

`evidence_recovery` scores a ranking by precision at k (k = the number of evidence tokens): the share of its k
highest-ranked removable tokens that are evidence; a random ranking scores k / n in expectation.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

from interpret.data.shipped import read_weights
from interpret.errors import ConfigError
from interpret.inputs import encode
from interpret.reference.toy import FILLERS, TOY_NAME, marker_dataset, marker_task, train_classifier
from interpret.reference.vocab import word_tokenizer

EXTRA_WORDS = ("good", "not", "alpha", "beta", "!", "wow", "up", "down")
VOCABULARY = (*FILLERS, *EXTRA_WORDS)
LONG_WORDS = 48
# The marker task of interpret.reference.toy ("!" anywhere), on the reference EncoderClassifier: its model is
# shipped and checked like the tasks' but it is not in the suite (the decomposition methods refuse that model).
MARKER_TASK = "marker"


@dataclass(frozen=True)
class TaskData:
    """Sentences of a task: texts, labels [batch], and per example the evidence positions (tokenized, [CLS] = 0)."""

    texts: tuple[str, ...]
    labels: Int[Tensor, " batch"]
    evidence: tuple[tuple[int, ...], ...]


def _fillers(rng: random.Random, low: int, high: int) -> list[str]:
    return [rng.choice(FILLERS) for _ in range(rng.randint(low, high))]


def _negation(rng: random.Random, label: int) -> tuple[list[str], tuple[int, ...]]:
    words = _fillers(rng, 8, 12)
    spot = rng.randrange(1, len(words))
    words[spot] = "good"
    if label == 0:
        at = rng.randrange(0, spot)
        words[at] = "not"
        return words, (at + 1, spot + 1)
    if rng.random() < 0.7 and spot < len(words) - 1:  # a "not" after "good" negates nothing
        words[rng.randrange(spot + 1, len(words))] = "not"
    return words, ()


def _cooccur(rng: random.Random, label: int) -> tuple[list[str], tuple[int, ...]]:
    words = _fillers(rng, 8, 12)
    first, second = rng.sample(range(len(words)), 2)
    if label == 1:
        words[first], words[second] = "alpha", "beta"
        return words, tuple(sorted((first + 1, second + 1)))
    kind = rng.randrange(3)
    if kind < 2:
        words[first] = ("alpha", "beta")[kind]
    return words, ()


def _distractor(rng: random.Random, label: int) -> tuple[list[str], tuple[int, ...]]:
    words = _fillers(rng, 10, 14)
    spots = rng.sample(range(len(words)), rng.randint(4, 7))
    for spot in spots[1:]:
        words[spot] = "wow"
    if label == 1:
        words[spots[0]] = "!"
        return words, (spots[0] + 1,)
    return words, ()


def _far(rng: random.Random, label: int) -> tuple[list[str], tuple[int, ...]]:
    words = _fillers(rng, 32, LONG_WORDS)
    if label == 1:
        spot = rng.randrange(len(words) * 4 // 5, len(words))
        words[spot] = "!"
        return words, (spot + 1,)
    return words, ()


def _balance(rng: random.Random, label: int) -> tuple[list[str], tuple[int, ...]]:
    words = _fillers(rng, 10, 14)
    many = rng.randint(3, 5)
    few = many - 1  # one vote apart: every token of both sides matters, and the minority's oppose the label
    ups, downs = (many, few) if label == 1 else (few, many)
    spots = rng.sample(range(len(words)), ups + downs)
    for spot in spots[:ups]:
        words[spot] = "up"
    for spot in spots[ups:]:
        words[spot] = "down"
    support = spots[:ups] if label == 1 else spots[ups:]
    return words, tuple(sorted(spot + 1 for spot in support))


TASKS: dict[str, tuple[Callable[[random.Random, int], tuple[list[str], tuple[int, ...]]], str]] = {
    "negation": (_negation, "'good' counts only when no 'not' precedes it (evidence: the 'not' and 'good')"),
    "cooccur": (_cooccur, "positive iff 'alpha' and 'beta' both occur (evidence: both)"),
    "distractor": (_distractor, "positive iff '!' occurs, among frequent irrelevant 'wow's (evidence: '!')"),
    "balance": (_balance, "positive iff more 'up' than 'down' (evidence: the majority's tokens, which support it)"),
    "far": (_far, "positive iff '!' occurs, in the last fifth of 32-48 words (evidence: '!')"),
}


def task_dataset(task: str, n: int, seed: int) -> TaskData:
    """Return `n` examples of `task` (half of each label, shuffled), generated from `seed`."""
    if task == MARKER_TASK:
        data = marker_dataset(n, seed)
        return TaskData(data.texts, data.labels, data.decisive)
    _known(task)
    make = TASKS[task][0]
    rng = random.Random(f"{task}-{seed}")
    labels = [index % 2 for index in range(n)]
    rng.shuffle(labels)
    texts, evidence = [], []
    for label in labels:
        words, found = make(rng, label)
        texts.append(" ".join(words))
        evidence.append(found)
    return TaskData(tuple(texts), torch.tensor(labels, dtype=torch.long), tuple(evidence))


def task_tokenizer() -> PreTrainedTokenizerFast:
    """Return the tasks' word tokenizer (fillers and task words)."""
    return word_tokenizer(list(VOCABULARY), model_max_length=LONG_WORDS + 2)


def task_config(vocab_size: int) -> BertConfig:
    """Return the tasks' classifier: a post-norm BERT, d_model 32, 2 layers, 4 heads, MLP 64, no dropout,
    eager attention; the sequence-classification head reads [CLS] through the pooler."""
    return BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=LONG_WORDS + 2, type_vocab_size=1, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, num_labels=2, pad_token_id=0, attn_implementation="eager",
    )


def train_task_model(
    task: str, seed: int = 0, *, n_train: int = 3000, steps: int = 400, batch_size: int = 32, lr: float = 3e-3
) -> tuple[BertForSequenceClassification, PreTrainedTokenizerFast]:
    """Return (the BERT classifier trained on `task`, in eval mode; its tokenizer). Same seed, same weights.

    A Hugging Face BERT rather than the reference EncoderClassifier, so that every method runs on the tasks:
    the decomposition analyzers (norm-based attention, GlobEnc, ALTI, value zeroing) need a Hugging Face
    family's norms and projections and refuse the reference model."""
    tokenizer = task_tokenizer()
    data = task_dataset(task, n_train, seed)
    model = train_classifier(
        lambda: BertForSequenceClassification(task_config(len(tokenizer))), encode(tokenizer, list(data.texts)),
        data.labels, seed, steps=steps, batch_size=batch_size, lr=lr,
    )
    return model, tokenizer


def task_model(task: str) -> tuple[torch.nn.Module, PreTrainedTokenizerFast]:
    """Return `task`'s trained model (eval mode) and tokenizer: the weights the package ships (`weights_name`,
    sha256-checked; `benchmarks/train_toy.py` retrains them and ships them only when they pass the
    planted-evidence check of `interpret.evidence.suite`). Nothing is trained."""
    if task == MARKER_TASK:
        return marker_task()
    _known(task)
    tokenizer = task_tokenizer()
    model = BertForSequenceClassification(task_config(len(tokenizer)))
    model.load_state_dict(read_weights(weights_name(task))[0])
    return model.eval(), tokenizer


def weights_name(task: str) -> str:
    """Return the name of `task`'s shipped weights in interpret/data/models (without .safetensors)."""
    return TOY_NAME if task == MARKER_TASK else f"task-{_known(task)}"


def _known(task: str) -> str:
    if task != MARKER_TASK and task not in TASKS:
        raise ConfigError(f"task {task!r} is not one of {', '.join([*TASKS, MARKER_TASK])}.")
    return task


def task_accuracy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, data: TaskData) -> float:
    """Return the share of `data` the model labels correctly (a Hugging Face classifier's `.logits` or the
    reference model's logits [batch, 2])."""
    encoded = encode(tokenizer, list(data.texts))
    with torch.no_grad():
        output = model(encoded.input_ids, encoded.attention_mask)
    predicted = getattr(output, "logits", output).argmax(dim=-1)
    return float((predicted == data.labels).float().mean())


def precision_at_k(
    readout: Float[np.ndarray, " pos"], positions: Int[np.ndarray, " n"], evidence: Sequence[int]
) -> float:
    """Return the share of the k highest-ranked candidate positions that are evidence (k = len(evidence))."""
    from interpret.evidence.ranking import order_of

    k = len(evidence)
    top = order_of(readout, positions)[:k]
    return len(set(top.tolist()) & set(evidence)) / k


def evidence_recovery(
    readouts: Float[np.ndarray, "batch pos"], candidates: Sequence[np.ndarray], evidence: Sequence[Sequence[int]]
) -> float:
    """Return the mean precision at k over the examples that have evidence (NaN when none has)."""
    scores = [
        precision_at_k(readouts[b], candidates[b], found) for b, found in enumerate(evidence) if found
    ]
    return float(np.mean(scores)) if scores else float("nan")
