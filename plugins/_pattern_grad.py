"""Every attention pattern A of one forward pass and ∂score/∂A, through the grad-enabled capture, and their
product ∇A ⊙ A, per layer and head (float64, signed): Chefer, Gur & Wolf 2021, "Generic Attention-model
Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers" (ICCV), eq. 5 before the head mean;
summed over query and key it is the first-order change of the score when a head's pattern is scaled (Michel
et al. 2019, eq. 2, without the absolute value). Attention × gradient and gradient-weighted rollout read it.

`ctx.capture` keeps the patterns in the autograd graph (under SDPA they are recomputed from the exact query
and key and joined to the kernel's output, so the gradient is the eager statement's); one backward pass of
Σ_rows score gives every row's own ∂score/∂A, because a row's score depends on that row alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from jaxtyping import Float

from interpret.analysis import Check, RunContext
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.trace import Trace

PATTERNS = "*attn.hook_pattern"


@dataclass(frozen=True)
class PatternGradients:
    """∇A ⊙ A per stack, float64, zero at padded queries and keys (what both readers use: neither A nor ∇A
    alone is kept, so a batch holds one float64 copy of its patterns' size, not three).

    main: ∇A ⊙ A [batch, layer, head, query, key] of the main stack (an encoder-decoder's encoder);
    decoder / cross: the decoder's self-attention and cross-attention (query decoder, key encoder), or None.
    image: a text-image dual encoder's vision stack (`vision.blocks.{i}`, over the image side's positions), or None.
    """

    main: np.ndarray
    decoder: np.ndarray | None = None
    cross: np.ndarray | None = None
    image: np.ndarray | None = None
    score_error: float = 0.0  # largest |score with the capture − score without|: the capture is transparent

    def weighted(self, stack: Literal["main", "decoder", "cross", "image"]) -> Float[np.ndarray, "batch layer head q k"] | None:
        """Return ∇A ⊙ A [batch, layer, head, query, key] of `stack` (module docstring), or None without it."""
        return getattr(self, stack)

    def score_check(self) -> Check:
        """Return the check that differentiating the captured patterns left the decision's score unchanged."""
        return Check(self.score_error, 1e-5, "largest |score under the gradient capture − plain score| (relative to the largest |score|, at least 1)")


def pattern_gradients(
    trace: Trace, ctx: RunContext, analyzer: str, rows: torch.Tensor | None = None, step: int | None = None
) -> PatternGradients:
    """Return the patterns of every captured layer and ∂score/∂pattern (module docstring) of the examples `rows`
    (default: all, in order) for target step `step` (None: the whole target's score, every step summed)."""
    rows = torch.arange(trace.encoded.batch) if rows is None else rows
    cap = ctx.capture(trace.encoded, [PATTERNS], examples=rows, step=step)
    names = list(cap.tensors)
    if not names:
        raise AnalyzerError(f"{analyzer}: the model exposes no attention pattern to differentiate.")
    grads = torch.autograd.grad(cap.score.sum(), [cap[name] for name in names], allow_unused=True)
    with torch.no_grad():
        plain = ctx.score(trace.encoded, examples=rows, step=step)
    score_error = float((cap.score.detach() - plain).abs().max() / max(1.0, float(plain.abs().max())))
    pairs = {name: (cap[name].detach(), grad) for name, grad in zip(names, grads)}  # as captured: float64 once stacked
    main_mask = to_numpy(trace.encoded.attention_mask).astype(bool)[to_numpy(rows)]
    if trace.meta.kind == "encoder-decoder":
        decoder = trace.encoded.decoder
        if decoder is None:
            raise AnalyzerError(f"{analyzer} of an encoder-decoder needs its decoder inputs; give decoder texts.")
        dec_mask = to_numpy(decoder.attention_mask).astype(bool)[to_numpy(rows)]
        return PatternGradients(
            main=_stack(pairs, "encoder.", "attn.hook_pattern", main_mask, main_mask),
            decoder=_stack(pairs, "decoder.", "attn.hook_pattern", dec_mask, dec_mask),
            cross=_stack(pairs, "decoder.", "cross_attn.hook_pattern", dec_mask, main_mask),
            score_error=score_error,
        )
    image = trace.encoded.image
    vision = None
    if image is not None and any(name.startswith("vision.blocks.") for name in pairs):
        image_mask = to_numpy(image.attention_mask).astype(bool)[to_numpy(rows)]
        vision = _stack(pairs, "vision.", "attn.hook_pattern", image_mask, image_mask)
    return PatternGradients(main=_stack(pairs, "", "attn.hook_pattern", main_mask, main_mask), image=vision,
                            score_error=score_error)


def _stack(
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor | None]], prefix: str, suffix: str, queries: np.ndarray,
    keys: np.ndarray,
) -> Float[np.ndarray, "batch layer head query key"]:
    """Return ∇A ⊙ A of `{prefix}blocks.{i}.{suffix}` stacked over layers in float64, zero at padded queries and
    keys (a pattern the score does not reach has ∇A = 0). Each layer's A and ∇A are converted to float64 and
    multiplied into the stack, which is then masked in place: one float64 array in all."""
    chosen = sorted(
        (name for name in pairs if name.startswith(f"{prefix}blocks.") and name.endswith(f".{suffix}")),
        key=lambda name: int(name[len(prefix) + len("blocks."):].split(".")[0]),
    )
    if not chosen:
        raise AnalyzerError(f"no {prefix}blocks.{{i}}.{suffix} pattern was captured from this model.")
    first = pairs[chosen[0]][0]
    weighted = np.empty((first.shape[0], len(chosen), *first.shape[1:]))
    for index, name in enumerate(chosen):
        layer, layer_grad = pairs[name]
        out = weighted[:, index]
        out[...] = _host(layer)
        out *= 0.0 if layer_grad is None else _host(layer_grad)  # read as float64: exact products
    weighted *= (queries[:, :, None] & keys[:, None, :])[:, None, None]  # [batch, 1, 1, query, key]
    return weighted


def _host(tensor: torch.Tensor) -> np.ndarray:
    """Return `tensor` on the host in a dtype NumPy holds exactly: float32 and float64 as they are, half
    precision (bfloat16 has no NumPy dtype) widened to float32."""
    return to_numpy(tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float())
