"""A model directory is what it says it is: `interpret.load` refuses a checkpoint that lacks weights of its class
(unless told to run them random, which the report then names), an index whose shards leave the directory, and
names a damaged safetensors file as damaged; the audit's weight digest covers every file the loader reads; and
the toolkit's own pruned format loads with the package's classes, never with the checkpoint's code."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import pytest
import torch
import transformers
from hf_tiny import TEXTS, save_tiny, save_tiny_classifier, word_tokenizer
from safetensors.torch import load_file, save_file

import interpret
from interpret.audit.identity import weights_digest
from interpret.capture.gates import head_gates
from interpret.errors import ModelLoadError
from interpret.estimate.checkpoint import locate
from interpret.heads import pruned_bert
from interpret.heads.store import removed_model, save_removed
from interpret.models.loading import load
import interpret.models.loading as loading


def _without(directory: Path, prefix: str) -> Path:
    """Rewrite model.safetensors in `directory` without the tensors whose names start with `prefix`."""
    tensors = load_file(directory / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if not k.startswith(prefix)}, directory / "model.safetensors",
              metadata={"format": "pt"})
    return directory


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_checkpoint_lacking_weights_of_its_class_is_refused_naming_them(tmp_path: Path) -> None:
    directory = _without(save_tiny_classifier(tmp_path / "model"), "classifier.")
    with pytest.raises(ModelLoadError) as err:
        load(directory)
    message = _one_line(err)
    assert "lacks 2 weight(s) of BertForSequenceClassification: classifier.bias, classifier.weight" in message
    assert "allow_missing_weights=True" in message and "allow_pickle" not in message


def test_allowed_missing_weights_are_seeded_and_named_in_the_report_and_the_digest(tmp_path: Path) -> None:
    directory = _without(save_tiny_classifier(tmp_path / "model"), "classifier.")
    model, tokenizer = load(directory, device="cpu", allow_missing_weights=True)
    again, _ = load(directory, device="cpu", allow_missing_weights=True)
    assert loading.random_weights(model) == ("classifier.bias", "classifier.weight")
    assert torch.equal(model.classifier.weight, again.classifier.weight)  # the same random numbers every run
    report = interpret.explain(model, tokenizer, TEXTS[0], ["rollout"], evidence=False)
    notes = dict(report.run.notes)
    assert "classifier.bias, classifier.weight" in notes["Random weights"]
    assert ["Random weights", notes["Random weights"]] in report.to_dict()["run"]["notes"]
    assert "Random weights" in report.page().decode("utf-8")
    # the random tensors are not in the files: the audit's digest hashes the tensors and names them
    digest = weights_digest(model, directory)
    assert digest.startswith("tensors sha256 ") and digest.endswith("(2 random: classifier.bias, classifier.weight)")
    assert loading.load_notes(load(save_tiny_classifier(tmp_path / "whole"), device="cpu")[0]) == ()


@pytest.mark.parametrize(("family", "tied"), [("gpt2", "lm_head.weight"), ("bert", "cls.predictions.decoder.weight"),
                                              ("t5", "lm_head.weight")])
def test_tied_weights_are_not_missing(tmp_path: Path, family: str, tied: str) -> None:
    directory = save_tiny(family, tmp_path)
    assert tied not in load_file(directory / "model.safetensors")  # saved once, as the embeddings
    model, _ = load(directory, device="cpu")  # not refused: a tied weight is not missing
    assert type(model).__name__ == json.loads((directory / "config.json").read_text())["architectures"][0]


def _sharded(directory: Path) -> Path:
    """Save a tiny classifier in several safetensors shards with an index."""
    torch.manual_seed(0)
    tokenizer = word_tokenizer()
    config = transformers.AutoConfig.from_pretrained(save_tiny_classifier(directory.parent / "single"))
    transformers.BertForSequenceClassification(config).eval().save_pretrained(directory, max_shard_size="20KB")
    tokenizer.save_pretrained(directory)
    assert (directory / "model.safetensors.index.json").is_file() and not (directory / "model.safetensors").exists()
    return directory


def _point(directory: Path, shard: str, to: str) -> None:
    """Make the index of `directory` name `to` wherever it named `shard`."""
    index_path = directory / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"] = {name: to if file == shard else file for name, file in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))


def test_an_index_naming_a_shard_outside_the_directory_is_refused(tmp_path: Path) -> None:
    directory = _sharded(tmp_path / "a" / "b" / "model")
    shard = sorted(json.loads((directory / "model.safetensors.index.json").read_text())["weight_map"].values())[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    os.replace(directory / shard, outside / "shard.safetensors")
    _point(directory, shard, "../../outside/shard.safetensors")  # resolves to tmp_path/a/outside: missing
    with pytest.raises(ModelLoadError):
        locate(directory)
    _point(directory, "../../outside/shard.safetensors", "../../../outside/shard.safetensors")
    with pytest.raises(ModelLoadError) as err:
        locate(directory)  # before any weight is read
    assert "'../../../outside/shard.safetensors', which lies outside" in _one_line(err)
    _point(directory, "../../../outside/shard.safetensors", "linked.safetensors")
    (directory / "linked.safetensors").symlink_to(outside / "shard.safetensors")
    with pytest.raises(ModelLoadError) as err:
        load(directory)
    assert "'linked.safetensors', which lies outside" in _one_line(err)
    (directory / "linked.safetensors").unlink()
    (directory / "sub").mkdir()
    os.replace(outside / "shard.safetensors", directory / "sub" / "shard.safetensors")
    _point(directory, "linked.safetensors", "sub/shard.safetensors")  # a subfolder of the checkpoint is inside it
    model, _ = load(directory, device="cpu")
    assert type(model).__name__ == "BertForSequenceClassification"


def test_the_weight_digest_covers_every_shard_the_index_names(tmp_path: Path) -> None:
    directory = _sharded(tmp_path / "model")
    (directory / "sub").mkdir()
    shard = sorted(json.loads((directory / "model.safetensors.index.json").read_text())["weight_map"].values())[-1]
    os.replace(directory / shard, directory / "sub" / shard)
    _point(directory, shard, f"sub/{shard}")
    model, _ = load(directory, device="cpu")
    before = weights_digest(model, directory)
    assert before.startswith("files sha256 ")
    tensors = load_file(directory / "sub" / shard)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1
    save_file(tensors, directory / "sub" / shard, metadata={"format": "pt"})
    assert weights_digest(model, directory) != before


def _damaged(good: bytes, how: str) -> bytes:
    """Return safetensors bytes `good` truncated, with an unknown dtype, or with a header length of 2^60."""
    length = struct.unpack("<Q", good[:8])[0]
    if how == "truncated":
        return good[: len(good) // 2]
    if how == "huge header":
        return struct.pack("<Q", 2**60) + good[8:]
    header = json.loads(good[8:8 + length])
    name = next(key for key in header if key != "__metadata__")
    header[name]["dtype"] = "X99"
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + good[8 + length:]


@pytest.mark.parametrize("how", ["truncated", "unknown dtype", "huge header"])
def test_a_damaged_weight_file_is_named_as_damaged(tmp_path: Path, how: str) -> None:
    directory = save_tiny_classifier(tmp_path / "model")
    path = directory / "model.safetensors"
    path.write_bytes(_damaged(path.read_bytes(), how))
    with pytest.raises(ModelLoadError) as err:
        load(directory)
    message = _one_line(err)
    assert f"the weight file {str(path)!r} is damaged" in message and "allow_pickle" not in message


def _pruned(directory: Path) -> tuple[torch.nn.Module, torch.Tensor]:
    """Write a tiny BERT classifier with heads removed (layer 1 loses every head) as the toolkit's pruned format."""
    original = transformers.BertForSequenceClassification.from_pretrained(
        save_tiny_classifier(directory.parent / "original")).eval()
    mask = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    save_removed(removed_model(original, mask), directory)
    word_tokenizer().save_pretrained(directory)
    return original, mask


