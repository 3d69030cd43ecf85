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
from hf_tiny import tiny_config, word_tokenizer

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
    """Return f^h(x_j) = (W_V^h x_j + b_V^h) W_O^h [head, n, d_model] (Kobayashi et al. 2020, eq. 4)."""
    config = model.config
    heads = config.num_attention_heads if hasattr(config, "num_attention_heads") else config.n_head
    x = stream.hidden[layer]
    if config.model_type == "bert":
        block = model.bert.encoder.layer[layer]
        value = block.attention.self.value(x)
        w_out = block.attention.output.dense.weight.T  # [in, out]
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
