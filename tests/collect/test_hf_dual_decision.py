"""The decision of a text-image dual encoder: each example's text-image logit, and where its text tower reads.

`interpret.capture.hf.pooling` says where each text tower pools its last hidden states (CLIP's end-of-text
token, SigLIP's last position, the first token of AltCLIP, Chinese-CLIP, BLIP and a BERT tower). Tested here
against a plain statement of the model's own dependence: the gradient of each example's logit
`logits_per_text[b, b]` with respect to the text tower's last block output is non-zero at the declared position
and nowhere else. The runner scores that logit (SigLIP's log σ for the log-probability; CLIP has none), the
gradient methods explain it, SigLIP's texts are padded on the left so that each example is what it is alone, and
the options a similarity has no use for are refused in one line.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import TEXTS, built_with, collect_args, last_layer, model_inputs, read_positions, tiny_model, word_tokenizer
from test_hf_dual import MODELS, _inputs

import interpret
from interpret.analysis.run import run_context
from interpret.capture.api import capturable_for, prepare
from interpret.cli.decisions import decision_lines
from interpret.decision.decide import TargetRequest, decide
from interpret.errors import AnalyzerError, InputError
from interpret.heads.scoring import GatedModel

TIGHT = 1e-6
DUALS = [*sorted(MODELS), "clip", "siglip"]
# Where each text tower pools (`TEXT_POOLING`): the word-level tokenizer's [SEP] (id 3) ends each text; the tiny
# CLIP-likes of test_hf_dual keep CLIP's eos id 49407, which no text holds, so they read position 0 as their own
# `argmax` over an all-false row does.
RULES = {"clip": "eos", "siglip": "final", "clipseg": "eos", "metaclip_2": "eos_id", "aimv2": "eos_id",
         "owlvit": "argmax", "owlv2": "argmax", "altclip": "first", "chinese_clip": "first", "blip": "first",
         "vision-text-dual-encoder": "first"}


def _model(name: str) -> Any:
    if name in MODELS:
        build, kernels = MODELS[name]
        return built_with(build, kernels[0])
    return tiny_model(name)


def _pairs(name: str) -> dict[str, Any]:
    """Two texts of different lengths (the second padded) with two random images at the model's size."""
    return _inputs() if name in MODELS else collect_args(name)[0]


@pytest.mark.parametrize("name", DUALS)
def test_the_declared_pooling_is_where_each_logit_reads_the_text_tower(name: str) -> None:
    model = _model(name)
    tokenizer = word_tokenizer()
    encoded = prepare(capturable_for(model, tokenizer), tokenizer, _pairs(name))
    trace = interpret.collect(model, tokenizer, encoded)
    decisions = decide(model, trace, tokenizer)
    pooled = [[position for position, _ in decision.target.pooling] for decision in decisions]
    inputs = model_inputs(encoded)  # where each pair's logit logits_per_text[b, b] reads the text tower
    assert pooled == read_positions(last_layer(model.text_model), lambda: model(**inputs).logits_per_text.diagonal())
    context = run_context(trace, model, tokenizer)
    assert context.runner.reader.text.rule == RULES[name]
    assert all(encoded.attention_mask[b, p[0]] == 1 for b, p in enumerate(pooled))  # always a real token


@pytest.mark.parametrize("name", DUALS)
def test_each_decision_is_its_pairs_logit_and_the_runner_scores_it(name: str) -> None:
    model = _model(name)
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, _pairs(name))
    with torch.no_grad():
        plain = model(**model_inputs(trace.encoded)).logits_per_text.double()
    decisions = decide(model, trace, tokenizer)
    sigmoid = name == "siglip"
    for b, decision in enumerate(decisions):
        assert decision.kind == "similarity" and decision.target.label == "text-image similarity"
        assert decision.score == pytest.approx(float(plain[b, b]), abs=TIGHT)
        expected = float(torch.sigmoid(plain[b, b])) if sigmoid else None
        assert decision.probability == (pytest.approx(expected, abs=TIGHT) if sigmoid else None)
        assert decision.predicted_probability == decision.probability
    context = run_context(trace, model, tokenizer)
    scores = context.score(trace.encoded).detach().double()
    torch.testing.assert_close(scores, plain.diagonal(), atol=TIGHT, rtol=0)
    rows = context.score(trace.encoded, examples=torch.tensor([1, 1, 0])).detach().double()  # rows of any example
    torch.testing.assert_close(rows, plain.diagonal()[[1, 1, 0]], atol=TIGHT, rtol=0)
    if sigmoid:
        logs = context.score(trace.encoded, output="logprob").detach().double()
        torch.testing.assert_close(logs, torch.nn.functional.logsigmoid(plain.diagonal()), atol=TIGHT, rtol=0)
    else:
        with pytest.raises(AnalyzerError, match="no probability of one text-image pair"):
            context.score(trace.encoded, output="logprob")


