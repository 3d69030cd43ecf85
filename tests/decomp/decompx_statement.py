"""A plain statement of DecompX (Modarressi et al. 2023, ACL), read straight from tiny Hugging Face BERT, GPT-2
and Llama modules with naive loops over positions i and tokens k (no interpret code): the independent
reference the `decompx` analyzer is checked against.

x_{i⇐k} is kept as a Python list of lists of vectors X[i][k] [d_model], float64. Every bias b added to a
bias-free term t_{i⇐k} goes to token k in proportion to |b · t_{i⇐k}| over k (AbsDot, the paper's Eq. 5).
The attention weights and every block input are the model's own (`statement.run`, eager); the norms' divisors
and the activations' slopes are computed here from the real inputs of each module.
"""

from __future__ import annotations

from typing import Any

import torch
from statement import run

Parts = list[list[torch.Tensor]]


def absdot(terms: list[torch.Tensor], bias: torch.Tensor) -> list[torch.Tensor]:
    """Return terms[k] + ω_k bias with ω_k = |bias · terms[k]| / Σ_k' |bias · terms[k']| (Eq. 5)."""
    weights = [abs(float(bias @ term)) for term in terms]
    total = sum(weights)
    if total == 0.0:  # a zero bias (Llama has none): nothing to split
        return terms
    return [term + (weight / total) * bias for term, weight in zip(terms, weights)]


def _norm_parts(parts: list[torch.Tensor], real: torch.Tensor, norm: Any) -> list[torch.Tensor]:
    """Return the norm of `real` decomposed (Eq. 8): γ ⊙ (p − mean p) / s(real) with β split (RMSNorm: γ ⊙ p / rms)."""
    if hasattr(norm, "variance_epsilon"):
        return [norm.weight * p / torch.sqrt(real.pow(2).mean() + norm.variance_epsilon) for p in parts]
    scaled = [norm.weight * (p - p.mean()) / torch.sqrt(real.var(unbiased=False) + norm.eps) for p in parts]
    return absdot(scaled, norm.bias)


def _affine_parts(parts: list[torch.Tensor], module: Any) -> list[torch.Tensor]:
    """Return each part through a Linear's weight (or GPT-2 Conv1D's), the bias split by AbsDot."""
    weight = module.weight.T if isinstance(module, torch.nn.Linear) else module.weight
    out = [p @ weight for p in parts]
    return absdot(out, module.bias) if module.bias is not None else out


def _slope(pre: torch.Tensor, act: Any) -> torch.Tensor:
    """Return θ = act(ζ)/ζ per neuron (Eq. 10)."""
    return act(pre) / pre


