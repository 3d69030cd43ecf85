"""Plain PyTorch statements of the decomposition papers' formulas, read straight from tiny Hugging Face
BERT and GPT-2 modules (no interpret code): the independent reference the decomposition analyzers are
checked against.

Every function works on one example's real positions (n) in float64; `Stream` holds what the model computed
(hidden states and attention probabilities from `output_hidden_states` / `output_attentions`, eager).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import transformers
from hf_tiny import tiny_config

TEXTS = ["the cat sat on the mat !", "a dog saw red"]  # the second is padded


def bert_classifier() -> Any:
    """Return a tiny BERT sequence classifier ([CLS]-pooled) in float64, eager attention, eval mode."""
    torch.manual_seed(0)
    config = tiny_config("bert")
    config._attn_implementation = "eager"
    config.num_labels = 2
    return transformers.BertForSequenceClassification(config).double().eval()


def gpt2_lm() -> Any:
    """Return a tiny GPT-2 language model in float64, eager attention, eval mode."""
    torch.manual_seed(0)
    config = tiny_config("gpt2")
    config._attn_implementation = "eager"
    return transformers.GPT2LMHeadModel(config).double().eval()


@dataclass
class Stream:
    """One example's run: inputs of every layer x[l] [n, d_model] and attention α[l] [head, n, n]."""

    hidden: list[torch.Tensor]
    attentions: list[torch.Tensor]
    positions: torch.Tensor


def run(model: Any, trace: Any, b: int) -> Stream:
    """Return example `b` of the trace's inputs run through `model` directly (its real positions only)."""
    encoded = trace.encoded
    with torch.no_grad():
        out = model(input_ids=encoded.input_ids, attention_mask=encoded.attention_mask, output_hidden_states=True,
                    output_attentions=True, **({"use_cache": False} if "gpt2" in model.config.model_type else {}))
    real = torch.nonzero(encoded.attention_mask[b]).flatten()
    hidden = [h[b][real] for h in out.hidden_states]
    attentions = [a[b][:, real][:, :, real] for a in out.attentions]
    return Stream(hidden, attentions, real)


