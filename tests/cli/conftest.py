"""Fixtures of the CLI tests: tiny saved models of every kind, a spy on model loading, and a runner."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
import torch
import transformers
from hf_tiny import save_tiny, tiny_config, tiny_model, word_tokenizer


@pytest.fixture(scope="session")
def classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT sentiment classifier (random weights, labels negative/positive) saved as safetensors."""
    torch.manual_seed(0)
    tokenizer = word_tokenizer()
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.id2label, config.label2id = {0: "negative", 1: "positive"}, {"negative": 0, "positive": 1}
    directory = tmp_path_factory.mktemp("tiny-bert-classifier")
    transformers.BertForSequenceClassification(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 language model with the word-level tokenizer."""
    return save_tiny("gpt2", tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama language model with the word-level tokenizer (it generates without ending its sequence early)."""
    return save_tiny("llama", tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def t5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny T5 encoder-decoder."""
    return save_tiny("t5", tmp_path_factory.mktemp("tiny-t5"))


@pytest.fixture(scope="session")
def vit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ViT image classifier."""
    return save_tiny("vit", tmp_path_factory.mktemp("tiny-vit"))


@pytest.fixture(scope="session")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CLIP text-image dual encoder."""
    return save_tiny("clip", tmp_path_factory.mktemp("tiny-clip"))


@pytest.fixture(scope="session")
def bare_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny bare BertModel: hidden states, no task head, so no decision to target."""
    torch.manual_seed(0)
    tokenizer = word_tokenizer()
    directory = tmp_path_factory.mktemp("tiny-bert-bare")
    transformers.BertModel(tiny_config("bert", vocab_size=len(tokenizer))).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def pickle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT saved only as a pickle checkpoint (pytorch_model.bin)."""
    directory = tmp_path_factory.mktemp("tiny-bert-pickle")
    model = tiny_model("bert")
    model.config.architectures = ["BertForMaskedLM"]
    model.config.save_pretrained(directory)
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
    word_tokenizer().save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def odd_dirs(tmp_path_factory: pytest.TempPathFactory, classifier_dir: Path) -> dict[str, Path]:
    """Broken model directories: no config, config not JSON, remote code, an unknown model type, no tokenizer."""
    root = tmp_path_factory.mktemp("odd-models")
    dirs = {name: root / name for name in ("no_config", "bad_json", "remote_code", "unknown_type", "no_tokenizer")}
    for directory in dirs.values():
        directory.mkdir()
        (directory / "model.safetensors").write_bytes((classifier_dir / "model.safetensors").read_bytes())
    (dirs["bad_json"] / "config.json").write_text("{not json", encoding="utf-8")
    config = json.loads((classifier_dir / "config.json").read_text(encoding="utf-8"))
    (dirs["remote_code"] / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "x.Y"}}))
    (dirs["unknown_type"] / "config.json").write_text(json.dumps({**config, "model_type": "no-such-family"}))
    (dirs["no_tokenizer"] / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (dirs["unknown_type"] / name).write_bytes((classifier_dir / name).read_bytes())
    return dirs


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every model load (interpret.models.loading.load, interpret.models.default_model.load_default), letting it run."""
    import interpret.models.default_model
    import interpret.models.loading

    calls: list[str] = []
    real_load, real_default = interpret.models.loading.load, interpret.models.default_model.load_default

    def load(*args: object, **kwargs: object) -> object:
        calls.append(f"load {args[0] if args else ''}")
        return real_load(*args, **kwargs)

    def load_default(*args: object, **kwargs: object) -> object:
        calls.append("load_default")
        return real_default(*args, **kwargs)

    monkeypatch.setattr(interpret.models.loading, "load", load)
    monkeypatch.setattr(interpret.models.default_model, "load_default", load_default)
    return calls


@pytest.fixture(scope="session")
def unwritable_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory in which no file can be created (a read-only folder, or /sys when running as root)."""
    candidate = tmp_path_factory.mktemp("read-only")
    candidate.chmod(0o500)
    for directory in (candidate, Path("/sys")):
        try:
            handle, name = tempfile.mkstemp(dir=directory)
        except OSError:
            return directory
        os.close(handle)
        os.unlink(name)
    pytest.skip("no directory here refuses new files (running as root without a read-only /sys)")
