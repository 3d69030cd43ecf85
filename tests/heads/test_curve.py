"""Pruning curves: the stepping rule on a fake model, the metric against a direct statement, and the known-answer
toy task (least-important-first keeps accuracy longer than most-important-first)."""

from __future__ import annotations

import math

import pytest
import torch

from interpret.capture.gates import head_gates
from interpret.errors import AnalyzerError
from interpret.heads.curve import pruning_curve
from interpret.heads.dataset import dataset_importance, dataset_metric, head_data
from interpret.heads.scoring import GatedModel
from interpret.inputs import encode
from interpret.reference.toy import marker_dataset, marker_task


def test_steps_prune_ten_percent_of_the_remaining_least_important_first() -> None:
    scores = torch.arange(20, dtype=torch.float64).view(2, 10)  # head (l, h) scores 10 l + h
    seen: list[int] = []

    def metric_of(mask):
        return 1.0 if mask is None else float(mask.sum()) / 20.0

    curve = pruning_curve(lambda mask: scores, metric_of, (2, 10), by_layer=False, threshold=0.5, on_step=lambda p: seen.append(p.pruned))
    # 20 on: 2 go; 18: 1; 17: 1; ... one per step once fewer than 20 remain
    assert seen[:3] == [2, 3, 4]
    first = curve.points[1].mask
    assert first[0, 0] == 0 and first[0, 1] == 0 and int(first.sum()) == 18
    assert curve.points[-1].quality < 0.5 <= curve.points[-2].quality
    assert torch.equal(curve.last_passing, curve.points[-2].mask) and curve.pruned_passing == 10
    most = pruning_curve(lambda mask: scores, metric_of, (2, 10), order="most", by_layer=False, threshold=0.5)
    assert most.points[1].mask[1, 9] == 0 and most.points[1].mask[1, 8] == 0


def test_perplexity_quality_is_inverted_and_bad_settings_are_refused() -> None:
    curve = pruning_curve(
        lambda mask: torch.ones(1, 2), lambda mask: 10.0 if mask is None else 10.0 + float((mask == 0).sum()) * 5,
        (1, 2), metric="perplexity", lower_is_better=True, by_layer=False, fraction=0.5,
    )
    assert math.isclose(curve.points[1].quality, 10.0 / 15.0) and curve.pruned_passing == 0
    with pytest.raises(AnalyzerError, match="fraction"):
        pruning_curve(lambda m: m, lambda m: 1.0, (1, 1), fraction=0.0)
    with pytest.raises(AnalyzerError, match="meaningless"):
        pruning_curve(lambda m: m, lambda m: 0.0, (1, 1))


@pytest.fixture(scope="module")
def toy_data():
    model, tokenizer = marker_task()
    data = marker_dataset(128, seed=21)
    batches = [encode(tokenizer, list(data.texts[i:i + 64])) for i in range(0, 128, 64)]
    gated = GatedModel.of(model, tokenizer, batches[0])
    return model, gated, batches, data


def test_metric_equals_a_direct_statement(toy_data) -> None:
    model, gated, batches, data = toy_data
    mask = torch.ones(2, 4)
    mask[0, 1] = mask[1, 2] = 0.0
    labelled = head_data(gated, batches, data.labels.tolist())
    correct = 0
    with torch.no_grad(), head_gates(model, mask):
        for batch, labels in zip(batches, labelled.labels, strict=True):
            correct += int((model(batch.input_ids, batch.attention_mask).argmax(-1) == labels).sum())
    assert dataset_metric(gated, labelled, mask) == correct / 128
    free = head_data(gated, batches, None)
    assert free.mode == "label-free" and dataset_metric(gated, free, None) == 1.0


def test_known_answer_least_important_first_keeps_accuracy_longer(toy_data) -> None:
    _, gated, batches, data = toy_data
    labelled = head_data(gated, batches, data.labels.tolist())
    curves = {
        order: pruning_curve(
            lambda mask: dataset_importance(gated, labelled, mask).raw,
            lambda mask: dataset_metric(gated, labelled, mask),
            gated.gate_shape, order=order, to_the_end=True,
        )
        for order in ("least", "most")
    }
    least, most = curves["least"], curves["most"]
    assert least.original == 1.0
    # measured: least-first keeps 100% accuracy with 7 of 8 heads off; most-first falls to 50% at 4 off
    assert least.pruned_passing > most.pruned_passing
    area = {order: sum(point.metric for point in curve.points) for order, curve in curves.items()}
    assert area["least"] > area["most"]
    assert len(least.points) == len(most.points) == 9
