"""A known-answer task: is the marker token in the sentence? The decisive token's position is known.

`train_marker_model` trains a tiny EncoderClassifier to ~100% accuracy in a few seconds on a CPU (seeded and
deterministic on one machine, but not bit for bit across CPUs); `marker_task` returns the trained weights the
package ships, so that what tests and demos assert about the model holds on every machine.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from jaxtyping import Int
from safetensors.torch import load_file, save_file
from torch import Tensor
from transformers import PreTrainedTokenizerFast

from interpret.data.shipped import read_weights
from interpret.errors import ConfigError, ModelLoadError
from interpret.inputs import Encoded, encode
from interpret.reference.config import TransformerConfig
from interpret.reference.models import EncoderClassifier
from interpret.reference.vocab import vocabulary_words, word_tokenizer

Classifier = TypeVar("Classifier", bound=torch.nn.Module)

TOY_NAME = "toy-marker-v1"
MARKER = "!"
FILLERS = tuple("the a cat dog sat ran on mat big small red blue house tree saw ate fish bird sky sun".split())
MAX_WORDS = 12
_CONFIG_FILE, _WEIGHTS_FILE, _VOCAB_FILE = "config.json", "model.safetensors", "vocab.json"


@dataclass(frozen=True)
class MarkerData:
    """Examples of the marker task.

    texts: the sentences; labels: [batch] 1 iff the marker occurs; decisive: per example the token positions
    (in the tokenized sequence, where [CLS] is position 0) that decide the label: the marker's position for
    a positive example, none for a negative one.
    """

    texts: tuple[str, ...]
    labels: Int[Tensor, " batch"]  # leading space: a shape, not a forward reference
    decisive: tuple[tuple[int, ...], ...]


def marker_dataset(
    n: int,
    seed: int,
    *,
    min_words: int = 4,
    max_words: int = MAX_WORDS,
    marker: str = MARKER,
    fillers: Sequence[str] = FILLERS,
) -> MarkerData:
    """Return `n` sentences of random filler words, half of them (shuffled) with the marker somewhere."""
    if marker in fillers:
        raise ConfigError(f"marker {marker!r} is also a filler word; pick a marker outside the fillers.")
    if not 1 <= min_words <= max_words:
        raise ConfigError(f"min_words={min_words}, max_words={max_words}; need 1 <= min_words <= max_words.")
    rng = random.Random(seed)
    labels = [index % 2 for index in range(n)]
    rng.shuffle(labels)
    texts: list[str] = []
    decisive: list[tuple[int, ...]] = []
    for label in labels:
        words = [rng.choice(fillers) for _ in range(rng.randint(min_words, max_words))]
        if label:
            spot = rng.randrange(len(words))
            words[spot] = marker
            decisive.append((spot + 1,))  # +1 for the [CLS] token in front
        else:
            decisive.append(())
        texts.append(" ".join(words))
    return MarkerData(
        texts=tuple(texts), labels=torch.tensor(labels, dtype=torch.long), decisive=tuple(decisive)
    )


def marker_config(vocab_size: int, max_positions: int = MAX_WORDS + 2) -> TransformerConfig:
    """Return the config of the toy model: d_model 32, 2 layers, 4 heads, pre-norm, first-token pooling."""
    return TransformerConfig(
        d_model=32,
        n_heads=4,
        n_layers=2,
        d_mlp=64,
        vocab_size=vocab_size,
        max_positions=max_positions,
        positions="learned",
        norm_first=True,
        final_norm=True,
        n_classes=2,
        pooling="first",
    )


def marker_tokenizer() -> PreTrainedTokenizerFast:
    """Return the toy task's word tokenizer: the fillers and the marker, at most MAX_WORDS words per text."""
    return word_tokenizer([*FILLERS, MARKER], model_max_length=MAX_WORDS + 2)


@contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    """Seed torch, use deterministic kernels and one thread inside; restore all of it afterwards."""
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(was_deterministic, warn_only=warn_only)
            torch.set_num_threads(threads)


