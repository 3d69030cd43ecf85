"""Decoder families with the tokenizer each really ships, which has no pad token (GPT-2, StarCoder, Phi:
byte-level BPE; Llama, Mistral, Mixtral, Phi-3: LlamaTokenizerFast, left padding).

A report on one text and on a batch of texts of different lengths works, from Python and from the command
line; every example of the batch is explained exactly as when it runs alone (decision, every analyzer's
readout, the attention patterns over its real tokens); the tokenizer the user passed in is left unchanged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from cli_runner import run
from hf_tiny import MATRIX, tiny_config
from shipped_tokenizers import SHIPPED

import interpret

TEXTS = ["The service was slow, but the food was wonderful.", "the cat sat", "a quiet morning by the river; nobody came."]
ANALYZERS = ("rollout", "flow", "attention_entropy")


def _model(family: str, tokenizer: transformers.PreTrainedTokenizerBase) -> transformers.PreTrainedModel:
    """A tiny random `family` language model over `tokenizer`'s vocabulary, with the special ids it ships."""
    config = tiny_config(family, vocab_size=len(tokenizer))
    config.pad_token_id = None  # as the pretrained checkpoints of these families ship
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    torch.manual_seed(0)
    return getattr(transformers, MATRIX[family].head)(config).eval()


@pytest.fixture(scope="module", params=sorted(SHIPPED))
def shipped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    family = request.param
    tokenizer = SHIPPED[family]()
    assert tokenizer.pad_token is None
    return family, tokenizer, _model(family, tokenizer), tmp_path_factory.mktemp(family)


def _real(example) -> np.ndarray:
    return np.asarray(example.real, dtype=bool)


def test_a_batch_is_explained_as_each_example_alone(shipped) -> None:
    family, tokenizer, model, _ = shipped
    side = tokenizer.padding_side
    batch = interpret.explain(model, tokenizer, TEXTS, ANALYZERS)
    assert tokenizer.pad_token is None and tokenizer.padding_side == side  # the user's tokenizer is untouched
    lengths = [int(_real(example).sum()) for example in batch.examples]
    assert len(set(lengths)) == len(TEXTS), "the texts must differ in length, or nothing is padded"
    for i, text in enumerate(TEXTS):
        alone = interpret.explain(model, tokenizer, text, ANALYZERS)
        real = _real(batch.examples[i])
        assert _real(alone.examples[0]).all() and real.sum() == len(alone.examples[0].tokens)
        assert [t for t, r in zip(batch.examples[i].tokens, real) if r] == list(alone.examples[0].tokens)
        one, many = alone.run.decisions[0], batch.run.decisions[i]
        assert (many.target.ids, many.predicted_index) == (one.target.ids, one.predicted_index)
        assert many.predicted_probability == pytest.approx(one.predicted_probability, abs=1e-6)
        for name in ANALYZERS:
            mine, theirs = batch.section(name).result, alone.section(name).result
            if mine.readout is not None:
                np.testing.assert_allclose(np.asarray(mine.readout)[i][real], np.asarray(theirs.readout)[0],
                                           rtol=0, atol=1e-6, err_msg=f"{family} {name} example {i}")
            if mine.head_map is not None:
                key = mine.head_map.array
                np.testing.assert_allclose(np.asarray(mine.arrays[key].values)[i], np.asarray(theirs.arrays[key].values)[0],
                                           rtol=0, atol=1e-5, err_msg=f"{family} {name} head map example {i}")
        pattern = np.asarray(batch.section("attention").result.arrays["pattern"].values)[i]
        reference = np.asarray(alone.section("attention").result.arrays["pattern"].values)[0]
        np.testing.assert_allclose(pattern[..., real, :][..., real], reference, rtol=0, atol=1e-6)


def test_the_command_line_reports_one_text_and_a_batch(shipped) -> None:
    _, tokenizer, model, directory = shipped
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    data = directory / "texts.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "text": text}) + "\n" for i, text in enumerate(TEXTS)))
    single = run("report", "--model", str(directory), "--text", TEXTS[1], "-a", "rollout", "-o", str(directory / "one.html"))
    assert single.exit_code == 0, single.stderr
    many = run("report", "--model", str(directory), "--input", str(data), "-a", "rollout", "--format", "json",
               "-o", str(directory / "many.json"))
    assert many.exit_code == 0, many.stderr
    document = json.loads((directory / "many.json").read_text())
    assert [example["id"] for example in document["examples"]] == ["t0", "t1", "t2"]
    assert len(many.stdout.strip().splitlines()) >= len(TEXTS)  # one decision line per example, then the path
