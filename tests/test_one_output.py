"""A classifier with one output (a cross-encoder reranker, a reward model, a regression head: `num_labels=1`) decides
a score, not a softmax over one class (which is 1 whatever the input): its decision is the logit, its probability
σ(logit) only where the config says the model was trained with a sigmoid (`problem_type` multi-label, a
sentence-transformers cross-encoder's Sigmoid activation), and none otherwise. Attributions explain the logit
(Integrated Gradients equals Captum's on it); evidence measures m(x) as that probability, or as the logit itself;
drivers (class flips) and head importance (class losses), which need classes, say so instead of measuring nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transformers
from captum.attr import LayerIntegratedGradients
from hf_tiny import tiny_config

import interpret
import shipped_tokenizers
from interpret.errors import AnalyzerError
from interpret.pipeline import plan_for, run_plan
from interpret.request import EvidenceOptions, Limits, Subject

TEXTS = ["the cat sat on the mat", "a dog ran by the river !"]
QUERIES = {"text": ["the cat", "a dog"], "text_pair": ["the cat sat on the mat", "a quiet morning by the river"]}


def _scorer(**config: object) -> tuple[transformers.BertForSequenceClassification, object]:
    """A tiny random BERT with one output (float64), and a WordPiece tokenizer."""
    tokenizer = shipped_tokenizers.wordpiece()
    torch.manual_seed(0)
    made = tiny_config("bert", vocab_size=len(tokenizer))
    made.num_labels, made.initializer_range = 1, 0.3
    for key, value in config.items():
        setattr(made, key, value)
    return transformers.BertForSequenceClassification(made).eval().double(), tokenizer


def _logits(model: torch.nn.Module, tokenizer: object, inputs: object) -> torch.Tensor:
    texts, pairs = (inputs["text"], inputs["text_pair"]) if isinstance(inputs, dict) else (inputs, None)
    with torch.no_grad():
        return model(**tokenizer(texts, pairs, padding=True, return_tensors="pt")).logits[:, 0]


@pytest.mark.parametrize("config, sigmoid", [
    ({}, False),
    ({"problem_type": "regression"}, False),
    ({"problem_type": "multi_label_classification"}, True),
    ({"sbert_ce_default_activation_function": "torch.nn.modules.activation.Sigmoid"}, True),
    ({"sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"}, False),
    ({"sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"}}, True),
])
def test_the_decision_is_the_logit_with_a_probability_only_where_declared(config: dict, sigmoid: bool) -> None:
    model, tokenizer = _scorer(**config)
    report = interpret.explain(model, tokenizer, QUERIES, ["rollout"], evidence=False)
    logits = _logits(model, tokenizer, QUERIES)
    for b, decision in enumerate(report.run.decisions):
        assert decision.score == pytest.approx(float(logits[b]), abs=1e-12)
        expected = 1 / (1 + math.exp(-float(logits[b]))) if sigmoid else None
        assert decision.probability == (pytest.approx(expected, abs=1e-12) if sigmoid else None)
        assert decision.predicted_probability == decision.probability


def test_integrated_gradients_explains_the_logit_as_captum_does() -> None:
    model, tokenizer = _scorer()
    trace = interpret.collect(model, tokenizer, TEXTS)
    result = interpret.analyze(trace, "integrated_gradients", model=model, tokenizer=tokenizer)
    ids, mask = trace.encoded.input_ids, trace.encoded.attention_mask

    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, attention_mask=mask).logits[:, 0]

    attributed = mask.bool() & ~trace.encoded.special
    baseline = torch.where(attributed, torch.full_like(ids, tokenizer.pad_token_id), ids)
    attr = LayerIntegratedGradients(forward, model.bert.embeddings.word_embeddings).attribute(
        ids, baselines=baseline, additional_forward_args=(mask,), n_steps=50)
    expected = attr.sum(-1).detach().numpy()
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(result["readout"], expected, atol=1e-9, rtol=0)


@pytest.mark.parametrize("config, measure", [({}, "logit"), ({"problem_type": "multi_label_classification"}, "probability")])
def test_evidence_measures_the_logit_where_there_is_no_probability(config: dict, measure: str) -> None:
    model, tokenizer = _scorer(**config)
    plan = plan_for(["integrated_gradients"], params=None, subject=Subject(), evidence=EvidenceOptions(seeds=2),
                    limits=Limits(), head=None, seed=0)
    ran = run_plan(plan, model, tokenizer, TEXTS)
    evidence = ran.measured
    assert evidence.measure == measure
    logits = _logits(model, tokenizer, TEXTS)
    full = logits if measure == "logit" else logits.sigmoid()
    np.testing.assert_allclose(evidence.full, full.numpy(), atol=1e-12, rtol=0)
    # MoRF at 100%: every removable token deleted, the special tokens alone left: m of "[CLS] [SEP]"
    with torch.no_grad():
        empty = model(input_ids=torch.tensor([[tokenizer.cls_token_id, tokenizer.sep_token_id]])).logits[0, 0]
    last = float(empty) if measure == "logit" else float(empty.sigmoid())
    method = evidence.methods[0]
    np.testing.assert_allclose(method.morf[:, -1], [last, last], atol=1e-12, rtol=0)
    assert np.abs(method.comprehensiveness).max() > 0


def test_head_importance_refuses_a_model_with_one_output() -> None:
    from interpret.heads.run import study_heads

    model, tokenizer = _scorer()
    with pytest.raises(AnalyzerError, match="one output"):
        study_heads(model, tokenizer, TEXTS, None, batch_size=2)

