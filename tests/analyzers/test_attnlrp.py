"""AttnLRP against its rules propagated one operation at a time (Achtibat et al. 2024), written out plainly
below with no autograd: relevance starts as the target's logit and each operation splits its output's
relevance over its inputs:
    affine y = W x + b                 R_x = x ⊙ Wᵀ(R_y / y)                         (ε-rule, ε → 0)
    sum y = a + b                      R_a = a ⊙ R_y / y, R_b = b ⊙ R_y / y
    LayerNorm, σ held constant         the affine rule on y = diag(w/σ)(I − 11ᵀ/d) x + β
    GELU, tanh; L2 normalisation       R_x = R_y                                    (identity rule)
    S = c · q kᵀ, C = A v              each factor ½ of Σ over the product's terms   (uniform rule)
    A = softmax(S)                     R_S = S ⊙ (R_A − A Σ_row R_A)                (softmax rule)
The plugin gets the same relevance from one backward pass with rules swapped into the gradient.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from hf_tiny import DECODER_TEXTS, TEXTS, tiny_config, word_tokenizer
from torch import Tensor

import interpret
from interpret.analysis.run import run_context
from interpret.errors import AnalyzerError
from interpret.models.sentiment_head import SentimentHead

ALL = {"include_special": True}


def _affine(weight: Tensor, x: Tensor, r_y: Tensor, y: Tensor) -> Tensor:
    """R_x [.., in] of y = x Wᵀ + b by the ε-rule (ε → 0)."""
    return x * ((r_y / y) @ weight)


def _layer_norm(norm: torch.nn.LayerNorm, x: Tensor, r_y: Tensor, y: Tensor) -> Tensor:
    """R_x of LayerNorm with σ constant: the affine rule on diag(w/σ)(I − 11ᵀ/d)."""
    sigma = (x.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    u = norm.weight * (r_y / y) / sigma
    return x * (u - u.mean(-1, keepdim=True))


def _bert_relevance(model: transformers.BertModel, ids: Tensor, head: torch.nn.Module) -> Tensor:
    """Return each token's relevance [pos] of one example (no padding) for its predicted class: through BERT's
    pooler and `head` (its classifier, an nn.Linear), or a SentimentHead's mean, L2 normalisation and linear layer."""
    emb, n = model.embeddings, ids.shape[0]
    word, pos, typ = emb.word_embeddings.weight[ids], emb.position_embeddings.weight[:n], emb.token_type_embeddings.weight[0]
    e = word + pos + typ
    h = emb.LayerNorm(e)
    saved = []
    for layer in model.encoder.layer:
        att, heads = layer.attention, model.config.num_attention_heads
        d = h.shape[-1] // heads
        q, k, v = (m(h) for m in (att.self.query, att.self.key, att.self.value))
        split = lambda t: t.view(n, heads, d).transpose(0, 1)  # noqa: E731 [head, pos, d]
        qh, kh, vh = split(q), split(k), split(v)
        s = qh @ kh.transpose(1, 2) * d**-0.5
        a = s.softmax(-1)
        c = (a @ vh).transpose(0, 1).reshape(n, -1)
        o = att.output.dense(c)
        r1 = o + h
        h1 = att.output.LayerNorm(r1)
        f = layer.intermediate.dense(h1)
        g = layer.intermediate.intermediate_act_fn(f)
        m = layer.output.dense(g)
        r2 = m + h1
        saved.append((h, q, k, v, qh, kh, vh, s, a, c, o, r1, h1, f, g, m, r2))
        h = layer.output.LayerNorm(r2)
    with_heads = lambda t: t.view(n, heads, d).transpose(0, 1)  # noqa: E731
    if isinstance(head, torch.nn.Linear):
        p = model.pooler.dense(h[0])
        t = torch.tanh(p)
        logits = head(t)
        r_logits = torch.where(torch.arange(2) == logits.argmax(), logits, 0.0)
        r_p = _affine(head.weight, t, r_logits, logits)  # then tanh: identity rule
        r_h = torch.zeros_like(h)
        r_h[0] = _affine(model.pooler.dense.weight, h[0], r_p, p)
    else:
        pooled = h.mean(0)
        unit = pooled / pooled.norm()
        logits = head.linear(unit)
        r_logits = torch.where(torch.arange(2) == logits.argmax(), logits, 0.0)
        r_pooled = _affine(head.linear.weight, unit, r_logits, logits)  # then normalisation: identity rule
        r_h = h / n * (r_pooled / pooled)
    for layer, (h_in, q, k, v, qh, kh, vh, s, a, c, o, r1, h1, f, g, m, r2) in reversed(list(zip(model.encoder.layer, saved))):
        att = layer.attention
        h_out = layer.output.LayerNorm(r2)
        r_r2 = _layer_norm(layer.output.LayerNorm, r2, r_h, h_out)
        r_m, r_h1 = m * r_r2 / r2, h1 * r_r2 / r2
        r_f = _affine(layer.output.dense.weight, g, r_m, m)  # then GELU: identity rule
        r_h1 = r_h1 + _affine(layer.intermediate.dense.weight, h1, r_f, f)
        r_r1 = _layer_norm(att.output.LayerNorm, r1, r_h1, h1)
        r_o, r_h = o * r_r1 / r1, h_in * r_r1 / r1
        r_c = with_heads(_affine(att.output.dense.weight, c, r_o, o))  # [head, pos, d]
        c_heads = with_heads(c)
        share = a[..., :, :, None] * vh[:, None, :, :] * (r_c / c_heads)[:, :, None, :] / 2  # [head, i, j, d]
        r_a, r_v = share.sum(-1), share.sum(1)
        r_s = s * (r_a - a * r_a.sum(-1, keepdim=True))
        terms = qh[:, :, None, :] * kh[:, None, :, :] * d**-0.5 * (r_s / s)[..., None] / 2  # [head, i, j, d]
        merge = lambda t: t.transpose(0, 1).reshape(n, -1)  # noqa: E731
        r_q, r_k, r_v = merge(terms.sum(2)), merge(terms.sum(1)), merge(r_v)
        for module, out, r_out in ((att.self.query, q, r_q), (att.self.key, k, r_k), (att.self.value, v, r_v)):
            r_h = r_h + _affine(module.weight, h_in, r_out, out)
    r_e = _layer_norm(emb.LayerNorm, e, r_h, emb.LayerNorm(e))
    return (word * r_e / e).sum(-1)


