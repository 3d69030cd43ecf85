"""Attention × gradient and gradient-weighted rollout equal a plain PyTorch statement of their formulas —
the eager model's own `output_attentions` with `retain_grad`, one backward pass of the explained score, and
Chefer et al. 2021's rules written out here with torch — on tiny BERT, GPT-2, T5 and ViT models loaded with
SDPA and with eager attention (max error ≤ 1e-5 of the reference's largest value). No hook survives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from hf_tiny import collect_args, model_inputs, tiny_config, tiny_model, word_tokenizer

import interpret
from interpret.analysis.run import run_context
from interpret.hooks import count_hooks

FAMILIES = ["bert", "gpt2", "t5", "vit"]


def _model(family: str, implementation: str):
    if family == "bert":  # a sequence classifier, so the decision is a class
        torch.manual_seed(0)
        config = tiny_config("bert")
        config._attn_implementation = implementation
        return transformers.BertForSequenceClassification(config).eval().double()
    return tiny_model(family, implementation).double()


def _setup(family: str, implementation: str):
    model = _model(family, implementation)
    tokenizer = None if family == "vit" else word_tokenizer()
    inputs, extra = collect_args(family)
    if family == "vit":
        inputs = inputs.double()
    trace = interpret.collect(model, tokenizer, inputs, **extra)
    return model, tokenizer, trace


def _reference(family: str, trace, targets):
    """Return (main, decoder, cross) lists of (A, ∂score/∂A) per layer from the eager twin, masked."""
    eager = _model(family, "eager")
    inputs = model_inputs(trace.encoded)
    output = eager(**inputs, output_attentions=True)
    if trace.encoded.decoder is None:
        groups = {"main": output.attentions}
    else:
        groups = {"main": output.encoder_attentions, "decoder": output.decoder_attentions, "cross": output.cross_attentions}
    for layers in groups.values():
        for pattern in layers:
            pattern.retain_grad()
    logits = output.logits
    score = logits.new_zeros(())
    for b, target in enumerate(targets):
        for i, token in enumerate(target.ids):
            score = score + (logits[b, target.positions[i], token] if target.kind == "token" else logits[b, token])
    score.backward()
    main = trace.encoded.attention_mask.bool()
    dec = trace.encoded.decoder.attention_mask.bool() if trace.encoded.decoder is not None else None
    masks = {"main": (main, main), "decoder": (dec, dec), "cross": (dec, main)}
    out = {}
    for side, layers in groups.items():
        queries, keys = masks[side]
        keep = (queries[:, None, :, None] & keys[:, None, None, :]).double()
        out[side] = [(p.detach() * keep, p.grad * keep) for p in layers]
    return out


def _close(actual: np.ndarray, expected: torch.Tensor) -> None:
    expected = expected.detach().cpu().numpy()
    scale = np.abs(expected).max()
    assert scale > 0
    assert np.abs(actual - expected).max() <= 1e-5 * scale, np.abs(actual - expected).max() / scale


def _rownorm_plus_identity(relevance: torch.Tensor) -> torch.Tensor:
    eye = torch.eye(relevance.shape[-1], dtype=relevance.dtype)
    context = relevance - eye
    total = context.sum(-1, keepdim=True)
    return torch.where(total != 0, context / torch.where(total != 0, total, 1.0), context) + eye


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("family", FAMILIES)
def test_equal_to_a_plain_statement_of_the_formulas(family: str, implementation: str) -> None:
    model, tokenizer, trace = _setup(family, implementation)
    hooks = count_hooks(model)
    targets = run_context(trace, model, tokenizer).targets
    times = interpret.analyze(trace, "attention_x_gradient", model=model, tokenizer=tokenizer)
    rollout = interpret.analyze(trace, "gradient_weighted_rollout", model=model, tokenizer=tokenizer)
    assert count_hooks(model) == hooks
    reference = {side: [(p.cpu(), g.cpu()) for p, g in pairs] for side, pairs in _reference(family, trace, targets).items()}

    # attention × gradient: ∇A ⊙ A per layer and head; the head map sums query and key
    weighted = torch.stack([pattern * grad for pattern, grad in reference["main"]], dim=1)
    _close(times["attn_grad"], weighted)
    _close(times["head_map"], weighted.sum((-1, -2)))
    readout = weighted.sum((1, 2, 3))
    if "cross" in reference:
        cross = torch.stack([pattern * grad for pattern, grad in reference["cross"]], dim=1)
        _close(times["cross_grad"], cross)
        readout = readout + cross.sum((1, 2, 3))
    _close(times["readout"], readout)

    # gradient-weighted rollout, Chefer et al. 2021: Ā = E_h[(∇A ⊙ A)⁺]; R ← R + Ā R (eq. 6); eqs. 8–11 for cross
    def bar(pattern: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        return (pattern * grad).clamp(min=0).mean(1)

    n = trace.encoded.pos
    r_main = torch.eye(n, dtype=torch.float64).repeat(len(targets), 1, 1)
    for pattern, grad in reference["main"]:
        r_main = r_main + bar(pattern, grad) @ r_main
    if "cross" not in reference:
        relevance, rows = r_main, n
    else:
        m = trace.encoded.decoder.pos
        r_dd = torch.eye(m, dtype=torch.float64).repeat(len(targets), 1, 1)
        r_de = torch.zeros(len(targets), m, n, dtype=torch.float64)
        r_ee_bar = _rownorm_plus_identity(r_main)
        for (self_p, self_g), (cross_p, cross_g) in zip(reference["decoder"], reference["cross"]):
            r_dd = r_dd + bar(self_p, self_g) @ r_dd
            r_de = r_de + bar(self_p, self_g) @ r_de
            r_de = r_de + _rownorm_plus_identity(r_dd).transpose(-1, -2) @ bar(cross_p, cross_g) @ r_ee_bar
        relevance, rows = r_de, m
    queries = (trace.encoded.decoder if "cross" in reference else trace.encoded).attention_mask.double().cpu()
    relevance = relevance * queries[:, :, None] * trace.encoded.attention_mask.double().cpu()[:, None, :]
    _close(rollout["cross" if "cross" in reference else "rollout"], relevance)
    weights = torch.stack([torch.as_tensor(t.readout_weights(rows)) for t in targets])
    _close(rollout["readout"], torch.einsum("bq,bqk->bk", weights, relevance))


def test_no_hook_survives_a_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer, trace = _setup("bert", "sdpa")
    hooks = count_hooks(model)
    from interpret.analysis.runner import ModelRunner

    def fail(*args, **kwargs):
        raise RuntimeError("the score fails on purpose")

    monkeypatch.setattr(ModelRunner, "_scores", fail)
    for name in ("attention_x_gradient", "gradient_weighted_rollout"):
        with pytest.raises(RuntimeError, match="on purpose"):
            interpret.analyze(trace, name, model=model, tokenizer=tokenizer)
        assert count_hooks(model) == hooks
