"""Attention × gradient and gradient-weighted rollout as pure NumPy functions (float64, any leading `*batch`).

Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability for Interpreting Bi-Modal and
Encoder-Decoder Transformers" (ICCV):
    eq. 5   Ā = E_h[(∇A ⊙ A)⁺]          the gradient-weighted attention of one layer, heads averaged after
                                         keeping the positive part (∇A = ∂score/∂A of the explained score)
    eq. 6   R ← R + Ā · R                each self-attention layer, from R = I
    eqs. 8–11                            encoder-decoder: the cross-attention rules, implemented once in
                                         `rollout_math.rollout_encoder_decoder` (called here with (∇A ⊙ A)⁺)
Attention × gradient is the elementwise product ∇A ⊙ A itself, per layer and head; summed over query and
key it is the first-order change of the score when a head's pattern is scaled (Michel et al. 2019, eq. 2,
without the absolute value).

These functions hold the formulas only; the analyzers (`attention_x_gradient.py`,
`gradient_weighted_rollout.py`) obtain A and ∇A through `ctx.capture`. Streaming versions elsewhere test
against them.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from interpret.plugins import rollout_math


def attention_times_gradient(
    pattern: Float[np.ndarray, "*batch layer head query key"],
    grad: Float[np.ndarray, "*batch layer head query key"],
) -> Float[np.ndarray, "*batch layer head query key"]:
    """Return ∇A ⊙ A [*batch, layer, head, query, key] in float64 (signed)."""
    return np.asarray(pattern, dtype=np.float64) * np.asarray(grad, dtype=np.float64)


def gradient_weighted_rollout(
    weighted: Float[np.ndarray, "*batch layer head query key"],
) -> Float[np.ndarray, "*batch query key"]:
    """Return R [*batch, query, key] after every layer: R = I, then R ← R + Ā_l · R (eqs. 5–6)."""
    fused = np.clip(weighted, 0.0, None).mean(axis=-3)  # Ā_l = E_h[(∇A ⊙ A)⁺] [*batch, layer, query, key] (eq. 5)
    n = fused.shape[-1]
    relevance = np.broadcast_to(np.eye(n), fused.shape[:-3] + (n, n)).copy()
    for layer in range(fused.shape[-3]):
        relevance = relevance + fused[..., layer, :, :] @ relevance
    return relevance


def gradient_weighted_rollout_encoder_decoder(
    encoder_weighted: Float[np.ndarray, "*batch enc_layer head enc enc"],
    decoder_weighted: Float[np.ndarray, "*batch dec_layer head dec dec"],
    cross_weighted: Float[np.ndarray, "*batch dec_layer head dec enc"],
) -> tuple[Float[np.ndarray, "*batch enc enc"], Float[np.ndarray, "*batch dec dec"], Float[np.ndarray, "*batch dec enc"]]:
    """Return (R_ee, R_dd, R_de) of Chefer et al. 2021's encoder-decoder rules with Ā = E_h[(∇A ⊙ A)⁺].

    The rules (R_ee ← R_ee + Ā_ee R_ee; R_dd ← R_dd + Ā_dd R_dd, R_de ← R_de + Ā_dd R_de; R_de ← R_de +
    R̄_ddᵀ Ā_de R̄_ee) are `rollout_math.rollout_encoder_decoder`, whose head mean of the positive parts
    given here is exactly eq. 5's Ā.
    """
    return rollout_math.rollout_encoder_decoder(
        np.clip(encoder_weighted, 0.0, None), np.clip(decoder_weighted, 0.0, None), np.clip(cross_weighted, 0.0, None)
    )
