"""A language model's multi-token target (a continuation, given or generated): Integrated Gradients gives one
attribution row per target token — each equal to Captum's LayerIntegratedGradients of that token's own logit,
called directly (1e-5 of the largest for a given continuation; 1e-12 for generated tokens, in float64) — in the
row of the position whose logits score it, and the rows add up to the whole readout. Attention × gradient and
gradient-weighted rollout give the same rows, each equal to the analyzer run alone for that token; their
streamed versions refuse such a target."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.attr import LayerIntegratedGradients
from gradient_cases import baseline_ids, tiny_gpt2
from hf_tiny import tiny_model, word_tokenizer

import interpret
from interpret.analysis.run import run_context
from interpret.errors import AnalyzerError
from interpret.request import Limits, Subject

TEXTS, CONTINUATIONS = ["the cat sat on", "a dog"], ["the mat", "saw red blue"]


def test_one_row_per_generated_token_equal_to_captum() -> None:
    case = tiny_gpt2()
    trace = interpret.collect(case.model, case.tokenizer, TEXTS, continuations=CONTINUATIONS)
    result = case.analyze(trace, "integrated_gradients")
    targets = run_context(trace, case.model, case.tokenizer).targets
    ids, mask = trace.encoded.input_ids, trace.encoded.attention_mask
    base = baseline_ids(trace, case.tokenizer.pad_token_id)

    def logit(input_ids, attention_mask, position, token):
        logits = case.model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits[torch.arange(len(input_ids)), position, token]

    method = LayerIntegratedGradients(logit, case.model.get_input_embeddings())
    expected = np.zeros_like(result["per_step"])
    for b, target in enumerate(targets):
        assert len(target.ids) >= 2
        for position, token in zip(target.positions, target.ids):
            attr = method.attribute(ids[b:b + 1], baselines=base[b:b + 1], n_steps=50,
                                    additional_forward_args=(mask[b:b + 1], torch.tensor([position]), torch.tensor([token])))
            expected[b, position] = attr.sum(-1)[0].detach().cpu().numpy()
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(result["per_step"], expected, atol=1e-5 * np.abs(expected).max(), rtol=0)
    np.testing.assert_allclose(result["per_step"].sum(1), result["readout"], atol=1e-10, rtol=0)
    assert result.checks["per_step_sum_error"].ok


def test_generate_explains_each_generated_token_as_captum_does() -> None:
    """explain(generate=3): the tokens are transformers' own greedy `generate` (called here directly), and each
    generated token's row of per_step is Captum's LayerIntegratedGradients of that token's logit at the
    position before it, on the whole sequence (prompt and the tokens generated before it)."""
    model, tokenizer = tiny_model("llama", "eager").double(), word_tokenizer()
    report = interpret.explain(model, tokenizer, TEXTS, ["integrated_gradients"], target=Subject(generate=3), evidence=False)
    result = report.sections[0].result
    decisions = report.run.decisions
    trace = interpret.collect(model, tokenizer, TEXTS)  # the prompts, as explain encodes them
    rows = []
    for b, decision in enumerate(decisions):
        prompt = trace.encoded.input_ids[b, trace.encoded.attention_mask[b].bool()][None]
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=3)
        generated = expected[0, prompt.shape[1]:].tolist()
        assert list(decision.target.ids) == generated and len(generated) == 3  # the tiny Llama ends no sequence early
        assert decision.target.source == "generated" and decision.continuation == tokenizer.decode(generated)
        assert list(decision.target.positions) == list(range(prompt.shape[1] - 1, prompt.shape[1] + 2))
        rows.append(expected)
    ids = torch.nn.utils.rnn.pad_sequence([row[0] for row in rows], batch_first=True, padding_value=tokenizer.pad_token_id)
    mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(row[0]) for row in rows], batch_first=True)
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids, device=ids.device))
    base = torch.where(mask.bool() & ~special, torch.full_like(ids, tokenizer.pad_token_id), ids)

    def logit(input_ids, attention_mask, position, token):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits[torch.arange(len(input_ids)), position, token]

    method = LayerIntegratedGradients(logit, model.get_input_embeddings())
    expected_rows = np.zeros_like(result["per_step"])
    for b, decision in enumerate(decisions):  # each row as the batch holds it, padding included (HF's eager
        # softmax runs in float32, so a padded row differs from the row alone by ~1e-8 in the model itself)
        for position, token in zip(decision.target.positions, decision.target.ids):
            attr = method.attribute(ids[b:b + 1], baselines=base[b:b + 1], n_steps=50,
                                    additional_forward_args=(mask[b:b + 1], torch.tensor([position]), torch.tensor([token])))
            expected_rows[b, position] = attr.sum(-1)[0].detach().cpu().numpy()
    assert np.abs(expected_rows).max() > 0 and result["per_step"].shape == expected_rows.shape == (2, ids.shape[1], ids.shape[1])
    np.testing.assert_allclose(result["per_step"], expected_rows, atol=1e-12 * np.abs(expected_rows).max(), rtol=0)


ATTENTION_GRADIENTS = ["attention_x_gradient", "gradient_weighted_rollout"]


def _separately(model, tokenizer, report, full_ids, analyzer: str) -> np.ndarray:
    """Return per_step as the analyzer gives it when run on its own for each target token: on the sequence up
    to the position whose logits score the token (a causal model's attention there never sees what follows),
    with that token as the target (a token id given to `explain`)."""
    expected = np.zeros_like(report.section(analyzer).result["per_step"])
    for b, decision in enumerate(report.run.decisions):
        for position, token in zip(decision.target.positions, decision.target.ids):
            alone = interpret.explain(model, tokenizer, torch.tensor([full_ids[b][:position + 1]]), [analyzer],
                                      target=token, evidence=False)
            assert alone.run.decisions[0].target.positions == (position,)
            expected[b, position, :position + 1] = alone.section(analyzer).result["readout"][0]
    return expected


@pytest.mark.parametrize("analyzer", ATTENTION_GRADIENTS)
def test_attention_gradient_methods_give_each_continuation_token_the_row_it_gets_alone(analyzer: str) -> None:
    """A given continuation on a tiny GPT-2 (eager, float64, a padded batch): each token's per_step row equals
    the analyzer run separately with that token as the target on the prefix before it, to 1e-12."""
    model, tokenizer = tiny_model("gpt2", "eager").double(), word_tokenizer()
    report = interpret.explain(model, tokenizer, TEXTS, [analyzer], target=Subject(continuation=CONTINUATIONS), evidence=False)
    encoded = interpret.collect(model, tokenizer, TEXTS, continuations=CONTINUATIONS).encoded
    full = [encoded.input_ids[b][encoded.attention_mask[b].bool()].tolist() for b in range(len(TEXTS))]
    result = report.section(analyzer).result
    assert [len(d.target.ids) for d in report.run.decisions] == [2, 3]
    expected = _separately(model, tokenizer, report, full, analyzer)
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(result["per_step"], expected, atol=1e-12 * np.abs(expected).max(), rtol=0)
    if analyzer == "attention_x_gradient":  # linear in the score: the steps add up to the whole target's readout
        np.testing.assert_allclose(result["per_step"].sum(1), result["readout"], atol=1e-6 * np.abs(result["readout"]).max())
        assert result.checks["per_step_sum_error"].ok


@pytest.mark.parametrize("analyzer", ATTENTION_GRADIENTS)
def test_attention_gradient_methods_give_one_row_per_generated_token(analyzer: str) -> None:
    """explain(generate=3) on a tiny Llama (the tiny GPT-2 ends its sequence at once): one row per generated
    token, each the analyzer run alone on the prefix with that token as the target. 1e-6 of the largest: Llama's
    eager attention takes its softmax in float32 (transformers' `softmax(dtype=torch.float32)`), so a pattern
    row over a shorter sequence rounds differently by about float32's epsilon (6e-8 measured)."""
    model, tokenizer = tiny_model("llama", "eager").double(), word_tokenizer()
    report = interpret.explain(model, tokenizer, TEXTS, [analyzer], target=Subject(generate=3), evidence=False)
    encoded = interpret.collect(model, tokenizer, TEXTS).encoded
    full = [encoded.input_ids[b][encoded.attention_mask[b].bool()].tolist() + list(d.target.ids)
            for b, d in enumerate(report.run.decisions)]
    assert all(d.target.source == "generated" and len(d.target.ids) == 3 for d in report.run.decisions)
    per_step = report.section(analyzer).result["per_step"]
    expected = _separately(model, tokenizer, report, full, analyzer)
    assert [[p for p in range(per_step.shape[1]) if per_step[b, p].any()] for b in range(2)] == \
        [list(d.target.positions) for d in report.run.decisions]
    np.testing.assert_allclose(per_step, expected, atol=1e-6 * np.abs(expected).max(), rtol=0)


@pytest.mark.parametrize("analyzer", ATTENTION_GRADIENTS)
def test_a_streamed_run_refuses_per_token_rows_rather_than_giving_one(analyzer: str) -> None:
    model, tokenizer = tiny_model("gpt2", "eager").double(), word_tokenizer()
    with pytest.raises(AnalyzerError, match=r"cannot give one row per target token \(2 target tokens\), only one for"
                                            rf" all of them; for per-token rows run {analyzer} on the full capture"):
        interpret.explain(model, tokenizer, TEXTS[0], [analyzer], target=Subject(continuation=CONTINUATIONS[0]),
                          evidence=False, limits=Limits(streaming="on"))