def test_integrated_gradients_of_clip_adds_up_to_its_logit_change() -> None:
    """IG's completeness (Sundararajan et al. 2017, Prop. 1): Σ attributions = logit(x) − logit(baseline), the
    logit being the pair's own; the analyzer's delta is that residual."""
    model = _model("clip")
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, _pairs("clip"))
    result = interpret.analyze(trace, "integrated_gradients", model=model, tokenizer=tokenizer, params={"steps": 128})
    assert np.abs(result["delta"]).max() < 1e-2 and result.checks["completeness_delta"].ok
    readout = result["readout"]
    assert np.isfinite(readout).all() and (np.abs(readout).sum(-1) > 0).all()


def test_siglip_texts_are_padded_on_the_left_and_each_example_is_what_it_is_alone() -> None:
    """SigLIP reads each row's last position: its texts are padded on the left (position ids following the
    padding), so every example reads its own last token, and its decision and explanations in a padded batch
    equal those of the example alone."""
    model = _model("siglip")
    tokenizer = word_tokenizer()
    both = _pairs("siglip")
    trace = interpret.collect(model, tokenizer, both)
    mask = trace.encoded.attention_mask
    assert mask[1, 0] == 0 and mask[:, -1].all()  # the shorter text is padded on the left
    pads = int((mask[1] == 0).sum())
    batch = {name: interpret.analyze(trace, name, model=model, tokenizer=tokenizer)["readout"]
             for name in ("rollout", "attention_x_gradient")}
    decisions = decide(model, trace, tokenizer)
    for b in range(2):
        alone = interpret.collect(model, tokenizer, {"text": [both["text"][b]], "images": both["images"][b:b + 1]})
        assert decide(model, alone, tokenizer)[0].score == pytest.approx(decisions[b].score, abs=1e-5)
        skip = pads if b == 1 else 0
        for name, readout in batch.items():
            own = interpret.analyze(alone, name, model=model, tokenizer=tokenizer)["readout"][0]
            np.testing.assert_allclose(readout[b, skip:], own, atol=1e-5, rtol=0)


def test_a_text_tower_alone_is_read_where_it_pools() -> None:
    """CLIPTextModel alone makes no decision, and its attention analyzers read its end-of-text row: its tower is
    causal, so the first row (what an encoder without a decision is read at) sees only itself."""
    clip = _model("clip")
    model = T.CLIPTextModel(clip.config.text_config).eval()
    model.load_state_dict(clip.text_model.state_dict())
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS)
    decisions = decide(model, trace, tokenizer)
    ends = [int(torch.nonzero(row == tokenizer.sep_token_id)[0]) for row in trace.encoded.input_ids]
    assert [decision.kind for decision in decisions] == ["none", "none"]
    assert [decision.target.pooling for decision in decisions] == [((end, 1.0),) for end in ends]
    readout = interpret.analyze(trace, "rollout", model=model, tokenizer=tokenizer)["readout"]
    for b, end in enumerate(ends):  # a causal row: weight on its own and earlier positions only, more than one
        assert readout[b, end + 1:].sum() == 0 and (readout[b, :end + 1] > 0).sum() > 1


