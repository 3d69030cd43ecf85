"""Head importance (Michel et al. 2019): gates, per-example gradients, finite differences, normalisations,
and the analyzer."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import transformers
from hf_tiny import TEXTS, tiny_config, word_tokenizer

import interpret
from interpret.capture.gates import head_gates
from interpret.heads.importance import accumulate, batch_gradients, normalize_by_layer, normalize_global, ranked
from interpret.heads.scoring import GatedModel
from interpret.inputs import encode
from interpret.reference.toy import marker_dataset, marker_task


@pytest.fixture(scope="module")
def toy():
    model, tokenizer = marker_task()
    return model, tokenizer


@pytest.fixture(scope="module")
def toy64(toy):
    model, tokenizer = toy
    return copy.deepcopy(model).double().eval(), tokenizer


def _batch(tokenizer, n: int, seed: int = 7):
    data = marker_dataset(n, seed=seed)
    return encode(tokenizer, list(data.texts)), data.labels


def test_gate_of_ones_is_bit_identical(toy) -> None:
    model, tokenizer = toy
    encoded, _ = _batch(tokenizer, 16)
    gated = GatedModel.of(model, tokenizer, encoded)
    with torch.no_grad():
        plain = gated.logits(encoded)
        ones = gated.logits(encoded, torch.ones(2, 4))
        per_row = gated.logits(encoded, torch.ones(16, 2, 4))
    assert torch.equal(plain, ones) and torch.equal(plain, per_row)


def test_gating_off_a_head_equals_zeroing_its_output_projection_columns(toy) -> None:
    model, tokenizer = toy
    encoded, _ = _batch(tokenizer, 16)
    d_head = model.config.d_head
    for layer, head in [(0, 1), (1, 3)]:
        gates = torch.ones(2, 4)
        gates[layer, head] = 0.0
        zeroed = copy.deepcopy(model)
        with torch.no_grad():
            zeroed.blocks[layer].attn.out_proj.weight[:, head * d_head:(head + 1) * d_head] = 0.0
            with head_gates(model, gates):
                gated = model(encoded.input_ids, encoded.attention_mask)
            reference = zeroed(encoded.input_ids, encoded.attention_mask)
        torch.testing.assert_close(gated, reference, rtol=0, atol=1e-6)


def test_gating_off_a_head_of_a_hugging_face_bert(toy) -> None:
    config = tiny_config("bert")
    config._attn_implementation = "eager"
    model = transformers.BertForSequenceClassification(config).eval()
    tokenizer = word_tokenizer()
    encoded = encode(tokenizer, TEXTS)
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        zeroed.bert.encoder.layer[1].attention.output.dense.weight[:, 16:24] = 0.0
        with head_gates(model, gates):
            gated = model(input_ids=encoded.input_ids, attention_mask=encoded.attention_mask).logits
        reference = zeroed(input_ids=encoded.input_ids, attention_mask=encoded.attention_mask).logits
    torch.testing.assert_close(gated, reference, rtol=0, atol=1e-6)


def test_importance_equals_finite_differences(toy64) -> None:
    model, tokenizer = toy64
    encoded, labels = _batch(tokenizer, 6, seed=3)
    labels[::2] = 1 - labels[::2]  # some wrong labels: losses (and gradients) far from zero
    gated = GatedModel.of(model, tokenizer, encoded)
    mask = torch.ones(2, 4, dtype=torch.float64)
    result = accumulate([(lambda g: gated.losses(encoded, g.double(), labels), 6, int(encoded.attention_mask.sum()))], mask)
    eps = 1e-5
    finite = torch.zeros(2, 4, dtype=torch.float64)
    with torch.no_grad():
        for layer in range(2):
            for head in range(4):
                up, down = mask.clone(), mask.clone()
                up[layer, head] += eps
                down[layer, head] -= eps
                diff = (gated.losses(encoded, up, labels) - gated.losses(encoded, down, labels)) / (2 * eps)
                finite[layer, head] = diff.abs().sum()
    finite /= int(encoded.attention_mask.sum())
    relative = ((result.raw - finite).abs() / finite.abs()).max()
    assert relative < 1e-3, (result.raw, finite)


def test_batch_of_32_equals_32_single_examples(toy) -> None:
    model, tokenizer = toy
    encoded, labels = _batch(tokenizer, 32, seed=11)
    gated = GatedModel.of(model, tokenizer, encoded)
    mask = torch.ones(2, 4)
    batched = accumulate([(lambda g: gated.losses(encoded, g, labels), 32, int(encoded.attention_mask.sum()))], mask)
    singles = []
    for row in range(32):
        one = encoded.rows(torch.tensor([row]))
        singles.append((lambda g, one=one, row=row: gated.losses(one, g, labels[row:row + 1]), 1, int(one.attention_mask.sum())))
    single = accumulate(singles, mask)
    torch.testing.assert_close(batched.raw, single.raw, rtol=0, atol=1e-6)
    assert batched.tokens == single.tokens and batched.examples == 32


def test_per_row_gates_give_each_row_its_own_gradient(toy) -> None:
    model, tokenizer = toy
    encoded, labels = _batch(tokenizer, 4)
    gated = GatedModel.of(model, tokenizer, encoded)
    grads = batch_gradients(lambda g: gated.losses(encoded, g, labels), 4, torch.ones(2, 4))
    for row in range(4):
        one = encoded.rows(torch.tensor([row]))
        alone = batch_gradients(lambda g, one=one, row=row: gated.losses(one, g, labels[row:row + 1]), 1, torch.ones(2, 4))
        torch.testing.assert_close(grads[row], alone[0], rtol=0, atol=1e-6)


def test_normalisations_equal_the_formulas() -> None:
    raw = torch.rand(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    by_layer = normalize_by_layer(raw).cpu().numpy()
    values = raw.cpu().numpy()
    for layer in range(3):
        norm = np.sqrt(sum(v * v for v in values[layer]))
        np.testing.assert_allclose(by_layer[layer], values[layer] / norm, rtol=1e-12)
        assert abs(np.linalg.norm(by_layer[layer]) - 1.0) < 1e-12
    scaled = normalize_global(raw).cpu().numpy()
    np.testing.assert_allclose(scaled, (values - values.min()) / (values.max() - values.min()), rtol=1e-12)
    assert scaled.min() == 0.0 and scaled.max() == 1.0
    with pytest.raises(interpret.errors.ResultError):
        normalize_global(torch.ones(2, 2))


def test_ranked_lists_only_heads_still_on() -> None:
    scores = torch.tensor([[0.1, 0.9], [0.5, 0.3]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert [(l, h) for l, h, _ in ranked(scores, mask)] == [(1, 0), (1, 1), (0, 0)]


def test_analyzer_matches_the_core_and_the_audit_weighting(toy) -> None:
    model, tokenizer = toy
    data = marker_dataset(12, seed=5)
    trace = interpret.collect(model, tokenizer, list(data.texts))
    result = interpret.analyze(trace, "head_importance", model=model, tokenizer=tokenizer, params={"batch_size": 5})
    per_example = result.arrays["importance"].values  # [batch, layer, head]
    tokens = result.arrays["tokens"].values
    encoded = trace.encoded
    gated = GatedModel.of(model, tokenizer, encoded)
    predicted = gated.predictions(encoded)  # label-free: the model's own predictions
    core = accumulate([(lambda g: gated.losses(encoded, g, predicted), 12, int(encoded.attention_mask.sum()))], torch.ones(2, 4))
    for row in result.arrays["importance_all"].values:  # the batch's map, the same in every row
        np.testing.assert_allclose(row, core.raw.cpu().numpy(), rtol=1e-5, atol=1e-9)
    aggregate = (per_example * tokens[:, None, None]).sum(0) / tokens.sum()
    np.testing.assert_allclose(aggregate, core.raw.cpu().numpy(), rtol=1e-5, atol=1e-9)
    scores = result.arrays["scores"].values
    assert scores.min() == 0.0 and scores.max() == 1.0
    assert result.arrays["entropy"].values.shape == per_example.shape
    assert result.head_map is not None and result.head_map.weight == "tokens"