def _attention(model: Any, layer: int, block: Any, inputs: Parts, x_in: torch.Tensor, alpha: torch.Tensor) -> tuple[Parts, torch.Tensor]:
    """Return (z[i][k] with the bias split, the real attention output [n, d]) of one block.

    x_in [n, d] is the attention's real input (post-norm: x; pre-norm: its norm), `inputs` its decomposition.
    First block: z_{i⇐k} = Σ_h α^h_ik (x_k W_V^h + b_V^h) W_O^h, then b_O split; later: Σ_h Σ_j α^h_ij
    (x_{j⇐k} W_V^h) W_O^h, then b_V W_O + b_O split.
    """
    kind = model.config.model_type
    heads, n, d = alpha.shape[0], x_in.shape[0], x_in.shape[1]
    if kind == "gpt2":
        w_value, b_value = block.attn.c_attn.weight[:, 2 * d :], block.attn.c_attn.bias[2 * d :]
        w_out, b_out = block.attn.c_proj.weight, block.attn.c_proj.bias
    elif kind == "llama":  # grouped-query: query head h reads key/value head h // group
        proj = block.self_attn.v_proj
        kv_heads = model.config.num_key_value_heads
        d_head, group = proj.weight.shape[0] // kv_heads, heads // kv_heads
        rows = torch.cat([torch.arange((h // group) * d_head, (h // group + 1) * d_head) for h in range(heads)])
        w_value, b_value = proj.weight.T[:, rows], torch.zeros(len(rows), dtype=torch.float64)
        w_out, b_out = block.self_attn.o_proj.weight.T, torch.zeros(d, dtype=torch.float64)
    else:
        w_value, b_value = block.attention.self.value.weight.T, block.attention.self.value.bias
        w_out, b_out = block.attention.output.dense.weight.T, block.attention.output.dense.bias
    d_head = w_value.shape[1] // heads
    head = [slice(h * d_head, (h + 1) * d_head) for h in range(heads)]
    value = x_in @ w_value + b_value
    real = torch.stack([sum(alpha[h, i, j] * value[j, head[h]] @ w_out[head[h]] for h in range(heads) for j in range(n)) for i in range(n)]) + b_out
    z: Parts = []
    for i in range(n):
        if layer == 0:
            terms = [sum(alpha[h, i, k] * value[k, head[h]] @ w_out[head[h]] for h in range(heads)) for k in range(n)]
            bias = b_out
        else:
            terms = [sum(alpha[h, i, j] * (inputs[j][k] @ w_value[:, head[h]]) @ w_out[head[h]] for h in range(heads) for j in range(n))
                     for k in range(n)]
            bias = b_value @ w_out + b_out
        z.append(absdot(terms, bias))
    return z, real


def _mlp(model: Any, block: Any, parts: list[torch.Tensor], real: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Return (the MLP output of one position decomposed, the real MLP output) for the MLP's real input `real`:
    F_k = (θ ⊙ ζ_k) W_2 (b₁, b₂ split); Llama's f(g) ⊙ u: ½(f(g) ⊙ u_k + θ ⊙ g_k ⊙ u)."""
    kind = model.config.model_type
    if kind == "llama":
        mlp = block.mlp
        gate, up = mlp.gate_proj(real), mlp.up_proj(real)
        theta = _slope(gate, mlp.act_fn)
        gates, ups = _affine_parts(parts, mlp.gate_proj), _affine_parts(parts, mlp.up_proj)
        hidden = [0.5 * (mlp.act_fn(gate) * u + theta * g * up) for g, u in zip(gates, ups)]
        return _affine_parts(hidden, mlp.down_proj), mlp.down_proj(mlp.act_fn(gate) * up)
    if kind == "gpt2":
        first, act, second = block.mlp.c_fc, block.mlp.act, block.mlp.c_proj
    else:
        first, act, second = block.intermediate.dense, block.intermediate.intermediate_act_fn, block.output.dense
    pre = first(real)
    theta = _slope(pre, act)
    hidden = [theta * p for p in _affine_parts(parts, first)]
    return _affine_parts(hidden, second), second(act(pre))


def _inputs(model: Any, trace: Any, modules: list[Any], b: int, positions: torch.Tensor) -> list[torch.Tensor]:
    """Return what each of `modules` received in the model's own run, example b's real positions [n, d]: the
    MLPs' real inputs (a float32 RMSNorm, as transformers computes Llama's, rounds a recomputed input apart)."""
    seen: list[torch.Tensor] = []
    handles = [module.register_forward_pre_hook(lambda module, args: seen.append(args[0])) for module in modules]
    try:
        model(input_ids=trace.encoded.input_ids, attention_mask=trace.encoded.attention_mask)
    finally:
        for handle in handles:
            handle.remove()
    return [inputs[b][positions] for inputs in seen]


@torch.no_grad()
def body(model: Any, trace: Any, b: int) -> tuple[Parts, Any]:
    """Return (the last block's output decomposed X[i][k], the model's own run) for example b."""
    stream = run(model, trace, b)
    kind = model.config.model_type
    blocks = model.transformer.h if kind == "gpt2" else model.model.layers if kind == "llama" else getattr(model, "bert", model).encoder.layer
    firsts = [block.mlp.c_fc if kind == "gpt2" else block.mlp.gate_proj if kind == "llama" else block.intermediate.dense
              for block in blocks]
    mlp_inputs = _inputs(model, trace, firsts, b, stream.positions)
    x0 = stream.hidden[0]
    n = x0.shape[0]
    parts: Parts = [[x0[i] if i == k else torch.zeros_like(x0[i]) for k in range(n)] for i in range(n)]
    for layer, block in enumerate(blocks):
        x, alpha = stream.hidden[layer], stream.attentions[layer]
        if kind == "bert":
            z, attn_out = _attention(model, layer, block, parts, x, alpha)
            mid = x + attn_out
            norm1, norm2 = block.attention.output.LayerNorm, block.output.LayerNorm
            y = [_norm_parts([parts[i][k] + z[i][k] for k in range(n)], mid[i], norm1) for i in range(n)]
            h = mlp_inputs[layer]  # norm1(mid), as the model computed it
            new = []
            for i in range(n):
                f, mlp_out = _mlp(model, block, y[i], h[i])
                new.append(_norm_parts([y[i][k] + f[k] for k in range(n)], h[i] + mlp_out, norm2))
        else:
            norm1, norm2 = (block.ln_1, block.ln_2) if kind == "gpt2" else (block.input_layernorm, block.post_attention_layernorm)
            normed = [_norm_parts(parts[j], x[j], norm1) for j in range(n)]
            z, attn_out = _attention(model, layer, block, normed, norm1(x), alpha)
            mid = x + attn_out
            new = []
            for i in range(n):
                m = [parts[i][k] + z[i][k] for k in range(n)]
                f, _ = _mlp(model, block, _norm_parts(m, mid[i], norm2), mlp_inputs[layer][i])
                new.append([m[k] + f[k] for k in range(n)])
        parts = new
    return parts, stream


@torch.no_grad()
def bert_classifier(model: Any, trace: Any, b: int, label: int) -> torch.Tensor:
    """Return DecompX of BertForSequenceClassification's logit[label] per real token [n]: the [CLS] row through
    the pooler (dense, tanh linearised as θ = tanh(z)/z) and the classifier, the biases split by AbsDot."""
    parts, stream = body(model, trace, b)
    pooler = model.bert.pooler
    real = pooler.dense(stream.hidden[-1][0])
    theta = torch.tanh(real) / real
    pooled = [theta * p for p in _affine_parts(parts[0], pooler.dense)]
    return torch.stack([logits[label] for logits in _affine_parts(pooled, model.classifier)])


@torch.no_grad()
def mean_l2_head(model: Any, trace: Any, b: int, head: Any, label: int) -> torch.Tensor:
    """Return DecompX of the default head's logit[label] per real token [n]: the mean over real positions of
    X^L[i][k], divided by the norm of the real mean (the L2 normalisation), then the linear layer."""
    parts, stream = body(model, trace, b)
    n = len(parts)
    mean = stream.hidden[-1].mean(0)
    pooled = [sum(parts[i][k] for i in range(n)) / n / torch.linalg.vector_norm(mean) for k in range(n)]
    return torch.stack([logits[label] for logits in _affine_parts(pooled, head.linear)])


@torch.no_grad()
def language_model(model: Any, trace: Any, b: int, token: int) -> torch.Tensor:
    """Return DecompX of a decoder's next-token logit[token] at the last real position per real token [n]: that
    row through the final norm (its real input read by a hook) and the unembedding."""
    parts, _ = body(model, trace, b)
    final = model.transformer.ln_f if model.config.model_type == "gpt2" else model.model.norm
    seen: list[torch.Tensor] = []
    handle = final.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        model(input_ids=trace.encoded.input_ids, attention_mask=trace.encoded.attention_mask, use_cache=False)
    finally:
        handle.remove()
    last = int(torch.nonzero(trace.encoded.attention_mask[b]).flatten()[-1])
    normed = _norm_parts(parts[-1], seen[0][b, last], final)
    return torch.stack([p @ model.lm_head.weight[token] for p in normed])
