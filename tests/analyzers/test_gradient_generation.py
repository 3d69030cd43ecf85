"""A language model's multi-token target (a continuation, given or generated): Integrated Gradients gives one
attribution row per target token — each equal to Captum's LayerIntegratedGradients of that token's own logit,
called directly (1e-5 of the largest for a given continuation; 1e-12 for generated tokens, in float64) — in the
row of the position whose logits score it, and the rows add up to the whole readout."""

from __future__ import annotations

import numpy as np
import torch
from captum.attr import LayerIntegratedGradients
from gradient_cases import baseline_ids, tiny_gpt2
from hf_tiny import tiny_model, word_tokenizer

import interpret
from interpret.analyze.run import run_context

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
            expected[b, position] = attr.sum(-1)[0].detach().numpy()
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(result["per_step"], expected, atol=1e-5 * np.abs(expected).max(), rtol=0)
    np.testing.assert_allclose(result["per_step"].sum(1), result["readout"], atol=1e-10, rtol=0)
    assert result.checks["per_step_sum_error"].ok


def test_generate_explains_each_generated_token_as_captum_does() -> None:
    """explain(generate=3): the tokens are transformers' own greedy `generate` (called here directly), and each
    generated token's row of per_step is Captum's LayerIntegratedGradients of that token's logit at the
    position before it, on the whole sequence (prompt and the tokens generated before it)."""
    model, tokenizer = tiny_model("llama", "eager").double(), word_tokenizer()
    report = interpret.explain(model, tokenizer, TEXTS, ["integrated_gradients"], generate=3, evidence=False)
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
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
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
            expected_rows[b, position] = attr.sum(-1)[0].detach().numpy()
    assert np.abs(expected_rows).max() > 0 and result["per_step"].shape == expected_rows.shape == (2, ids.shape[1], ids.shape[1])
    np.testing.assert_allclose(result["per_step"], expected_rows, atol=1e-12 * np.abs(expected_rows).max(), rtol=0)