def train_marker_model(
    seed: int = 0, *, n_train: int = 2000, steps: int = 200, batch_size: int = 32, lr: float = 3e-3
) -> tuple[EncoderClassifier, PreTrainedTokenizerFast]:
    """Return (a trained EncoderClassifier in eval mode with logits [batch, 2], its tokenizer).

    Same seed, same weights: training runs seeded, single-threaded, with deterministic algorithms.
    """
    tokenizer = marker_tokenizer()
    data = marker_dataset(n_train, seed)
    model = train_classifier(
        lambda: EncoderClassifier(marker_config(len(tokenizer))), encode(tokenizer, list(data.texts)), data.labels,
        seed, steps=steps, batch_size=batch_size, lr=lr,
    )
    return model, tokenizer


def train_classifier(
    build: Callable[[], Classifier], encoded: Encoded, labels: Tensor, seed: int, *, steps: int,
    batch_size: int, lr: float,
) -> Classifier:
    """Return the classifier `build()` makes (inside the seeded, deterministic scope), trained with AdamW on
    random batches of `encoded` [n, pos] against `labels` [n] for `steps` steps, in eval mode. `build` may
    also make a Hugging Face sequence classifier (its output's `.logits` are used)."""
    with _deterministic(seed):
        model = build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        order = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(steps):
            batch = torch.randint(0, len(labels), (batch_size,), generator=order)
            logits = model(encoded.input_ids[batch], encoded.attention_mask[batch])
            logits = getattr(logits, "logits", logits)  # a Hugging Face classifier returns an output object
            loss = torch.nn.functional.cross_entropy(logits, labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def marker_accuracy(model: EncoderClassifier, tokenizer: PreTrainedTokenizerFast, data: MarkerData) -> float:
    """Return the fraction of `data` the model labels correctly."""
    encoded = encode(tokenizer, list(data.texts))
    with torch.no_grad():
        predicted = model(encoded.input_ids, encoded.attention_mask).argmax(dim=-1)
    return float((predicted == data.labels).float().mean())


def save_toy(model: EncoderClassifier, tokenizer: PreTrainedTokenizerFast, directory: str | Path) -> Path:
    """Return the directory after writing model.safetensors, config.json and vocab.json into it."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    save_file(
        {name: tensor.contiguous() for name, tensor in model.state_dict().items()}, str(path / _WEIGHTS_FILE)
    )
    meta = {"format": TOY_NAME, "model": type(model).__name__, "config": model.config.to_dict()}
    (path / _CONFIG_FILE).write_text(json.dumps(meta, indent=2))
    vocab = {"words": vocabulary_words(tokenizer), "model_max_length": tokenizer.model_max_length}
    (path / _VOCAB_FILE).write_text(json.dumps(vocab, indent=2))
    return path


def load_toy(directory: str | Path) -> tuple[EncoderClassifier, PreTrainedTokenizerFast]:
    """Return (EncoderClassifier in eval mode, tokenizer) saved by `save_toy` in `directory`."""
    path = Path(directory)
    missing = [name for name in (_CONFIG_FILE, _WEIGHTS_FILE, _VOCAB_FILE) if not (path / name).is_file()]
    if missing:
        raise ModelLoadError(
            f"toy model in {path} lacks {', '.join(missing)}; delete the folder and train again."
        )
    meta = json.loads((path / _CONFIG_FILE).read_text())
    if meta.get("model") != EncoderClassifier.__name__:
        raise ModelLoadError(
            f"{path / _CONFIG_FILE} describes a {meta.get('model')!r}, not an EncoderClassifier."
        )
    vocab = json.loads((path / _VOCAB_FILE).read_text())
    tokenizer = word_tokenizer(vocab["words"], model_max_length=int(vocab["model_max_length"]))
    model = EncoderClassifier(TransformerConfig.from_dict(meta["config"]))
    model.load_state_dict(load_file(str(path / _WEIGHTS_FILE)))
    return model.eval(), tokenizer


def marker_task() -> tuple[EncoderClassifier, PreTrainedTokenizerFast]:
    """Return (the trained toy EncoderClassifier in eval mode, its tokenizer): the weights the package ships
    (interpret/data/models/toy-marker-v1.safetensors, sha256-checked; `benchmarks/train_toy.py` retrains them
    with `train_marker_model` and ships them only when they pass the planted-evidence check). Nothing is trained."""
    tokenizer = marker_tokenizer()
    model = EncoderClassifier(marker_config(len(tokenizer)))
    model.load_state_dict(read_weights(TOY_NAME)[0])
    return model.eval(), tokenizer
