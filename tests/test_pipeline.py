"""interpret.pipeline: a plan's capture falls back to its streamed form over the budget (or refuses, with streaming
off), and a context retargeted to other classes runs exactly as one built afresh from the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from hf_tiny import TEXTS, tiny_config, word_tokenizer

LONG = " ".join(["the cat sat"] * 20)  # 62 tokens: every pattern 120 KiB, the streamed capture (q, k, lse) 33 KiB

from interpret.analysis.run import analyze, retargeted, run_context
from interpret.capture import collect
from interpret.decision.decide import TargetRequest, decide
from interpret.errors import MemoryBudgetError
from interpret.pipeline import capture, plan_for, run_plan
from interpret.request import EvidenceOptions, Limits, Subject


@pytest.fixture(scope="module")
def classifier():
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.num_labels = 3
    return transformers.BertForSequenceClassification(config).eval(), word_tokenizer()


def _plan(analyzers, limits):
    return plan_for(analyzers, params=None, subject=Subject(), evidence=EvidenceOptions(enabled=False), limits=limits,
                    head=None, seed=0)


def test_a_capture_over_the_budget_runs_the_streamed_plan(classifier) -> None:
    model, tokenizer = classifier
    plan = _plan(["rollout", "attention_entropy"], Limits(capture_bytes=64 << 10, streaming="auto"))
    assert plan.strategies == {"rollout": "full", "attention_entropy": "full"} and not plan.offload
    assert capture(plan, model, tokenizer, TEXTS).plan == plan  # under the budget: the plan as made
    captured = capture(plan, model, tokenizer, [LONG])
    assert captured.plan.strategies == {"rollout": "streamed", "attention_entropy": "streamed"}
    assert captured.plan.offload and not captured.trace.names("*attn.hook_pattern")
    assert captured.plan.notes[-1][0] == "Streaming" and "over the budget" in captured.plan.notes[-1][1]
    ran = run_plan(plan, model, tokenizer, [LONG])
    assert [(r.analyzer, r.strategy) for r in ran.results] == [("rollout", "streamed"), ("attention_entropy", "streamed")]
    with pytest.raises(MemoryBudgetError):
        capture(_plan(["rollout"], Limits(capture_bytes=64 << 10, streaming="off")), model, tokenizer, [LONG])


def test_a_retargeted_context_runs_as_one_built_from_the_model(classifier) -> None:
    model, tokenizer = classifier
    trace = collect(model, tokenizer, TEXTS[:3])
    predicted = [d.target for d in decide(model, trace, tokenizer, TargetRequest())]
    other = [d.target for d in decide(model, trace, tokenizer, TargetRequest(target=2))]
    moved = retargeted(run_context(trace, model, tokenizer, targets=predicted, seed=0), other)
    fresh = run_context(trace, model, tokenizer, targets=other, seed=0)
    assert moved.targets == fresh.targets != tuple(predicted)
    for name in ("attention_x_gradient", "integrated_gradients"):
        a, b = (analyze(trace, name, context=context) for context in (moved, fresh))
        assert a.arrays.keys() == b.arrays.keys()
        for key in a.arrays:
            np.testing.assert_array_equal(a.arrays[key].values, b.arrays[key].values)


def test_a_batch_reads_the_models_structure_and_decision_once(classifier, monkeypatch) -> None:
    """A run of the plan builds the model's Capturable once and reads its decision reader once, though it decides
    every compared class too: the capture hands both on in its run context, which the analysis runs in."""
    import interpret.analysis.lead as lead
    import interpret.analysis.run as run
    import interpret.capture.api as capture_api
    import interpret.decision.decide as decide_mod
    import interpret.pipeline as pipeline

    model, tokenizer = classifier
    subject = Subject(compare=(0, 1, 2))
    plan = plan_for(["attention_x_gradient"], params=None, subject=subject,
                    evidence=EvidenceOptions(enabled=False), limits=Limits(), head=None, seed=0)
    calls = {"capturable_for": 0, "reader_for": 0}
    for name, original in (("capturable_for", capture_api.capturable_for), ("reader_for", decide_mod.reader_for)):
        def spy(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)
        for module in (capture_api, decide_mod, run, lead, pipeline):  # wherever the name is looked up
            if hasattr(module, name):
                monkeypatch.setattr(module, name, spy)
    ran = run_plan(plan, model, tokenizer, TEXTS[:2])
    assert calls == {"capturable_for": 1, "reader_for": 1}
    assert [run.roles for run in ran.classes] == [("prediction", "asked", "asked", "asked")]
    assert ran.captured.context.runner.capturable.model is model
    assert ran.captured.context.targets == tuple(d.target for d in ran.captured.decided)


def test_collect_takes_the_capturable_a_caller_holds(classifier) -> None:
    """`collect` given the model's Capturable (as the pipeline holds it) records what it records given the model."""
    from interpret.capture.api import capturable_for

    model, tokenizer = classifier
    held, fresh = (collect(m, tokenizer, TEXTS[:2]) for m in (capturable_for(model, tokenizer), model))
    assert held.meta == fresh.meta and held.tensors.keys() == fresh.tensors.keys()
    for name in fresh.tensors:
        assert torch.equal(held.tensors[name], fresh.tensors[name])


def test_the_plan_reads_no_model_and_each_capture_resolves_the_defaults_lead(classifier) -> None:
    from interpret.analysis.defaults import DEFAULT_ANALYZERS, LEADS
    from interpret.analysis.lead import capturable_leads
    from interpret.analysis.run import required_names
    from interpret.capture.api import capturable_for

    model, tokenizer = classifier
    plan = _plan(DEFAULT_ANALYZERS, Limits())  # nothing of the model is needed to plan
    assert plan.leads == LEADS and plan.head is None
    captured = capture(plan, model, tokenizer, TEXTS)
    exposed, refused = capturable_leads(capturable_for(model, tokenizer), LEADS)
    assert captured.leads == (exposed, refused) and exposed  # a tiny BERT exposes the first lead's hook points
    for glob in required_names(exposed):  # the capture added what the exposed leads read
        assert captured.trace.names(glob), glob
    ran = run_plan(plan, model, tokenizer, TEXTS)
    assert ran.results[0].analyzer == exposed[0] and [r.analyzer for r in ran.results[1:]] == list(DEFAULT_ANALYZERS[1:])


def test_the_defaults_run_on_a_model_without_the_first_leads_hook_points() -> None:
    """A mixture of experts has no one MLP hidden layer (`mlp.hook_post`), which the first lead reads: the plan
    asks only for what the other defaults read, and the capture adds the hook points of the lead the model has."""
    from interpret.analysis.defaults import DEFAULT_ANALYZERS, LEADS
    from interpret.analysis.run import required_names

    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(transformers.MixtralConfig(
        vocab_size=len(word_tokenizer()), hidden_size=32, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=64, pad_token_id=0)).eval()
    plan = _plan(DEFAULT_ANALYZERS, Limits())
    assert "*mlp.hook_post" in required_names([LEADS[0]]) and "*mlp.hook_post" not in plan.hook_names
    ran = run_plan(plan, model, word_tokenizer(), TEXTS)
    assert [r.analyzer for r in ran.results] == ["attention_x_gradient", *DEFAULT_ANALYZERS[1:]]
    skipped = dict(ran.skipped)
    assert "mlp.hook_post" in skipped["decompx skipped"] and "attention_x_gradient leads" in skipped["attnlrp skipped"]
