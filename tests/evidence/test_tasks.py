"""Known-answer tasks: each generator plants the evidence where it says and labels by its rule, precision at k
equals its definition, and on a trained task the planted ranking recovers all of its evidence and is more
comprehensive than random and than attention, while a random ranking recovers about k / n; on `balance` the
methods' recovery differs widely (input × gradient ≥ 0.9, last-layer attention ≤ 0.75).

The trained models are the weights the package ships (training is not reproducible across CPUs and thread
counts): each passes the planted-evidence check, loading them trains nothing and checks their sha256, and a
model that fails the check is neither scored nor shipped."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertForSequenceClassification

from interpret.data import shipped
from interpret.data.shipped import read_weights
from interpret.errors import ConfigError, ModelLoadError
from interpret.evidence.suite import PlantedCheck, planted_check, run_suite, score_task, ship
from interpret.evidence.tasks import (
    MARKER_TASK,
    TASKS,
    precision_at_k,
    task_config,
    task_dataset,
    task_model,
    task_tokenizer,
    weights_name,
)
from interpret.inputs import encode


@pytest.mark.parametrize("task", list(TASKS))
def test_generators_follow_their_rule(task: str) -> None:
    data = task_dataset(task, 200, seed=1)
    assert data.labels.float().mean() == 0.5
    again = task_dataset(task, 200, seed=1)  # seeded
    assert again.texts == data.texts and again.evidence == data.evidence and again.labels.equal(data.labels)
    encoded = encode(task_tokenizer(), list(data.texts))
    for b, (label, evidence) in enumerate(zip(data.labels.tolist(), data.evidence)):
        tokens = encoded.tokens[b]
        words = data.texts[b].split()
        if task == "negation":
            good = words.index("good")
            assert label == (0 if "not" in words[:good] else 1) and words.count("good") == 1
            assert (not evidence) == bool(label) and [tokens[p] for p in evidence] == (["not", "good"] if evidence else [])
        elif task == "cooccur":
            assert label == int("alpha" in words and "beta" in words)
            assert sorted(tokens[p] for p in evidence) == (["alpha", "beta"] if label else [])
        elif task == "balance":
            ups, downs = words.count("up"), words.count("down")
            assert label == int(ups > downs) and abs(ups - downs) == 1 and max(ups, downs) >= 3
            assert [tokens[p] for p in evidence] == ["up" if label else "down"] * max(ups, downs)
        else:
            assert label == int("!" in words) and [tokens[p] for p in evidence] == (["!"] if label else [])
            if task == "distractor":
                assert words.count("wow") >= 3
            if task == "far":
                assert not label or evidence[0] - 1 >= len(words) * 4 // 5


def test_precision_at_k() -> None:
    readout = np.array([0.0, 0.9, 0.1, 0.8, 0.3, 0.0])
    positions = np.array([1, 2, 3, 4])
    assert precision_at_k(readout, positions, (1, 3)) == 1.0  # top-2 are 1 and 3
    assert precision_at_k(readout, positions, (1, 4)) == 0.5
    assert precision_at_k(readout, positions, (2,)) == 0.0


def test_planted_beats_random_and_balance_separates_attention_from_gradients() -> None:
    rows = {row.method: row for row in run_suite(["last_layer_attention", "input_x_gradient"], tasks=["balance"], n=16)}
    assert rows["planted"].recovery == 1.0 and rows["planted"].accuracy > 0.95
    assert rows["random"].recovery < 0.4
    assert rows["planted"].comprehensiveness > 0.5
    assert rows["random"].comprehensiveness < rows["planted"].comprehensiveness - 0.3
    assert rows["planted"].comprehensiveness > rows["last_layer_attention"].comprehensiveness
    # where attention goes cannot tell the supporting majority from the opposing minority; a signed gradient can
    assert rows["input_x_gradient"].recovery >= 0.9
    assert rows["last_layer_attention"].recovery <= 0.75
    assert not any(row.failed for row in rows.values())  # the shipped model passed the planted-evidence check


# balance: the test above (a task whose model fails the check has every analyzer row failed)
@pytest.mark.parametrize("task", [MARKER_TASK, *(task for task in TASKS if task != "balance")])
def test_shipped_models_pass_the_planted_evidence_check(
    task: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Loaded from the package with an empty cache and no training; accurate on held-out examples, and deleting
    the planted evidence costs the decision far more than deleting random tokens."""
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda *_: pytest.fail("the shipped model was trained"))
    model, tokenizer = task_model(task)
    assert not model.training
    check = planted_check(score_task(task, model, tokenizer))
    assert check.failure == "" and check.accuracy >= 0.95 and check.planted - check.random >= 0.5


def test_a_model_that_does_not_use_the_evidence_is_neither_scored_nor_shipped(tmp_path: Path) -> None:
    tokenizer = task_tokenizer()
    untrained = BertForSequenceClassification(task_config(len(tokenizer))).eval()
    rows = {row.method: row for row in score_task("cooccur", untrained, tokenizer, ["last_layer_attention"])}
    refused = rows["last_layer_attention"]
    assert refused.failed.startswith("the task model's held-out accuracy is 0.") and math.isnan(refused.recovery)
    assert not rows["planted"].failed and math.isfinite(rows["random"].comprehensiveness)  # they show why
    check = ship("cooccur", untrained, tokenizer, directory=tmp_path)
    assert check.failure == refused.failed and not list(tmp_path.iterdir())
    lazy = PlantedCheck(accuracy=1.0, planted=0.3, random=-0.1)
    assert lazy.failure.startswith("the task model does not use the planted evidence: deleting it is worth 0.300")


def test_shipped_weights_are_refused_when_their_digest_differs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    copy = tmp_path / "models"
    shutil.copytree(shipped.MODELS_DIR, copy)
    monkeypatch.setattr(shipped, "MODELS_DIR", copy)  # where the package's weights lie, not how they are read
    name = weights_name("balance")
    task_model("balance")  # the sound copy loads
    path = copy / f"{name}.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    path.write_bytes(bytes(data))
    for load in (lambda: task_model("balance"), lambda: read_weights(name)):
        with pytest.raises(ModelLoadError, match=r"task-balance.safetensors has sha256 \w{16}…, not the \w{16}…") as error:
            load()
        assert "\n" not in str(error.value)
    (copy / "SHA256SUMS").write_text("")
    with pytest.raises(ModelLoadError, match="lists no toy-marker-v1.safetensors; reinstall"):
        task_model(MARKER_TASK)
    with pytest.raises(ConfigError, match="task 'sentiment' is not one of"):
        task_model("sentiment")


def test_write_weights_records_the_digest_that_read_weights_checks(tmp_path: Path) -> None:
    tensors = {"weight": torch.arange(6.0).reshape(2, 3), "bias": torch.zeros(2)}
    shipped.write_weights("demo", tensors, {"note": "x"}, tmp_path)
    shipped.write_weights("other", tensors, None, tmp_path)
    loaded, metadata = read_weights("demo", tmp_path)
    assert metadata == {"note": "x"} and all(torch.equal(loaded[key], value) for key, value in tensors.items())
    assert sorted(line.split()[1] for line in (tmp_path / "SHA256SUMS").read_text().splitlines()) == [
        "demo.safetensors", "other.safetensors"]