def test_options_a_similarity_has_no_use_for_are_refused_in_one_line() -> None:
    model = _model("clip")
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, _pairs("clip"), names="*")
    for request in (TargetRequest(target=1), TargetRequest(contrast=1), TargetRequest(gold=True)):
        with pytest.raises(InputError, match="no class or token to target") as caught:
            decide(model, trace, tokenizer, request, gold=["a", "b"])
        assert "\n" not in str(caught.value)
    with pytest.raises(AnalyzerError, match="text-image similarity"):
        interpret.analyze(trace, "decompx", model=model, tokenizer=tokenizer)
    with pytest.raises(AnalyzerError, match="no probability of one text-image pair"):  # its loss is −log p
        interpret.analyze(trace, "head_importance", model=model, tokenizer=tokenizer)
    with pytest.raises(AnalyzerError, match="text-image pairs"):  # head pruning's loss: a class or next token
        GatedModel.of(model, tokenizer, trace.encoded)


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_a_report_explains_the_similarity_and_says_how_far_to_trust_it(name: str, tmp_path: Any) -> None:
    """The report's gradient lead explains each pair's logit; SigLIP's evidence reads σ(logit), CLIP's, which has no
    probability, the logit itself; the command line's decision line gives the logit."""
    model = _model(name)
    tokenizer = word_tokenizer()
    report = interpret.explain(model, tokenizer, _pairs(name))
    methods = [result.analyzer for result in report.results]
    assert methods[0] == "attention_x_gradient" and "rollout" in methods
    notes = dict(report.run.notes)
    if name == "siglip":
        assert report.evidence is not None and "Evidence" not in notes
        assert np.allclose(report.evidence.full, [d.probability for d in report.run.decisions], atol=1e-6)
    else:
        assert report.evidence is not None and report.evidence.measure == "logit" and "Evidence" not in notes
        assert np.allclose(report.evidence.full, [d.score for d in report.run.decisions], atol=1e-6)
    lines = decision_lines(report.run.decisions, None, tokenizer)
    assert lines[0].startswith("example 0: text-image similarity ") and lines[0].endswith("explaining it [prediction]")
    path = tmp_path / "report.html"
    report.render(path)
    assert "text-image similarity" in path.read_text(encoding="utf-8")


def test_a_siglip_text_tower_alone_is_padded_on_the_left_and_read_at_each_texts_last_token() -> None:
    siglip = _model("siglip")
    model = T.SiglipTextModel(siglip.config.text_config).eval()
    model.load_state_dict(siglip.text_model.state_dict())
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS)
    mask = trace.encoded.attention_mask
    assert mask[1, 0] == 0 and mask[:, -1].all()
    assert [d.target.pooling for d in decide(model, trace, tokenizer)] == [((mask.shape[1] - 1, 1.0),)] * 2
    readout = interpret.analyze(trace, "rollout", model=model, tokenizer=tokenizer)["readout"]
    pads = int((mask[1] == 0).sum())
    alone = interpret.collect(model, tokenizer, TEXTS[1:])
    own = interpret.analyze(alone, "rollout", model=model, tokenizer=tokenizer)["readout"][0]
    np.testing.assert_allclose(readout[1, pads:], own, atol=1e-5, rtol=0)
    with torch.no_grad():  # the pooled output is the last position's, which the left padding makes a real token
        pooled = model(**model_inputs(trace.encoded)).pooler_output
        single = model(**model_inputs(alone.encoded)).pooler_output
    torch.testing.assert_close(pooled[1], single[0], atol=1e-5, rtol=0)


def _vision_attentions_with_grads(model: Any, encoded: Any) -> tuple[torch.Tensor, ...]:
    """Return the eager model's vision attentions [batch, head, query, key] per layer, each holding in `.grad` the
    gradient of Σ_b logits_per_text[b, b] (every pair's logit)."""
    output = model(**model_inputs(encoded), output_attentions=True)
    attentions = output.vision_model_output.attentions
    for attention in attentions:
        attention.retain_grad()
    output.logits_per_text.diagonal().sum().backward()
    return attentions


CLASS_TOKEN_TOWERS = ["clip", *(name for name in sorted(MODELS) if name != "aimv2")]


