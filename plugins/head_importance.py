"""Head importance (Michel, Levy and Neubig 2019, eq. 2) as an analyzer: per example, |∂L/∂ξ_h| of the loss
of that example's decision with respect to the gate ξ_h of every head, gates held at 1.

The loss is −log p(target) of each example's target (`ctx.targets`): against the gold label when the run
explains gold labels (`audit --target gold`), against the model's own prediction otherwise (label-free), and
for a language model the next-token loss of its target tokens. Each example has gates of its own, so the
numbers do not depend on the batch (see `interpret.heads.importance` for what the bertology script does).

Arrays (batch first):
    importance     [batch, layer, head]  |∂L_b/∂ξ_l,h| / tokens_b (tokens_b: real positions of example b).
    tokens         [batch]               real positions per example: the head map's weight, so the audit's
                                         Σ_b tokens_b·importance_b / Σ_b tokens_b is the paper's dataset
                                         importance Σ_x |∂L(x)/∂ξ| / N_tokens.
    importance_all [batch, layer, head]  that dataset importance over this batch (the same map in every row,
                                         as the contract puts the batch first; the audit reads `importance`).
    scores         [batch, layer, head]  importance_all after per-layer ℓ2 and global min–max normalisation
                                         (each optional; the same map in every row).
    entropy        [batch, layer, head]  attention entropy of each head (nats), shown beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from interpret.analysis import AnalyzerResult, Check, HeadMap, NamedArray, RunContext, View
from interpret.analysis.params import as_dict
from interpret.arrays import to_numpy
from interpret.heads.importance import batch_gradients, normalized
from interpret.plugins.attention_entropy import attention_entropy
from interpret.trace import Trace


@dataclass(frozen=True)
class HeadImportanceParams:
    """Parameters of head importance."""

    by_layer: bool = field(default=True, metadata={"help": "divide each layer's scores by their l2 norm (paper)"})
    global_min_max: bool = field(default=True, metadata={"help": "scale all scores to [0, 1] (bertology)"})
    batch_size: int = field(default=32, metadata={"help": "examples per backward pass (does not change the result)"})
    stack: Literal["auto"] = field(default="auto", metadata={"help": "gated stack: the only one, or the encoder"})

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size!r} must be an integer >= 1.")


class HeadImportance:
    """|∂loss/∂gate| of every head, per example (Michel et al. 2019)."""

    name = "head_importance"
    summary = "Head importance |dloss/dgate| per example (Michel et al. 2019), normalised map and entropy beside it."
    version = "1.1"  # 1.1: entropy from the chunked float64 statistics (last digits may differ)
    requires = ("*attn.hook_pattern",)
    needs_model = True
    provides = ("head_map",)
    Params = HeadImportanceParams

    def run(self, trace: Trace, params: HeadImportanceParams, ctx: RunContext) -> AnalyzerResult:
        """Return the per-example importance [batch, layer, head] and the batch's normalised map."""
        encoded = trace.encoded
        n_layers, n_heads = ctx.gate_shape
        mask = torch.ones(n_layers, n_heads)
        grads = []
        for start in range(0, encoded.batch, params.batch_size):
            rows = torch.arange(start, min(start + params.batch_size, encoded.batch))

            def loss_of(gates: torch.Tensor, rows: torch.Tensor = rows) -> torch.Tensor:
                return -ctx.score(encoded, examples=rows, gates=gates, output="logprob", contrast=False)

            grads.append(batch_gradients(loss_of, len(rows), mask).detach().abs().to("cpu", torch.float64))
        per_example = torch.cat(grads)  # [batch, layer, head]
        tokens = encoded.attention_mask.sum(-1).to("cpu", torch.float64)  # [batch]
        total = per_example.sum(0) / tokens.sum()
        scores = normalized(total, params.by_layer, params.global_min_max)
        prefix = "encoder." if trace.meta.kind == "encoder-decoder" else ""
        pattern = trace.stack("attn.hook_pattern", prefix).detach().to(torch.float64)
        entropy = attention_entropy(pattern, encoded.attention_mask.to(pattern.device).bool())
        arrays = {
            "importance": NamedArray(to_numpy(per_example / tokens[:, None, None].clamp(min=1)), ("batch", "layer", "head")),
            "tokens": NamedArray(to_numpy(tokens), ("batch",)),
            "importance_all": NamedArray(_per_row(to_numpy(total), encoded.batch), ("batch", "layer", "head")),
            "scores": NamedArray(_per_row(to_numpy(scores), encoded.batch), ("batch", "layer", "head")),
            "entropy": NamedArray(to_numpy(entropy), ("batch", "layer", "head")),
        }
        recombined = np.einsum("b,blh->lh", to_numpy(tokens), arrays["importance"].values) / float(tokens.sum())
        checks = {
            "weighted_mean_error": Check(
                float(np.abs(recombined - to_numpy(total)).max()), 1e-9,
                "|Σ_b tokens_b·importance_b / Σ tokens − importance_all| (the audit's aggregate is the paper's)",
            )
        }
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params), arrays=arrays, checks=checks,
            views=(
                View("table", "scores", "Head importance, normalised (layer x head)"),
                View("table", "entropy", "Attention entropy by layer and head (nats), beside the importance"),
            ),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            head_map=HeadMap("importance", weight="tokens"),
        )


def _per_row(head_map: np.ndarray, batch: int) -> np.ndarray:
    """Return the batch-level [layer, head] map repeated for each of `batch` rows: [batch, layer, head]."""
    return np.repeat(head_map[None], batch, axis=0)
