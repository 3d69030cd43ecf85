"""A BERT or RoBERTa with its pruned heads really removed is stored as "bert_pruned" / "roberta_pruned": it has
fewer parameters, equals the gated model (1e-5), and loads again with the Auto classes: by registration in this
process, and with trust_remote_code=True in a fresh process that never imports this package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from hf_tiny import TEXTS, tiny_model, word_tokenizer

from interpret.errors import UnsupportedModelError
from interpret.heads import pruned_bert
from interpret.heads.scoring import GatedModel
from interpret.heads.store import removed_model, save_removed, storable
from interpret.heads.surgery import count_parameters
from interpret.inputs import encode

MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # layer 1: every head off


FAMILIES = ["bert", "roberta"]
PREFIX = {"bert": "Bert", "roberta": "Roberta"}


def _gated_and_stored(tmp_path: Path, family: str):
    tokenizer = word_tokenizer()
    encoded = encode(tokenizer, TEXTS)
    model = tiny_model(family, attn_implementation="eager")
    with torch.no_grad():
        reference = GatedModel.of(model, tokenizer, encoded).logits(encoded, MASK)
    pruned = removed_model(model, MASK)
    save_removed(pruned, tmp_path)
    return model, encoded, reference, pruned


def _compare(logits: torch.Tensor, reference: torch.Tensor, attention_mask: torch.Tensor) -> None:
    real = attention_mask.bool().cpu()  # token logits: padded positions are not outputs of any example
    torch.testing.assert_close(logits.cpu()[real], reference.cpu()[real], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_removed_model_has_fewer_parameters_and_equals_the_gated_model(tmp_path: Path, family: str) -> None:
    model, encoded, reference, pruned = _gated_and_stored(tmp_path, family)
    assert pruned.kept == ((0, 1), (0,))  # layer 1 keeps one zeroed head: BertSelfAttention needs a width > 0
    assert pruned.model.config.heads_per_layer == [2, 1]
    assert type(pruned.model).__name__ == f"{PREFIX[family]}PrunedForMaskedLM"
    d_head, hidden = 8, 32  # tiny models: hidden 32, 4 heads
    removed_heads = 2 + 3
    per_head = 3 * (hidden * d_head + d_head) + d_head * hidden  # q, k, v rows with bias; output columns
    assert pruned.parameters_before - pruned.parameters_after == removed_heads * per_head
    assert count_parameters(model) == pruned.parameters_before
    with torch.no_grad():
        logits = pruned.model(input_ids=encoded.input_ids.to(pruned.model.device), attention_mask=encoded.attention_mask.to(pruned.model.device)).logits
    _compare(logits, reference, encoded.attention_mask)


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_classes_load_it_after_register(tmp_path: Path, family: str) -> None:
    _, encoded, reference, pruned = _gated_and_stored(tmp_path, family)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == f"{family}_pruned" and config["heads_per_layer"] == [2, 1]
    assert config["auto_map"]["AutoModel"] == f"modeling_bert_pruned.{PREFIX[family]}PrunedModel"
    assert config["auto_map"]["AutoConfig"] == f"modeling_bert_pruned.{PREFIX[family]}PrunedConfig"
    assert (tmp_path / pruned_bert.MODULE_FILE).is_file()
    pruned_bert.register()
    loaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert type(loaded) is type(pruned.model)
    assert count_parameters(loaded) == pruned.parameters_after
    with torch.no_grad():
        logits = loaded.eval()(input_ids=encoded.input_ids, attention_mask=encoded.attention_mask).logits
    _compare(logits, reference, encoded.attention_mask)


FRESH = """
import json, sys, torch, transformers
directory, ids, mask = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
assert "interpret" not in sys.modules
model = transformers.AutoModelForMaskedLM.from_pretrained(
    directory, trust_remote_code=True, attn_implementation="eager").eval()
base = transformers.AutoModel.from_pretrained(directory, trust_remote_code=True)
with torch.no_grad():
    logits = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits
print(json.dumps({"class": type(model).__name__, "base": type(base).__name__,
                  "parameters": sum(p.numel() for p in model.parameters()), "logits": logits.tolist(),
                  "interpret": "interpret" in sys.modules}))
"""


@pytest.mark.parametrize("family", FAMILIES)
def test_a_fresh_process_loads_it_with_trust_remote_code(tmp_path: Path, family: str) -> None:
    directory = tmp_path / "pruned"
    _, encoded, reference, pruned = _gated_and_stored(directory, family)
    env = {"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PATH": "/usr/bin:/bin"}
    args = [str(directory), json.dumps(encoded.input_ids.tolist()), json.dumps(encoded.attention_mask.tolist())]
    done = subprocess.run([sys.executable, "-c", FRESH, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["class"] == f"{PREFIX[family]}PrunedForMaskedLM" and got["base"] == f"{PREFIX[family]}PrunedModel"
    assert not got["interpret"]
    assert got["parameters"] == pruned.parameters_after < pruned.parameters_before
    _compare(torch.tensor(got["logits"]), reference, encoded.attention_mask)


def test_plain_auto_model_in_a_fresh_process_asks_for_trust_remote_code(tmp_path: Path) -> None:
    directory = tmp_path / "pruned"
    _gated_and_stored(directory, "bert")
    code = "import sys, transformers; transformers.AutoModel.from_pretrained(sys.argv[1])"
    env = {"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, check=False)
    assert done.returncode != 0 and "trust_remote_code" in done.stderr


@pytest.mark.parametrize("family", ["distilbert", "gpt2"])
def test_other_families_are_not_stored_as_bert_pruned(family: str) -> None:
    model = tiny_model(family)
    assert not storable(model)
    with pytest.raises(UnsupportedModelError, match="not a BERT or RoBERTa model"):
        removed_model(model, torch.ones(2, 4))


def test_the_cli_checks_the_model_types_store_writes() -> None:
    from interpret.cli.heads_cmd import STORABLE_CLASSES, STORABLE_TYPES

    assert set(STORABLE_TYPES) == set(pruned_bert.PRUNED_CONFIGS)
    assert set(STORABLE_CLASSES) == set(pruned_bert.PRUNED_CLASSES)


def test_a_layer_keeping_every_head_does_not_stop_the_others_from_being_removed() -> None:
    """One stock head count for every layer pads them all to the widest; stored per layer, each keeps its own."""
    tokenizer = word_tokenizer()
    encoded = encode(tokenizer, TEXTS)
    model = tiny_model("bert", attn_implementation="eager")
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    with torch.no_grad():
        reference = GatedModel.of(model, tokenizer, encoded).logits(encoded, mask)
    pruned = removed_model(model, mask)
    assert pruned.model.config.heads_per_layer == [4, 1] and pruned.model.config.kept_heads == [[0, 1, 2, 3], [1]]
    assert pruned.parameters_before - pruned.parameters_after == 3 * (3 * (32 * 8 + 8) + 8 * 32)
    assert "heads kept per layer: 4, 1)" in pruned.note
    with torch.no_grad():
        logits = pruned.model(input_ids=encoded.input_ids.to(pruned.model.device), attention_mask=encoded.attention_mask.to(pruned.model.device)).logits
    _compare(logits, reference, encoded.attention_mask)
