"""The marker task: a trained toy classifier with a known answer, deterministic, saved and cached."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

import interpret.reference.toy as toy
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
from interpret.reference.toy import MARKER, marker_accuracy, marker_tokenizer

Trained = tuple[EncoderClassifier, PreTrainedTokenizerFast]


@pytest.fixture(scope="module")
def trained() -> Trained:
    return train_marker_model(seed=0)


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


def test_training_is_deterministic(trained: Trained) -> None:
    again, _ = train_marker_model(seed=0)
    first = trained[0].state_dict()
    assert all(torch.equal(first[name], tensor) for name, tensor in again.state_dict().items())


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


def test_marker_task_trains_once_then_loads_from_cache(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def fake_train() -> Trained:
        calls.append(1)
        return trained

    monkeypatch.setattr(toy, "train_marker_model", fake_train)
    model, _ = marker_task(cache_dir=tmp_path)
    assert model is trained[0] and calls == [1]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["toy-marker-v1"]  # no staging folder left
    cached, _ = marker_task(cache_dir=tmp_path)
    assert calls == [1] and isinstance(cached, EncoderClassifier)
    assert all(torch.equal(cached.state_dict()[k], v) for k, v in model.state_dict().items())