def test_the_toolkits_pruned_format_loads_with_the_packages_classes(tmp_path: Path) -> None:
    directory = tmp_path / "pruned"
    original, mask = _pruned(directory)
    before = set(sys.modules)
    model, tokenizer = load(directory, device="cpu")
    assert not [name for name in set(sys.modules) - before if name.startswith("transformers_modules")]  # no code run
    assert type(model) is transformers.BertForSequenceClassification and model.config.model_type == "bert"
    assert "bert_pruned (2, 1 heads stored per layer)" in dict(loading.load_notes(model))["Pruned model"]
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad(), head_gates(original, mask):
        expected = original(**batch).logits
    with torch.no_grad():
        got = model(**batch).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    # the stored heads sit at their original index (layer 1 stores head 0, its output zero); the others are zero
    for stored, old, new in zip(((1, 3), (0,)), original.bert.encoder.layer, model.bert.encoder.layer, strict=True):
        for head in range(4):
            rows = slice(head * 8, (head + 1) * 8)
            query = old.attention.self.query.weight[rows] if head in stored else torch.zeros(8, 32)
            assert torch.equal(new.attention.self.query.weight[rows], query)
    report = interpret.explain(model, tokenizer, TEXTS, ["rollout"], evidence=False)
    assert "Pruned model" in dict(report.run.notes)
    # plain transformers with trust_remote_code keeps reading the directory with its own copy of the file
    remote = transformers.AutoModelForSequenceClassification.from_pretrained(directory, trust_remote_code=True)
    assert type(remote).__name__ == "BertPrunedForSequenceClassification"


def test_a_pruned_checkpoint_with_another_modeling_file_is_refused_and_never_run(tmp_path: Path) -> None:
    directory = tmp_path / "pruned"
    _pruned(directory)
    sentinel = tmp_path / "ran"
    modeling = directory / pruned_bert.MODULE_FILE
    modeling.write_text(f"open({str(sentinel)!r}, 'w').close()\n" + modeling.read_text(encoding="utf-8"))
    with pytest.raises(ModelLoadError) as err:
        load(directory)
    assert "differs from this toolkit's pruned model" in _one_line(err)
    assert not sentinel.exists()
    config = json.loads((directory / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "other_module.Model"  # code the toolkit does not ship: remote code
    (directory / "config.json").write_text(json.dumps(config))
    modeling.unlink()
    with pytest.raises(ModelLoadError, match="asks for remote code"):
        load(directory)


def test_the_checkpoint_module_names_the_pruned_modeling_file() -> None:
    from interpret.estimate.checkpoint import PRUNED_MODULE, PRUNED_TYPES

    assert PRUNED_MODULE == pruned_bert.MODULE_FILE.removesuffix(".py")
    assert {config.model_type: stock for stock, config in pruned_bert.PRUNED_CONFIGS.items()} == {
        pruned: stock for pruned, stock in PRUNED_TYPES.items()}
