"""Gradient-weighted attention rollout (Chefer, Gur & Wolf 2021, ICCV, eqs. 5–6 and 8–11), full or streamed.

Ā = E_h[(∇A ⊙ A)⁺] per layer (eq. 5), ∇A = ∂score/∂A of each example's own target score; R = I, then
R ← R + Ā · R per self-attention layer (eq. 6; `rollout`). Encoder-decoder: the paper's cross-attention rules
(eqs. 8–11: R_ee ← R_ee + Ā_ee R_ee; R_dd ← R_dd + Ā_dd R_dd, R_de ← R_de + Ā_dd R_de; R_de ← R_de +
R̄_ddᵀ Ā_de R̄_ee), implemented once in `rollout_math.rollout_encoder_decoder`, whose head mean of the positive
parts (∇A ⊙ A)⁺ given here is exactly eq. 5's Ā.

Full arrays (batch first; padding is zero):
    rollout [batch, query, key]  R of the main stack (an encoder-decoder: `cross` [batch, dec, enc], R_de)
    readout [batch, key]         w · R, w the decision's pooling (its rows and weights); for an encoder-decoder
                                 the R_de rows of the decoder positions the decision reads
    image_rollout [batch, image_query, image_key], image_readout [batch, image_key]
                                 a text-image dual encoder's vision stack (`vision.blocks.{i}`): R by the same
                                 rules, read from the rows its decision reads of the image (its class token):
                                 Chefer et al.'s CLIP relevance over the patches
    per_step [batch, query, key] for a target of several tokens (a continuation, --generate N): per token, R of
                                 that token's own score, read at the row whose logits score it (`_per_step`)
Streamed (one autograd pass, `interpret.streaming.capture.gradient_pass`; the row w carried down the layers,
v ← v + v·Ā_l, patterns rebuilt in blocks, `interpret.streaming.readout`): readout [batch, key] alone, in
O(n·d) memory per layer, equal to the full readout (tests, 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from jaxtyping import Float

from interpret.analysis import AnalyzerResult, NamedArray, Readout, RunContext, View
from interpret.analysis.params import as_dict
from interpret.arrays import to_numpy
from interpret.plugins import rollout_math
from interpret.plugins._attention import READOUT_HELP, ReadoutRows, scatter_row
from interpret.plugins._pattern_grad import PatternGradients, pattern_gradients
from interpret.plugins._per_step import Parts, per_step
from interpret.plugins._streaming import (
    BLOCK_HELP, OFFLOAD_HELP, RECOMPUTE_HELP, check_streamed, example_weights,
    gradient_layers, streamed,
)
from interpret.streaming.pattern import StreamedLayer
from interpret.streaming.readout import grad_rollout_layer
from interpret.trace import Trace


@dataclass(frozen=True)
class GradientRolloutParams:
    """Gradient-weighted rollout uses the paper's rule as stated; its parameters say how it streams."""

    readout: ReadoutRows = streamed("auto", f"streamed: {READOUT_HELP}")
    block_mib: int = streamed(64, BLOCK_HELP)
    offload: Literal["auto", "on", "off"] = streamed("auto", OFFLOAD_HELP)
    recompute: Literal["auto", "on", "off"] = streamed("auto", RECOMPUTE_HELP)

    def __post_init__(self) -> None:
        check_streamed(self)


