"""The marker task: a toy classifier with a known answer, trained deterministically, shipped, saved and loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from interpret.data.shipped import read_weights
from interpret.errors import ModelLoadError
from interpret.inputs import encode
from interpret.reference import (
    EncoderClassifier,
    load_toy,
    marker_dataset,
    marker_task,
    save_toy,
    train_marker_model,
)
from interpret.reference.toy import MARKER, TOY_NAME, marker_accuracy, marker_tokenizer

Trained = tuple[EncoderClassifier, PreTrainedTokenizerFast]


@pytest.fixture(scope="module")
def trained() -> Trained:
    """The shipped model (training is not reproducible across CPUs; tests/evidence/test_tasks.py checks it)."""
    return marker_task()


def test_dataset_is_balanced_and_decisive_positions_point_at_the_marker() -> None:
    data = marker_dataset(200, seed=5)
    assert data.labels.shape == (200,) and int(data.labels.sum()) == 100
    encoded = encode(marker_tokenizer(), list(data.texts))
    for tokens, label, decisive in zip(encoded.tokens, data.labels.tolist(), data.decisive, strict=True):
        assert (MARKER in tokens) == bool(label)
        assert [tokens[position] for position in decisive] == ([MARKER] if label else [])
    same = marker_dataset(200, seed=5)
    assert (
        same.texts == data.texts and same.decisive == data.decisive and torch.equal(same.labels, data.labels)
    )
    assert marker_dataset(200, seed=6).texts != data.texts


def test_accuracy_on_held_out_data(trained: Trained) -> None:
    model, tokenizer = trained
    assert not model.training
    assert marker_accuracy(model, tokenizer, marker_dataset(500, seed=1234)) >= 0.98


def test_training_is_deterministic() -> None:
    first, again = (train_marker_model(seed=0, n_train=200, steps=5)[0].state_dict() for _ in range(2))  # cheap
    assert first.keys() == again.keys() and all(torch.equal(first[name], again[name]) for name in first)


def test_save_load_round_trip(trained: Trained, tmp_path: Path) -> None:
    model, tokenizer = trained
    save_toy(model, tokenizer, tmp_path / "toy")
    loaded, loaded_tokenizer = load_toy(tmp_path / "toy")
    assert loaded.config == model.config
    assert loaded_tokenizer.get_vocab() == tokenizer.get_vocab()
    encoded = encode(loaded_tokenizer, ["the cat ! sat", "a dog ran on the mat"])
    with torch.no_grad():
        expected = model(encoded.input_ids, encoded.attention_mask)
        got = loaded(encoded.input_ids, encoded.attention_mask)
    assert torch.equal(got, expected)
    (tmp_path / "toy" / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        load_toy(tmp_path / "toy")


def test_marker_task_is_the_shipped_weights_without_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path))  # an empty cache: nothing trained before
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda *_: pytest.fail("marker_task trained"))
    model, tokenizer = marker_task()
    assert isinstance(model, EncoderClassifier) and not model.training and len(tokenizer) == model.config.vocab_size
    shipped = read_weights(TOY_NAME)[0]
    assert model.state_dict().keys() == shipped.keys()
    assert all(torch.equal(tensor, shipped[name]) for name, tensor in model.state_dict().items())