@pytest.mark.parametrize("name", CLASS_TOKEN_TOWERS)
def test_gradient_weighted_rollout_over_the_image_is_chefers_clip_relevance(name: str) -> None:
    """Chefer et al. 2021's relevance of the image for the pair's logit, stated plainly from the eager model's own
    attentions: R = I, R ← R + E_h[(∇A ⊙ A)⁺]·R over the vision tower's layers, read at its class token."""
    model = built_with(MODELS[name][0], "eager") if name in MODELS else tiny_model(name, "eager")
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, _pairs(name))
    result = interpret.analyze(trace, "gradient_weighted_rollout", model=model, tokenizer=tokenizer)
    attentions = _vision_attentions_with_grads(model, trace.encoded)
    relevance = torch.eye(attentions[0].shape[-1], dtype=torch.float64).expand(2, -1, -1)
    for attention in attentions:
        cam = (attention.grad.double() * attention.double()).clamp(min=0).mean(1)
        relevance = relevance + cam @ relevance
    np.testing.assert_allclose(result["image_rollout"], relevance.detach().numpy(), atol=1e-6, rtol=0)
    np.testing.assert_allclose(result["image_readout"], relevance[:, 0].detach().numpy(), atol=1e-6, rtol=0)
    decisions = decide(model, trace, tokenizer)
    assert [d.target.image_pooling for d in decisions] == [((0, 1.0),)] * 2
    inputs = model_inputs(trace.encoded)  # the logit reads the vision tower's last block at its class token alone
    assert read_positions(last_layer(model.vision_model), lambda: model(**inputs).logits_per_text.diagonal()) == [[0]] * 2


@pytest.mark.parametrize("name", ["siglip", "aimv2"])
def test_a_vision_tower_pooled_by_an_attention_head_has_no_image_readout(name: str) -> None:
    """SigLIP's and AIMv2's vision towers pool with an attention head: no position stands for what the decision
    reads of the image, so no image readout is claimed (the text side's is)."""
    model = built_with(MODELS[name][0], "eager") if name in MODELS else tiny_model(name, "eager")
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, _pairs(name))
    result = interpret.analyze(trace, "gradient_weighted_rollout", model=model, tokenizer=tokenizer)
    assert "image_readout" not in result.arrays and "readout" in result.arrays
    assert all(d.target.image_pooling == () for d in decide(model, trace, tokenizer))


@pytest.mark.parametrize("name", ["clip", "owlvit", "vision-text-dual-encoder"])
def test_rollout_over_the_image_is_abnar_and_zuidemas_from_the_class_token(name: str) -> None:
    """Abnar & Zuidema's rollout of the vision tower, stated plainly from the eager model's own attentions:
    Â = ½·mean_h A + ½·I per layer, R = Â_{L−1}⋯Â_0, read at the class token the image embedding pools."""
    model = built_with(MODELS[name][0], "eager") if name in MODELS else tiny_model(name, "eager")
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, _pairs(name))
    result = interpret.analyze(trace, "rollout", model=model, tokenizer=tokenizer)
    with torch.no_grad():
        attentions = model(**model_inputs(trace.encoded), output_attentions=True).vision_model_output.attentions
    n = attentions[0].shape[-1]
    relevance = torch.eye(n, dtype=torch.float64).expand(2, -1, -1)
    for attention in attentions:
        relevance = (0.5 * attention.double().mean(1) + 0.5 * torch.eye(n, dtype=torch.float64)) @ relevance
    np.testing.assert_allclose(result["image_readout"], relevance[:, 0].numpy(), atol=1e-6, rtol=0)
    assert result.checks["image_readout_sum_error"].ok
    without = interpret.analyze(trace, "rollout")  # without the model nothing says what the decision reads
    assert "image_readout" not in without.arrays


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_attention_x_gradient_into_the_image_is_the_plain_sum(name: str) -> None:
    """Σ_layer Σ_head Σ_query ∂logit/∂A ⊙ A over the vision tower's own attentions (the eager model's, with their
    gradients), into each of its positions: no row is read, so SigLIP's attention-pooled tower has it too."""
    model = tiny_model(name, "eager")
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, _pairs(name))
    result = interpret.analyze(trace, "attention_x_gradient", model=model, tokenizer=tokenizer)
    attentions = _vision_attentions_with_grads(model, trace.encoded)
    expected = sum((a.grad.double() * a.double()).sum(dim=(1, 2)) for a in attentions)  # [batch, key]
    np.testing.assert_allclose(result["image_readout"], expected.detach().numpy(), atol=1e-6, rtol=0)
