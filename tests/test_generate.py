"""`explain(generate=N)` / `interpret.decision.generate`: the tokens are transformers' own greedy `generate` (called
here directly), joined to the prompt as its continuation unchanged (ids, not re-tokenized text), on either padding side
and on an encoder-decoder's decoder side; a model that ends its sequence generates fewer; what cannot generate is
refused in one line. Integrated Gradients per generated token against Captum: tests/analyzers/test_gradient_generation.py."""

from __future__ import annotations

import copy

import pytest
import torch
from hf_tiny import tiny_model, word_tokenizer

import interpret
from interpret.capture.api import capturable_for
from interpret.decision.generate import generated_inputs
from interpret.errors import InputError
from interpret.request import Limits, Subject

TEXTS = ["the cat sat on", "a dog"]


def _alone(model, tokenizer, text: str, steps: int, **extra) -> list[int]:
    ids = torch.tensor([tokenizer(text)["input_ids"]], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=steps, **extra)
    return out[0, 0 if model.config.is_encoder_decoder else ids.shape[1]:].tolist()


@pytest.mark.parametrize("side", ["right", "left"])
def test_generated_tokens_follow_each_prompt_unchanged(side: str) -> None:
    model, tokenizer = tiny_model("llama", "eager"), copy.deepcopy(word_tokenizer())
    tokenizer.padding_side = side
    encoded, decoder = generated_inputs(capturable_for(model, tokenizer), tokenizer, TEXTS, 3)
    prompts = interpret.collect(model, tokenizer, TEXTS).encoded
    assert decoder is None and encoded.continuation == (3, 3) and encoded.texts == tuple(TEXTS)
    for b, text in enumerate(TEXTS):
        real = encoded.attention_mask[b].bool()
        prompt = prompts.input_ids[b, prompts.attention_mask[b].bool()].tolist()
        assert encoded.input_ids[b, real].tolist() == prompt + _alone(model, tokenizer, text, 3)
        words = [w for w, keep in zip(encoded.word_ids[b], real.tolist()) if keep]
        assert words[:len(prompt)] == [w for w, keep in zip(prompts.word_ids[b], prompts.attention_mask[b].tolist()) if keep]
    assert bool(encoded.attention_mask[:, 0].eq(0).any()) == (side == "left")


def test_a_model_that_ends_its_sequence_generates_fewer() -> None:
    model, tokenizer = tiny_model("gpt2", "eager"), word_tokenizer()  # the tiny GPT-2 writes [SEP], its eos, first
    report = interpret.explain(model, tokenizer, TEXTS, ["rollout"], target=Subject(generate=3), evidence=False)
    for decision, text in zip(report.run.decisions, TEXTS):
        assert list(decision.target.ids) == _alone(model, tokenizer, text, 3) == [tokenizer.sep_token_id]
        assert decision.target.source == "generated" and decision.continuation == "[SEP]"


def test_an_encoder_decoder_generates_its_decoder_side() -> None:
    model, tokenizer = tiny_model("t5", "eager", seed=1), word_tokenizer()
    report = interpret.explain(model, tokenizer, TEXTS, ["rollout"], target=Subject(generate=2), evidence=False)
    for decision, text in zip(report.run.decisions, TEXTS):
        expected = _alone(model, tokenizer, text, 2)  # the decoder start token, then the generated tokens
        assert list(decision.target.ids) == expected[1:] and list(decision.target.positions) == [0, 1]
    assert report.examples[0].decoder_tokens[0] == tokenizer.pad_token


@pytest.mark.parametrize(("family", "extra", "limits", "message"), [
    ("gpt2", {"continuation": ["x", "y"]}, Limits(), "drop continuation"),
    ("gpt2", {"target": "cat"}, Limits(), "drop target"),
    ("gpt2", {"generate": 0}, Limits(), "1 or more"),
    ("gpt2", {}, Limits(max_length=3), "leave no room for the text within max_length=3"),
    ("gpt2", {"generate": 70}, Limits(), "76 tokens with 70 generated, over the model.s limit of 64"),
    ("bert", {}, Limits(), "drop generate"),
])
def test_what_cannot_generate_is_refused(family: str, extra: dict, limits: Limits, message: str) -> None:
    model, tokenizer = tiny_model(family, "eager"), word_tokenizer()
    with pytest.raises(InputError, match=message) as err:
        interpret.explain(model, tokenizer, TEXTS, ["rollout"], target=Subject(**{"generate": 3, **extra}), limits=limits)
    assert "\n" not in str(err.value)