class GradientWeightedRollout:
    """Chefer et al. 2021's relevance propagation through gradient-weighted attention."""

    name = "gradient_weighted_rollout"
    summary = "Gradient-weighted rollout (Chefer et al. 2021): R ← R + E_h[(∇A ⊙ A)⁺]·R, class-specific."
    version = "1.0"
    requires = ()
    streamed_requires = ()
    needs_model = True
    provides = ("readout",)
    Params = GradientRolloutParams

    def run(self, trace: Trace, params: GradientRolloutParams, ctx: RunContext) -> AnalyzerResult:
        """Return the relevance map and the decision's readout, or streamed the readout (module docstring)."""
        arrays, checks, views = (self._streamed if ctx.strategy == "streamed" else self._full)(trace, params, ctx)
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params=as_dict(params, ctx.strategy), arrays=arrays,
            checks=checks, views=views, tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=False),
        )

    def _full(self, trace: Trace, params: GradientRolloutParams, ctx: RunContext) -> Parts:
        grads = pattern_gradients(trace, ctx, self.name)
        relevance = _relevance(trace, grads, torch.arange(trace.encoded.batch))
        readout = np.stack([ctx.targets[b].readout_weights(relevance.shape[1]) @ relevance[b] for b in range(len(relevance))])
        name, title = ("cross", "Decoder → encoder relevance (gradient-weighted, Chefer et al. 2021)") \
            if grads.cross is not None else ("rollout", "Gradient-weighted rollout [query × key]")

        def step_readout(rows: torch.Tensor, step: int) -> np.ndarray:
            # the relevance of step `step`'s own score, read at the one row whose logits score that token
            mine = _relevance(trace, pattern_gradients(trace, ctx, self.name, rows, step), rows)
            return np.stack([mine[i, ctx.targets[b].positions[step]] for i, b in enumerate(rows.tolist())])

        steps, _, step_views = per_step(trace, ctx, readout, step_readout, "Gradient-weighted rollout", linear=False)
        arrays = {name: NamedArray(relevance, ("batch", "query", "key")), "readout": NamedArray(readout, ("batch", "key"))}
        views = (View("heatmap", name, title), View("token_strip", "readout", "Gradient-weighted rollout from the decision's rows"))
        image_arrays, image_views = _image_side(trace, grads, ctx)
        return {**arrays, **image_arrays, **steps}, {"capture_score_error": grads.score_check()}, (*views, *image_views, *step_views)

    def _streamed(self, trace: Trace, params: GradientRolloutParams, ctx: RunContext) -> Parts:
        examples = example_weights(trace, ctx.targets, params.readout)
        vectors = [torch.as_tensor(weights, dtype=torch.float64) for _, weights in examples]
        device = ctx.device

        def step(index: int, b: int, layer: StreamedLayer) -> float:  # from the last layer down (not reached: Ā = 0)
            vectors[b], error = grad_rollout_layer(layer, vectors[b], block_bytes=params.block_mib << 20, device=device)
            return error

        _, check = gradient_layers(trace, ctx, self.name, params, step)
        readout = np.zeros((trace.encoded.batch, trace.encoded.pos))
        for b, (positions, _) in enumerate(examples):
            readout[b] = scatter_row(to_numpy(vectors[b]), positions, trace.encoded.pos)
        view = View("token_strip", "readout", "Gradient-weighted rollout from the decision's rows (streamed)")
        return {"readout": NamedArray(readout, ("batch", "key"))}, {"output_error": check}, (view,)


def rollout(weighted: Float[np.ndarray, "*batch layer head query key"]) -> Float[np.ndarray, "*batch query key"]:
    """Return R [*batch, query, key] after every layer of ∇A ⊙ A `weighted` (float64): R = I, then
    R ← R + Ā_l · R (eqs. 5–6)."""
    fused = np.clip(weighted, 0.0, None).mean(axis=-3)  # Ā_l = E_h[(∇A ⊙ A)⁺] [*batch, layer, query, key] (eq. 5)
    n = fused.shape[-1]
    relevance = np.broadcast_to(np.eye(n), fused.shape[:-3] + (n, n)).copy()
    for layer in range(fused.shape[-3]):
        relevance = relevance + fused[..., layer, :, :] @ relevance
    return relevance


def _image_side(trace: Trace, grads: PatternGradients, ctx: RunContext) -> tuple[dict[str, NamedArray], tuple[View, ...]]:
    """Return a text-image dual encoder's relevance over its image: R of the vision stack (eqs. 5–6, as for the
    text) and its readout from the rows the decision reads of the image (`Target.image_pooling`: the vision
    tower's class token), Chefer et al. 2021's CLIP relevance; nothing without an image side, or where the tower
    pools with an attention head (no row stands for what the decision reads)."""
    image = trace.encoded.image
    weighted = grads.weighted("image")
    if image is None or weighted is None or any(not target.image_pooling for target in ctx.targets):
        return {}, ()
    real = to_numpy(image.attention_mask).astype(np.float64)
    relevance = rollout(weighted) * real[:, :, None] * real[:, None, :]  # [batch, image_query, image_key]
    readout = np.stack([ctx.targets[b].image_weights(relevance.shape[1]) @ relevance[b] for b in range(len(relevance))])
    arrays = {"image_rollout": NamedArray(relevance, ("batch", "image_query", "image_key")),
              "image_readout": NamedArray(readout, ("batch", "image_key"))}
    return arrays, (View("token_strip", "image_readout", "Gradient-weighted rollout over the image, from its class token"),)


def _relevance(trace: Trace, grads: PatternGradients, rows: torch.Tensor) -> Float[np.ndarray, "rows query key"]:
    """Return R [rows, query, key] of the examples `rows` (the cross relevance R_de of an encoder-decoder), zero
    at padded queries and keys."""
    decoder = grads.cross is not None  # an encoder-decoder (the decoder's stacks come together)
    if decoder:
        positive = (np.clip(grads.weighted(stack), 0.0, None) for stack in ("main", "decoder", "cross"))
        _, _, relevance = rollout_math.rollout_encoder_decoder(*positive)
    else:
        relevance = rollout(grads.weighted("main"))
    side = trace.encoded.decoder if decoder and trace.encoded.decoder is not None else trace.encoded
    queries, keys = (to_numpy(encoded.attention_mask).astype(np.float64)[to_numpy(rows)] for encoded in (side, trace.encoded))
    return relevance * queries[:, :, None] * keys[:, None, :]
