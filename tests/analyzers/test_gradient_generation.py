"""A language model's multi-token target (a continuation): Integrated Gradients gives one attribution row per
target token — each equal to Captum's LayerIntegratedGradients of that token's own logit, called directly
(1e-5) — in the row of the position whose logits score it, and the rows add up to the whole readout."""

from __future__ import annotations

import numpy as np
import torch
from captum.attr import LayerIntegratedGradients
from gradient_cases import baseline_ids, tiny_gpt2

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
