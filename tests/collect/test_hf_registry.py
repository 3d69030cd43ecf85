"""Adapter discovery through the `interpret.adapters` entry points: built-ins, plugins, broken ones, and
the one-line answer for a model no adapter serves."""

from __future__ import annotations

import textwrap
from importlib import metadata

import pytest
import torch
import transformers
from hf_tiny import FAMILIES, word_tokenizer

import interpret
from interpret import entry_points
from interpret.collect.hf import registry
from interpret.collect.hf.adapter import GROUP
from interpret.errors import UnsupportedModelError
from interpret.versions import DISTRIBUTION

PLUGIN = '''
from interpret.collect.hf import bert
from interpret.collect.hf.adapter import HFAdapter

ELECTRA = HFAdapter(model_types=("electra",), build=bert.build)  # Electra keeps BERT's module layout
CLAIMS_BERT = HFAdapter(model_types=("bert",), build=bert.build)
NOT_AN_ADAPTER = object()
'''


def tiny_electra() -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.ElectraConfig(
        vocab_size=len(word_tokenizer()), embedding_size=32, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
    )
    return transformers.ElectraForMaskedLM(config).eval()


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Install fake third-party entry points next to the real ones; forget them afterwards."""
    (tmp_path / "fake_adapters.py").write_text(textwrap.dedent(PLUGIN))
    (tmp_path / "broken_adapters.py").write_text("raise ImportError('needs a missing dependency')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    real = list(metadata.entry_points(group=GROUP))
    fakes = [
        metadata.EntryPoint(name="electra", value="fake_adapters:ELECTRA", group=GROUP),
        metadata.EntryPoint(name="bert_again", value="fake_adapters:CLAIMS_BERT", group=GROUP),
        metadata.EntryPoint(name="nonsense", value="fake_adapters:NOT_AN_ADAPTER", group=GROUP),
        metadata.EntryPoint(name="broken", value="broken_adapters:ADAPTER", group=GROUP),
    ]

    class FakeMetadata:
        @staticmethod
        def entry_points(group: str) -> list[metadata.EntryPoint]:
            return real + fakes if group == GROUP else []

    monkeypatch.setattr(entry_points, "metadata", FakeMetadata)
    registry.refresh()
    yield registry.entries()
    monkeypatch.undo()
    registry.refresh()


def test_built_in_adapters_register_through_entry_points() -> None:
    entries = registry.entries()
    builtins = {name: entry for name, entry in entries.items() if entry.builtin}
    assert set(builtins) == {"bert", "distilbert", "gpt2", "llama", "t5", "bart", "vit"}
    assert all(entry.distribution == DISTRIBUTION and not entry.broken for entry in builtins.values())
    served = registry.model_types()
    assert set(FAMILIES) <= set(served)
    assert served["qwen2"] == served["mistral"] == "llama" and served["roberta"] == "bert"


def test_model_without_adapter_gets_one_line_that_says_how_to_add_one() -> None:
    with pytest.raises(UnsupportedModelError) as err:
        interpret.collect(tiny_electra(), word_tokenizer(), "the cat sat")
    message = str(err.value)
    assert "\n" not in message and "'electra'" in message and "ElectraForMaskedLM" in message
    assert "interpret.adapters" in message and "build(model, tokenizer)" in message


def test_third_party_adapter_is_used_and_bad_ones_are_listed_broken(plugins) -> None:
    assert plugins["electra"].adapter is not None and not plugins["electra"].builtin
    assert "claims model type 'bert'" in plugins["bert_again"].error
    assert "model_types" in plugins["nonsense"].error
    assert "needs a missing dependency" in plugins["broken"].error
    assert registry.model_types()["bert"] == "bert"  # the built-in keeps its model type
    trace = interpret.collect(tiny_electra(), word_tokenizer(), ["the cat sat", "a dog"])
    assert trace.stack("attn.hook_pattern").shape == (2, 2, 4, 5, 5)
    assert trace.meta.model_class == "ElectraForMaskedLM"


def test_unsupported_message_mentions_broken_plugins(plugins) -> None:
    model = tiny_electra()
    model.config.model_type = "electra-variant"
    with pytest.raises(UnsupportedModelError, match="broken"):
        interpret.collect(model, word_tokenizer(), "the cat sat")
