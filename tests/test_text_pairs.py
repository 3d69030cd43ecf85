"""Text pairs (an NLI premise and hypothesis, a cross-encoder's query and passage) are read exactly as the tokenizer
reads `tokenizer(text, text_pair)`: ids, special tokens, segment ids (token_type_ids) and truncation equal the
tokenizer's own; the model is run with the segment ids (decision equal to the model called directly); Integrated
Gradients equals Captum's LayerIntegratedGradients on a plain forward that passes them; evidence deletes a token
with its segment id; files with a text_pair column are read, and mixed files refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from captum.attr import LayerIntegratedGradients
from hf_tiny import tiny_config

import interpret
import shipped_tokenizers
from interpret.errors import InputError
from interpret.evidence.removal import RemovalScorer
from interpret.inputs import encode
from interpret.reading.datasets import model_inputs, read_dataset

TEXTS = ["the cat sat on the mat", "a dog"]
PAIRS = ["a quiet dog", "the cat ran by the river !"]
INPUTS = {"text": TEXTS, "text_pair": PAIRS}


def _nli(dtype: torch.dtype = torch.float64) -> tuple[transformers.BertForSequenceClassification, object]:
    """A tiny random BERT with three NLI classes, and a WordPiece tokenizer that gives segment ids."""
    tokenizer = shipped_tokenizers.wordpiece()
    torch.manual_seed(0)
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.num_labels = 3
    config.initializer_range = 0.3  # weights large enough that the classes differ (the default makes them near-uniform)
    config.id2label = {0: "entailment", 1: "neutral", 2: "contradiction"}
    config.label2id = {label: index for index, label in config.id2label.items()}
    return transformers.BertForSequenceClassification(config).eval().to(dtype), tokenizer


@pytest.fixture(scope="module")
def nli():
    return _nli()


def test_pairs_are_encoded_as_the_tokenizer_encodes_them(nli) -> None:
    _, tokenizer = nli
    encoded = encode(tokenizer, TEXTS, pairs=PAIRS)
    expected = tokenizer(TEXTS, PAIRS, padding=True, return_tensors="pt", return_special_tokens_mask=True)
    assert torch.equal(encoded.input_ids, expected["input_ids"])
    assert torch.equal(encoded.token_type_ids, expected["token_type_ids"])
    assert torch.equal(encoded.attention_mask, expected["attention_mask"])
    assert torch.equal(encoded.special, expected["special_tokens_mask"].bool())
    assert encoded.pairs == tuple(PAIRS) and encoded.texts == tuple(TEXTS)
    # the pair's words are numbered after the text's (the tokenizer starts them again at 0)
    assert encoded.word_ids[0] == (None, 0, 1, 2, 3, 4, 5, None, 6, 7, 8, None)
    alone = encode(tokenizer, TEXTS)
    assert alone.token_type_ids is None and alone.pairs is None


@pytest.mark.parametrize("max_length", [7, 9, 12])
def test_a_long_pair_is_cut_as_the_tokenizer_cuts_it(nli, max_length: int) -> None:
    _, tokenizer = nli
    text, pair = "the cat sat on the mat and the dog ran", "a quiet morning by the river"
    encoded = encode(tokenizer, [text], pairs=[pair], max_length=max_length)
    expected = tokenizer(text, pair, truncation=True, max_length=max_length)
    assert encoded.input_ids[0].tolist() == expected["input_ids"]
    assert encoded.token_type_ids[0].tolist() == expected["token_type_ids"]
    assert encoded.truncated == (True,)
    with pytest.raises(InputError, match="accepts at most 6"):
        encode(tokenizer, [text], pairs=[pair], limit=6)
    with pytest.raises(InputError, match="use at least 5"):
        encode(tokenizer, [text], pairs=[pair], max_length=4)


def test_pairs_that_do_not_match_are_refused(nli) -> None:
    model, tokenizer = nli
    with pytest.raises(InputError, match="give one text_pair per text"):
        encode(tokenizer, TEXTS, pairs=PAIRS[:1])
    with pytest.raises(InputError, match="drop the text pairs or the continuations"):
        encode(tokenizer, TEXTS, pairs=PAIRS, continuations=["a", "b"])
    with pytest.raises(InputError, match="'pair' is not one of these keys"):
        interpret.collect(model, tokenizer, {"text": TEXTS, "pair": PAIRS})
    with pytest.raises(InputError, match="text pair 1 is empty"):
        encode(tokenizer, TEXTS, pairs=["a dog", " "])


def test_the_model_reads_the_segment_ids_and_decides_as_called_directly(nli) -> None:
    model, tokenizer = nli
    report = interpret.explain(model, tokenizer, INPUTS, ["rollout"], evidence=False)
    batch = tokenizer(TEXTS, PAIRS, padding=True, return_tensors="pt")
    with torch.no_grad():
        direct = model(**batch).logits.softmax(-1)
        without = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.softmax(-1)
    for b, decision in enumerate(report.run.decisions):
        assert decision.predicted_index == int(direct[b].argmax())
        assert decision.predicted_probability == pytest.approx(float(direct[b].max()), abs=1e-12)
    assert float((direct - without).abs().max()) > 1e-3  # the segment ids change the decision: they were read
    assert [example.text for example in report.examples] == TEXTS


def test_integrated_gradients_equals_captum_with_the_segment_ids(nli) -> None:
    model, tokenizer = nli
    trace = interpret.collect(model, tokenizer, INPUTS)
    result = interpret.analyze(trace, "integrated_gradients", model=model, tokenizer=tokenizer)
    ids, mask, types = trace.encoded.input_ids, trace.encoded.attention_mask, trace.encoded.token_type_ids
    with torch.no_grad():
        targets = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits.argmax(-1)

    def forward(ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        return logits[torch.arange(len(ids)), target]

    attributed = mask.bool() & ~trace.encoded.special  # the pad baseline: real, non-special positions get [PAD]
    baseline = torch.where(attributed, torch.full_like(ids, tokenizer.pad_token_id), ids)
    method = LayerIntegratedGradients(forward, model.bert.embeddings.word_embeddings)
    attr, delta = method.attribute(ids, baselines=baseline,
                                   additional_forward_args=(mask, types, targets), n_steps=50,
                                   return_convergence_delta=True)
    expected = attr.sum(-1).detach().numpy()
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(result["readout"], expected, atol=1e-9, rtol=0)
    np.testing.assert_allclose(result["delta"], delta.detach().numpy(), atol=1e-9, rtol=0)


def test_evidence_deletes_a_token_with_its_segment_id(nli) -> None:
    model, tokenizer = nli
    trace = interpret.collect(model, tokenizer, INPUTS)
    report = interpret.explain(model, tokenizer, INPUTS, ["rollout"], evidence=False)
    from interpret.analysis.run import bound_context
    from interpret.capture.api import capturable_for
    from interpret.decision.decide import reader_for

    capturable = capturable_for(model, tokenizer)
    reader = reader_for(model, trace.meta.kind, None, trace.output)
    ctx = bound_context(trace, capturable, reader, [d.target for d in report.run.decisions], tokenizer)
    scorer = RemovalScorer(ctx, trace.encoded, "delete")
    example = 1
    real = int(trace.encoded.attention_mask[example].sum())
    removed = np.zeros((3, trace.encoded.pos), dtype=bool)
    removed[0, 1] = True  # "a", in the text
    removed[1, 6] = True  # "cat", in the pair
    removed[2, [2, 5, 7]] = True
    scores = scorer.probabilities(example, removed)
    ids, types = trace.encoded.input_ids[example, :real], trace.encoded.token_type_ids[example, :real]
    target = report.run.decisions[example].target.ids[0]
    for row in range(3):
        kept = torch.from_numpy(~removed[row, :real])
        with torch.no_grad():
            logits = model(input_ids=ids[kept][None], token_type_ids=types[kept][None]).logits
        assert scores[row] == pytest.approx(float(logits.softmax(-1)[0, target]), abs=1e-12)


def test_a_model_without_segment_embeddings_refuses_them() -> None:
    tokenizer = shipped_tokenizers.wordpiece()
    config = tiny_config("llama", vocab_size=len(tokenizer))
    model = transformers.LlamaForSequenceClassification(config).eval()
    with pytest.raises(InputError, match="takes none; load the tokenizer this model was trained with"):
        interpret.collect(model, tokenizer, INPUTS)


def test_the_default_model_reads_a_pair_as_its_tokenizer_does() -> None:
    model, tokenizer = interpret.load()
    trace = interpret.collect(model, tokenizer, INPUTS, names=["blocks.5.hook_resid_post"])
    batch = tokenizer(TEXTS, PAIRS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    assert torch.equal(trace.encoded.token_type_ids, batch["token_type_ids"])
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(trace.tensors["blocks.5.hook_resid_post"][real], hidden[real], atol=1e-5, rtol=0)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_files_with_a_text_pair_column(tmp_path: Path) -> None:
    paired = _write(tmp_path / "nli.jsonl", [{"text": t, "text_pair": p, "label": "neutral"} for t, p in zip(TEXTS, PAIRS)])
    dataset = read_dataset(paired)
    assert dataset.paired and [e.text_pair for e in dataset.examples] == PAIRS
    assert model_inputs(dataset.examples) == INPUTS
    csv = tmp_path / "nli.csv"
    csv.write_text("text,text_pair\n" + "".join(f'"{t}","{p}"\n' for t, p in zip(TEXTS, PAIRS)), encoding="utf-8")
    assert model_inputs(read_dataset(csv).examples) == INPUTS
    single = read_dataset(_write(tmp_path / "single.jsonl", [{"text": t} for t in TEXTS]))
    assert not single.paired and model_inputs(single.examples) == TEXTS
    mixed = _write(tmp_path / "mixed.jsonl", [{"text": TEXTS[0], "text_pair": PAIRS[0]}, {"text": TEXTS[1]}])
    with pytest.raises(InputError, match="mixed.jsonl line 2 has no 'text_pair' but the rows before it are text pairs"):
        read_dataset(mixed)
    with pytest.raises(InputError, match="line 1 has a number as its text_pair"):
        read_dataset(_write(tmp_path / "bad.jsonl", [{"text": "a", "text_pair": 3}]))