def _tiny_bert(seed: int = 0) -> transformers.BertForSequenceClassification:
    torch.manual_seed(seed)
    config = tiny_config("bert")
    config.num_labels = 2
    model = transformers.BertForSequenceClassification(config).double().eval()
    with torch.no_grad():  # weights and biases far from their small initial values, so no rule is near-trivial
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    return model


@pytest.mark.parametrize("text", TEXTS)
def test_equals_the_rules_propagated_one_operation_at_a_time_through_bert_and_its_pooler(text: str) -> None:
    model, tokenizer = _tiny_bert(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, [text], names=["*attn.hook_pattern"])
    result = interpret.analyze(trace, "attnlrp", model, ALL, tokenizer=tokenizer)
    with torch.no_grad():
        expected = _bert_relevance(model.bert, trace.encoded.input_ids[0], model.classifier).numpy()
    got = result.arrays["readout"].values[0]
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())


def test_equals_the_rules_through_the_default_heads_mean_and_l2_normalisation() -> None:
    bert = _tiny_bert(1).bert
    torch.manual_seed(2)
    head = SentimentHead(torch.randn(2, 32), torch.randn(2)).double()
    tokenizer = word_tokenizer()
    trace = interpret.collect(bert, tokenizer, [TEXTS[0]], names=["*attn.hook_pattern"])
    result = interpret.analyze(trace, "attnlrp", bert, ALL, tokenizer=tokenizer, head=head)
    with torch.no_grad():
        expected = _bert_relevance(bert, trace.encoded.input_ids[0], head).numpy()
    np.testing.assert_allclose(result.arrays["readout"].values[0], expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())


def test_the_rules_change_the_gradient_only() -> None:
    """The model's scores are the same with the rules as without (a value-preserving swap), and the relevance is
    not plain input × gradient."""
    model, tokenizer = _tiny_bert(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern"])
    lrp = interpret.analyze(trace, "attnlrp", model, tokenizer=tokenizer)
    plain = interpret.analyze(trace, "input_x_gradient", model, tokenizer=tokenizer)
    assert lrp.checks["score_consistency"].value == 0.0
    assert np.abs(lrp.arrays["readout"].values - plain.arrays["readout"].values).max() > 1e-3


def test_the_score_check_reads_the_captured_pass_instead_of_running_the_model_again() -> None:
    """F(ids) of the check is the trace's own forward pass (`trace.output`, `_captum.traced_scores`): attnlrp
    runs the model once, the rules' pass, where the check once ran it a second time."""
    model, tokenizer = _tiny_bert(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern"])
    context = run_context(trace, model, tokenizer)  # binding it checks the decision's rows once (a pass of its own)
    calls: list[int] = []
    handle = model.register_forward_hook(lambda module, args, output: calls.append(1))
    try:
        result = interpret.analyze(trace, "attnlrp", context=context)
    finally:
        handle.remove()
    assert len(calls) == 1 and result.checks["score_consistency"].value == 0.0  # double precision: equal


@pytest.mark.parametrize(("family", "cls", "texts"), [
    ("bert", "BertForSequenceClassification", TEXTS),
    ("distilbert", "DistilBertForSequenceClassification", TEXTS),
    ("gpt2", "GPT2LMHeadModel", DECODER_TEXTS),
    ("llama", "LlamaForCausalLM", DECODER_TEXTS),
])
def test_each_example_gets_the_same_relevance_alone_and_padded_in_a_batch(family: str, cls: str, texts: list[str]) -> None:
    torch.manual_seed(0)
    config = tiny_config(family)
    config.num_labels = 2
    model = getattr(transformers, cls)(config).double().eval()
    tokenizer = word_tokenizer()
    together_trace = interpret.collect(model, tokenizer, texts, names=["*attn.hook_pattern"])
    together = interpret.analyze(together_trace, "attnlrp", model=model, tokenizer=tokenizer)
    for row, text in enumerate(texts):
        trace = interpret.collect(model, tokenizer, [text], names=["*attn.hook_pattern"])
        alone = interpret.analyze(trace, "attnlrp", model=model, tokenizer=tokenizer).arrays["readout"].values[0]
        together_mask = together_trace.encoded.attention_mask[row].bool().numpy()
        real = trace.encoded.attention_mask[0].bool().numpy()
        np.testing.assert_allclose(together.arrays["readout"].values[row][together_mask], alone[real], rtol=1e-9, atol=1e-12)
        assert np.abs(alone).max() > 0 and not together.arrays["readout"].values[row][~together_mask].any()


def test_refuses_a_family_without_a_rule_for_every_operation_in_one_line() -> None:
    torch.manual_seed(0)
    config = tiny_config("roberta")
    config.num_labels = 2
    model = transformers.RobertaForSequenceClassification(config).eval()
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS, names=["*attn.hook_pattern"])
    with pytest.raises(AnalyzerError, match="RobertaForSequenceClassification is not a family") as raised:
        interpret.analyze(trace, "attnlrp", model=model, tokenizer=tokenizer)
    assert "\n" not in str(raised.value) and "decompx" in str(raised.value)