@torch.no_grad()
def transformed(model: Any, stream: Stream, layer: int) -> torch.Tensor:
    """Return f^h(x_j) = (W_V^h x_j + b_V^h) W_O^h [head, n, d_model] (Kobayashi et al. 2020, §3: f(x) = (x W_V + b_V) W_O)."""
    config = model.config
    heads = config.num_attention_heads if hasattr(config, "num_attention_heads") else config.n_head
    x = stream.hidden[layer]
    if config.model_type == "bert":
        block = model.bert.encoder.layer[layer]
        value = block.attention.self.value(x)
        w_out = block.attention.output.dense.weight.T  # [in, out]
    elif config.model_type == "llama":  # grouped-query: query head h reads key/value head h // (heads / kv_heads)
        block = model.model.layers[layer]
        kv = block.self_attn.v_proj(block.input_layernorm(x))
        d_head = kv.shape[-1] // config.num_key_value_heads
        group = heads // config.num_key_value_heads
        value = torch.cat([kv[:, (h // group) * d_head : (h // group + 1) * d_head] for h in range(heads)], dim=-1)
        w_out = block.self_attn.o_proj.weight.T
    else:
        block = model.transformer.h[layer]
        d_model = x.shape[-1]
        value = block.attn.c_attn(block.ln_1(x))[:, 2 * d_model :]
        w_out = block.attn.c_proj.weight  # Conv1D: [in, out]
    d_head = value.shape[-1] // heads
    return torch.stack([value[:, h * d_head : (h + 1) * d_head] @ w_out[h * d_head : (h + 1) * d_head] for h in range(heads)])


@torch.no_grad()
def norm_based(model: Any, stream: Stream, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (‖α^h_ij f^h(x_j)‖ [head, n, n], ‖Σ_h α^h_ij f^h(x_j)‖ [n, n])."""
    f = transformed(model, stream, layer)
    alpha = stream.attentions[layer]
    n = alpha.shape[-1]
    per_head = torch.zeros(alpha.shape, dtype=torch.float64)
    summed = torch.zeros((n, n), dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            vectors = [alpha[h, i, j] * f[h, j] for h in range(alpha.shape[0])]
            for h, vector in enumerate(vectors):
                per_head[h, i, j] = torch.linalg.vector_norm(vector)
            summed[i, j] = torch.linalg.vector_norm(sum(vectors))
    return per_head, summed


def _layer_norm(x: torch.Tensor, norm: Any) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


def _linear_norm(vector: torch.Tensor, norm: Any, pre: torch.Tensor) -> torch.Tensor:
    """Return γ ⊙ (vector − mean(vector)) / sqrt(var(pre) + ε): the norm's linear part with pre's deviation; for
    an RMSNorm (Llama's, which has `variance_epsilon`) γ ⊙ vector / sqrt(mean(pre²) + ε)."""
    if hasattr(norm, "variance_epsilon"):
        return norm.weight * vector / torch.sqrt(pre.pow(2).mean() + norm.variance_epsilon)
    return norm.weight * (vector - vector.mean()) / torch.sqrt(pre.var(unbiased=False) + norm.eps)


@torch.no_grad()
def split(model: Any, stream: Stream, layer: int) -> tuple[list[list[torch.Tensor]], list[torch.Tensor], Any]:
    """Return (T[i][j] [d_model], the block's real attention output y[i], the block) for one layer.

    BERT (post-norm): T_i(x_j) = γ₁ ⊙ (y_ij − mean) / s₁(x_i + attn_i), y_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i, and
    y_i = LN₁(x_i + attn_i); GPT-2 (pre-norm): T_i(x_j) = y_ij and y_i = x_i + attn_i (Ferrando et al. 2022).
    """
    f = transformed(model, stream, layer)
    alpha = stream.attentions[layer]
    x = stream.hidden[layer]
    n = x.shape[0]
    if model.config.model_type == "bert":
        block = model.bert.encoder.layer[layer]
        out_bias, norm = block.attention.output.dense.bias, block.attention.output.LayerNorm
    elif model.config.model_type == "llama":
        block = model.model.layers[layer]
        out_bias, norm = torch.zeros(x.shape[-1], dtype=torch.float64), None
    else:
        block = model.transformer.h[layer]
        out_bias, norm = block.attn.c_proj.bias, None
    parts = [[sum(alpha[h, i, j] * f[h, j] for h in range(alpha.shape[0])) + (x[i] if i == j else 0.0) for j in range(n)]
             for i in range(n)]
    pre = [sum(parts[i]) + out_bias for i in range(n)]
    if norm is None:
        return parts, pre, block
    transformed_parts = [[_linear_norm(parts[i][j], norm, pre[i]) for j in range(n)] for i in range(n)]
    return transformed_parts, [_layer_norm(pre[i], norm) for i in range(n)], block


def _rows_over_sum(matrix: torch.Tensor) -> torch.Tensor:
    return matrix / matrix.sum(-1, keepdim=True)


@torch.no_grad()
def alti_layer(model: Any, stream: Stream, layer: int) -> torch.Tensor:
    """Return ALTI's c_ij = max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁), rows over their sums [n, n] (Ferrando et al. 2022)."""
    parts, resultant, _ = split(model, stream, layer)
    n = len(parts)
    matrix = torch.zeros((n, n), dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            closeness = resultant[i].abs().sum() - (resultant[i] - parts[i][j]).abs().sum()
            matrix[i, j] = max(0.0, float(closeness))
    return _rows_over_sum(matrix)


@torch.no_grad()
def globenc_layer(model: Any, stream: Stream, layer: int) -> torch.Tensor:
    """Return GlobEnc's N_Enc ‖γ₂ ⊙ (T_i(x_j) − mean) / s₂(z_i + FFN(z_i))‖, rows over sums [n, n] (N_Enc);
    GPT-2 (pre-norm, no norm on the residual path): ‖T_i(x_j)‖."""
    parts, resultant, block = split(model, stream, layer)
    n = len(parts)
    matrix = torch.zeros((n, n), dtype=torch.float64)
    for i in range(n):
        if model.config.model_type == "bert":
            z = resultant[i]
            closing_input = z + block.output.dense(block.intermediate(z[None]))[0]
        for j in range(n):
            vector = parts[i][j]
            if model.config.model_type == "bert":
                vector = _linear_norm(vector, block.output.LayerNorm, closing_input)
            matrix[i, j] = torch.linalg.vector_norm(vector)
    return _rows_over_sum(matrix)


def rolled(matrices: list[torch.Tensor]) -> torch.Tensor:
    """Return C_{L−1} · … · C_0."""
    product = matrices[0]
    for matrix in matrices[1:]:
        product = matrix @ product
    return product


@torch.no_grad()
def alti_logit(model: Any, trace: Any, b: int, token: int, contrast: int | None = None) -> tuple[torch.Tensor, float]:
    """Return (ALTI-Logit of every real input token [n], the model's logit (difference) at the last real token).

    Δ^l_j = γ_f ⊙ (a_j − mean a_j)/s_f(x^L_p) · (U_w − U_c), a_j = Σ_h α^{h,l}_pj f^{h,l}(x^l_j), p the last real
    token; ALTI-Logit_k = Σ_l Σ_j Δ^l_j R^l[j, k], R^l the ALTI rollout of the layers below l (Ferrando et al. 2023).
    """
    stream = run(model, trace, b)
    seen: list[torch.Tensor] = []
    ln_f = model.model.norm if model.config.model_type == "llama" else model.transformer.ln_f
    handle = ln_f.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        out = model(input_ids=trace.encoded.input_ids, attention_mask=trace.encoded.attention_mask, use_cache=False)
    finally:
        handle.remove()
    real = stream.positions
    p = int(real[-1])
    x_final = seen[0][b, p]
    direction = model.lm_head.weight[token] - (model.lm_head.weight[contrast] if contrast is not None else 0.0)
    n = len(real)
    relevance = torch.zeros(n, dtype=torch.float64)
    reach = torch.eye(n, dtype=torch.float64)
    for layer in range(model.config.num_hidden_layers):
        f = transformed(model, stream, layer)
        alpha = stream.attentions[layer]
        delta = torch.zeros(n, dtype=torch.float64)
        for j in range(n):
            update = sum(alpha[h, n - 1, j] * f[h, j] for h in range(alpha.shape[0]))
            delta[j] = _linear_norm(update, ln_f, x_final) @ direction
        relevance += delta @ reach
        reach = alti_layer(model, stream, layer) @ reach
    logit = out.logits[b, p, token] - (out.logits[b, p, contrast] if contrast is not None else 0.0)
    return relevance, float(logit)


@torch.no_grad()
def block_output(model: Any, x: torch.Tensor, layer: int, zeroed: int | None) -> torch.Tensor:
    """Return block `layer`'s output [n, d_model] on its input x [n, d_model] (real positions only), with the
    value vectors of token `zeroed` set to zero in every head (None: nothing zeroed), written out by hand."""
    config = model.config
    heads = config.num_attention_heads
    n, d_model = x.shape
    d_head = d_model // heads
    if config.model_type == "bert":
        block = model.bert.encoder.layer[layer]
        attn = block.attention.self
        q, k, v = attn.query(x), attn.key(x), attn.value(x)
    else:
        block = model.transformer.h[layer]
        q, k, v = block.attn.c_attn(block.ln_1(x)).split(d_model, dim=-1)
    q, k, v = (t.view(n, heads, d_head).transpose(0, 1) for t in (q, k, v))  # [head, n, d_head]
    if zeroed is not None:
        v = v.clone()
        v[:, zeroed] = 0.0
    scores = q @ k.transpose(-1, -2) / d_head**0.5
    if config.model_type == "gpt2":
        scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    context = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(n, d_model)
    if config.model_type == "bert":
        h = block.attention.output.LayerNorm(block.attention.output.dense(context) + x)
        return block.output.LayerNorm(block.output.dense(block.intermediate(h)) + h)
    h = x + block.attn.c_proj(context)
    return h + block.mlp(block.ln_2(h))


@torch.no_grad()
def value_zeroing_layer(model: Any, stream: Stream, layer: int) -> torch.Tensor:
    """Return C_ij = 1 − cos(x̃^{¬j}_i, x̃_i), rows over their sums [n, n] (Mohebbi et al. 2023)."""
    x = stream.hidden[layer]
    original = block_output(model, x, layer, None)
    n = x.shape[0]
    matrix = torch.zeros((n, n), dtype=torch.float64)
    for j in range(n):
        changed = block_output(model, x, layer, j)
        for i in range(n):
            matrix[i, j] = 1.0 - torch.nn.functional.cosine_similarity(changed[i], original[i], dim=0)
    return _rows_over_sum(matrix.clamp(min=0.0))
