"""Where models come from: hub names from the local cache only (an uncached one fails at once, with no network
attempt), and names from a model's config (labels) printed without their terminal escape sequences."""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest
import torch
import transformers
from cli_runner import run
from hf_tiny import tiny_config, word_tokenizer

import interpret
from interpret.errors import ModelLoadError

TEXT = "the cat sat on the mat"


@pytest.fixture
def hub_cache(tmp_path: Path, classifier_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache holding `some-org/tiny-classifier` (a snapshot of the tiny classifier)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--some-org--tiny-classifier"
    snapshot = repo / "snapshots" / "0123456789abcdef"
    shutil.copytree(classifier_dir, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Allow the hub client to go online, and record (and refuse) every connection it would open."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


def test_a_cached_hub_name_is_used_offline(hub_cache: Path, loads: list[str]) -> None:
    result = run("report", "--model", "some-org/tiny-classifier", "--text", TEXT, "-a", "rollout", "--format", "json",
                 "-o", "-", "-q")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["run"]["model_id"] == "some-org/tiny-classifier"
    assert loads == ["load some-org/tiny-classifier"]


def test_an_uncached_hub_name_fails_at_once_without_the_network(
    hub_cache: Path, no_network: list[object], loads: list[str]
) -> None:
    started = time.perf_counter()
    result = run("report", "--model", "some-org/never-cached-model", "--text", TEXT)
    assert result.exit_code == 2 and time.perf_counter() - started < 2
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert "not in the Hugging Face cache" in line and "--model ./my-model" in line
    assert loads == []
    with pytest.raises(ModelLoadError, match="hf download some-org/never-cached-model"):
        interpret.load("some-org/never-cached-model")  # the Python API answers at once too
    assert no_network == []


@pytest.fixture(scope="module")
def escaping_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classifier whose config names its labels with a terminal escape sequence and a bidi override."""
    torch.manual_seed(0)
    tokenizer = word_tokenizer()
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.id2label = {0: "neg\x1b[2J\x1b[31m", 1: "pos\u202eevil"}
    config.label2id = {label: index for index, label in config.id2label.items()}
    directory = tmp_path_factory.mktemp("tiny-bert-escaping")
    transformers.BertForSequenceClassification(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_label_names_print_without_escape_sequences(escaping_dir: Path, tmp_path: Path) -> None:
    result = run("report", "--model", str(escaping_dir), "--text", TEXT, "-a", "rollout", "-o", str(tmp_path / "r.html"))
    assert result.exit_code == 0, result.stderr
    printed = result.stdout + result.stderr
    assert "\x1b" not in printed and "\u202e" not in printed
    assert "\\x1b[2J" in result.stdout or "\\u202e" in result.stdout
    bad = run("report", "--model", str(escaping_dir), "--text", TEXT, "-a", "rollout", "--target", "x\x1b[31m")
    assert bad.exit_code == 2 and "\x1b" not in bad.stderr
    assert "'neg\\x1b[2J\\x1b[31m'" in bad.stderr or "neg\\x1b[2J" in bad.stderr
