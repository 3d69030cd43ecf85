"""Cascading randomisation (Adebayo et al. 2018): blocks are found on the reference model and Hugging Face
families, randomising keeps each tensor's mean and spread and touches nothing else, and each step's ρ equals
scipy's Spearman ρ between the original readout and the readout of a model randomised by hand."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hf_tiny import tiny_model, word_tokenizer
from scipy import stats

import interpret
from interpret.decision import decide
from interpret.evidence.removal import candidates
from interpret.evidence.sanity import block_modules, cascading_randomisation, randomise
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
    randomise(blocks[1], torch.Generator().manual_seed(0))
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
    by_hand = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(5)
    blocks = block_modules(by_hand, tokenizer)
    randomise(blocks[1], generator)
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
