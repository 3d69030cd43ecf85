"""Cascading randomisation (Adebayo et al. 2018): blocks are found on the reference model and Hugging Face
families; re-initialisation uses the model's own initialiser (Hugging Face `_init_weights` on a loaded model,
whose tensors carry the loader's "initialised" mark; `reset_parameters` on the reference model), is seeded,
touches nothing outside its block and leaves the global RNG alone; the noise fallback keeps each tensor's mean
and spread; each step's ρ equals scipy's Spearman ρ against a model re-initialised by hand; the random floor
is about 0 while a method that reads the model changes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hf_tiny import save_tiny, tiny_model, word_tokenizer
from scipy import stats

import interpret
from interpret.decision.decide import decide
from interpret.evidence.removal import candidates
from interpret.evidence.sanity import (
    MODEL_INIT, NOISE, PASS_BELOW, RANDOM, RESET, SanityResult, block_modules, cascading_randomisation, _noise,
    reinitialise,
)
from interpret.reference.toy import marker_dataset, marker_task


@pytest.mark.parametrize("family,block", [("bert", "BertLayer"), ("gpt2", "GPT2Block")])
def test_blocks_of_hugging_face_families(family: str, block: str) -> None:
    blocks = block_modules(tiny_model(family), word_tokenizer())
    assert [type(b).__name__ for b in blocks] == [block, block]


def test_randomise_keeps_scale_and_touches_only_its_block() -> None:
    model, tokenizer = marker_task()
    copied = copy.deepcopy(model)
    blocks = block_modules(copied, tokenizer)
    assert len(blocks) == 2 and blocks[0] is not blocks[1]
    before = {name: p.detach().clone() for name, p in copied.named_parameters()}
    generator = torch.Generator().manual_seed(0)
    for parameter in blocks[1].parameters():
        _noise(parameter, generator)
    inside = {name for name, p in copied.named_parameters() if any(p is q for q in blocks[1].parameters())}
    assert inside
    for name, parameter in copied.named_parameters():
        if name in inside:
            assert not torch.equal(parameter, before[name]) or parameter.numel() == 1
            if parameter.numel() > 100:
                assert float(parameter.detach().std()) == pytest.approx(float(before[name].std()), rel=0.2)
        else:
            assert torch.equal(parameter, before[name])
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), marker_task()[0].parameters()))


def test_each_step_equals_spearman_against_a_model_randomised_by_hand() -> None:
    model, tokenizer = marker_task()
    texts = list(marker_dataset(3, seed=4).texts)
    result = cascading_randomisation(model, tokenizer, texts, ["last_layer_attention"], seed=5)
    assert result.steps == ("none", "blocks 1-1", "blocks 0-1")
    assert np.all(result.spearman["last_layer_attention"][0] == 1.0)
    assert result.schemes[1] == {RESET: len(list(block_modules(model, tokenizer)[1].parameters()))}
    by_hand = copy.deepcopy(model)
    blocks = block_modules(by_hand, tokenizer)
    reinitialise(by_hand, blocks[1], 5 + 1)  # the step of block 1 is seeded seed + layer
    original = interpret.analyze(interpret.collect(model, tokenizer, texts), "last_layer_attention", model=model)
    trace = interpret.collect(by_hand, tokenizer, texts)
    targets = [d.target for d in decide(model, interpret.collect(model, tokenizer, texts), tokenizer)]
    changed = interpret.analyze(trace, "last_layer_attention", model=by_hand, targets=targets)
    for b in range(3):
        positions = candidates(trace.encoded, b, targets[b])
        expected = stats.spearmanr(original.readout[b][positions], changed.readout[b][positions])[0]
        assert result.spearman["last_layer_attention"][1, b] == pytest.approx(expected, abs=1e-12)
    # randomising the top block changes the last layer's attention: the method is explaining the model
    assert max(result.mean("last_layer_attention")[1:]) < 0.9


def _differs_only_inside(model: torch.nn.Module, before: dict, block: torch.nn.Module) -> set[str]:
    inside = {name for name, p in model.named_parameters() if any(p is q for q in block.parameters())}
    for name, parameter in model.named_parameters():
        if name not in inside:
            assert torch.equal(parameter, before[name]), name
    return inside


def test_reinitialise_the_reference_model_with_reset_parameters() -> None:
    model, tokenizer = marker_task()
    copied = copy.deepcopy(model)
    block = block_modules(copied, tokenizer)[1]
    before = {name: p.detach().clone() for name, p in copied.named_parameters()}
    state = torch.random.get_rng_state()
    counts = reinitialise(copied, block, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left as it was
    inside = _differs_only_inside(copied, before, block)
    assert counts == {RESET: len(inside)}
    for name, parameter in copied.named_parameters():
        if name not in inside:
            continue
        module = copied.get_submodule(name.rsplit(".", 1)[0])
        if isinstance(module, torch.nn.LayerNorm):  # nn.LayerNorm.reset_parameters: ones and zeros
            expected = torch.ones_like(parameter) if name.endswith("weight") else torch.zeros_like(parameter)
            assert torch.equal(parameter, expected)
        else:
            assert not torch.equal(parameter, before[name]), name
            if isinstance(module, torch.nn.Linear) and name.endswith("weight"):  # kaiming-uniform, a = sqrt(5)
                bound = 1 / parameter.shape[1] ** 0.5
                assert float(parameter.detach().abs().max()) <= bound
    again = copy.deepcopy(model)
    reinitialise(again, block_modules(again, tokenizer)[1], seed=3)
    assert all(torch.equal(p, q) for p, q in zip(copied.parameters(), again.parameters()))  # seeded


def test_reinitialise_a_loaded_hugging_face_model_with_its_init_weights(tmp_path) -> None:
    import transformers

    save_tiny("bert", tmp_path / "bert")
    model = transformers.AutoModel.from_pretrained(tmp_path / "bert").eval()
    block = block_modules(model, word_tokenizer())[0]
    assert any(getattr(p, "_is_hf_initialized", False) for p in block.parameters())  # the loader's mark
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    counts = reinitialise(model, block, seed=0)
    inside = _differs_only_inside(model, before, block)
    assert counts == {MODEL_INIT: len(inside)} and NOISE not in counts
    std = model.config.initializer_range
    for name, parameter in block.named_parameters():
        if "LayerNorm" in name:
            expected = torch.ones_like(parameter) if name.endswith("weight") else torch.zeros_like(parameter)
            assert torch.equal(parameter, expected)
        elif name.endswith("bias"):
            assert torch.equal(parameter, torch.zeros_like(parameter))
        else:  # BertPreTrainedModel._init_weights: normal(0, initializer_range)
            assert not torch.equal(parameter, before[f"encoder.layer.0.{name}"])
            assert float(parameter.detach().std()) == pytest.approx(std, rel=0.25)


def test_a_tensor_no_initialiser_covers_gets_noise_and_is_counted() -> None:
    model, tokenizer = marker_task()
    copied = copy.deepcopy(model)
    block = block_modules(copied, tokenizer)[0]
    block.register_parameter("extra", torch.nn.Parameter(torch.linspace(-1, 1, 64)))
    counts = reinitialise(copied, block, seed=0)
    assert counts[NOISE] == 1 and counts[RESET] == len(list(block.parameters())) - 1
    assert not torch.equal(block.extra, torch.linspace(-1, 1, 64))


def test_random_floor_is_near_zero_while_attention_changes() -> None:
    model, tokenizer = marker_task()
    texts = list(marker_dataset(12, seed=9).texts)
    result = cascading_randomisation(model, tokenizer, texts, ["last_layer_attention"], seed=1)
    floor = result.mean(RANDOM)
    assert floor[0] == 1.0 and all(abs(value) < 0.2 for value in floor[1:])
    assert result.mean("last_layer_attention")[-1] < 0.9
    assert result.to_dict()["schemes"][1] == result.schemes[1]


def test_a_method_passes_when_randomising_every_block_breaks_its_ranking() -> None:
    rho = {"broken": np.array([[1.0, 1.0], [0.9, 0.8], [0.2, 0.4]]), "kept": np.array([[1.0, 1.0], [0.9, 0.9], [0.6, 0.5]]),
           "constant": np.full((3, 2), np.nan)}
    result = SanityResult(("none", "blocks 1-1", "blocks 0-1"), rho)
    assert result.passed("broken") is True and result.passed("kept") is False and result.passed("constant") is None
    assert PASS_BELOW == 0.5 and result.to_dict()["methods"]["broken"]["passed"] is True
