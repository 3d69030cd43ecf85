"""Attention rollout as pure NumPy functions (Abnar & Zuidema 2020; Chefer et al. 2021 for encoder-decoder).

Everything is computed in float64 and accepts any number of leading batch axes (`*batch`), so a pattern
[batch, layer, head, query, key] and a single example's [layer, head, query, key] both work; batch axes are
never squeezed. The analyzer wrappers (`rollout.py`, `flow.py`) convert tensors and call these functions.

The residual-augmented attention of one layer is

    Â = rownorm(w·I + (1 − w)·A),

with A the head-fused (and optionally discarded) attention and w the residual weight (0.5 in the paper).
A query row of A that is all zero marks an absent position (a padded query, or a masked one): its row of Â
stays all zero instead of becoming 0/0 or a bare identity, so absent positions carry nothing through the
rollout. Causal patterns need nothing special: their zeros above the diagonal survive every product.

The rollout from layer `start` to the last layer L−1 is Â_{L−1} · … · Â_start: rows are positions after the
last layer, columns are the input tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
from jaxtyping import Float

from interpret.errors import ConfigError
from interpret.runtime import threads

HEAD_FUSIONS = ("mean", "max", "min")


def fuse_heads(
    pattern: Float[np.ndarray, "*batch layer head query key"], how: str = "mean"
) -> Float[np.ndarray, "*batch layer query key"]:
    """Return the head-fused attention [*batch, layer, query, key] in float64 (mean, max or min over heads)."""
    if how == "mean":
        # Adding whole head slices into one float64 buffer streams through the input once, whatever its
        # dtype; it is memory-bound and about 1.5x faster than a reduction along a middle axis.
        fused = pattern[..., 0, :, :].astype(np.float64)
        for head in range(1, pattern.shape[-3]):
            fused += pattern[..., head, :, :]
        fused /= pattern.shape[-3]
        return fused
    if how == "max":
        return np.max(pattern, axis=-3).astype(np.float64)
    if how == "min":
        return np.min(pattern, axis=-3).astype(np.float64)
    raise ConfigError(f"head fusion {how!r} is unknown; use one of {', '.join(HEAD_FUSIONS)}.")


def discard_lowest(
    fused: Float[np.ndarray, "*batch layer query key"], ratio: float, keep: Sequence[int] = ()
) -> Float[np.ndarray, "*batch layer query key"]:
    """Return a copy of `fused` [*batch, layer, query, key] with the lowest `ratio` of each layer's entries zeroed.

    This states the reference behaviour (Gildenblat's vit-explain) for a general readout position: per layer,
    the k = floor(ratio · query · key) smallest entries of the flattened matrix are chosen (ties broken by
    flat index, so the choice is deterministic), and every chosen entry is zeroed except the diagonal entries
    (p, p) of the readout positions `keep` — the reference protects flat index 0, the class token's entry.
    So k entries are dropped, or fewer when protected entries were among the k smallest. No renormalisation
    happens here: `add_residual` renormalises rows afterwards (row-wise, where the reference divides columns).
    """
    if not 0.0 <= ratio < 1.0:
        raise ConfigError(f"discard ratio {ratio} is out of range; use a value in [0, 1).")
    out = np.array(fused, dtype=np.float64, order="C", copy=True)  # C order: `flat` below must be a view
    n_query, n_key = out.shape[-2:]
    n_drop = int(n_query * n_key * ratio)
    if n_drop == 0:
        return out
    flat = out.reshape(-1, n_query * n_key)
    order = np.argsort(flat, axis=-1, kind="stable")[:, :n_drop]
    drop = np.zeros(flat.shape, dtype=bool)
    np.put_along_axis(drop, order, True, axis=-1)
    for position in readout_positions(list(keep), n_query) if len(keep) else []:
        drop[:, position * n_key + position] = False
    flat[drop] = 0.0
    return out


def add_residual(
    fused: Float[np.ndarray, "*batch layer query key"], weight: float = 0.5
) -> Float[np.ndarray, "*batch layer query key"]:
    """Return Â = rownorm(w·I + (1 − w)·A) [*batch, layer, query, key]; rows of absent queries stay all zero.

    A query is absent where its row of A is all zero (a padded query). A present row that sums to zero (w = 0
    and a row of A with no attention left) raises ConfigError.
    """
    return _augment(np.multiply(fused, 1.0 - weight, dtype=np.float64), weight, np.any(fused, axis=-1))


def _augment(
    scaled: np.ndarray, weight: float, present: np.ndarray, cause: str = "", remedy: str = ""
) -> np.ndarray:
    """Finish Â in place from scaled = (1 − w)·A: add w on present diagonals, divide rows, clear absent rows.

    `cause` and `remedy` name what emptied a row and what else avoids it, for the error raised when a
    present row sums to zero.
    """
    if not 0.0 <= weight <= 1.0:
        raise ConfigError(f"residual weight {weight} is out of range; use a value in [0, 1].")
    n_query, n_key = scaled.shape[-2:]
    if n_query != n_key:
        raise ConfigError(f"attention is {n_query}x{n_key}; the residual stream needs square self-attention.")
    diagonal = np.einsum("...ii->...i", scaled)  # a writable view of the diagonal
    diagonal += weight * present
    row_sum = scaled.sum(axis=-1, keepdims=True)
    _check_rows(row_sum[..., 0], present, weight, cause, remedy)
    if present.all():
        scaled /= row_sum
        return scaled
    np.divide(scaled, row_sum, out=scaled, where=row_sum > 0)
    scaled[~present] = 0.0
    return scaled


def _check_rows(row_sum: np.ndarray, present: np.ndarray, weight: float, cause: str, remedy: str) -> None:
    """Raise ConfigError unless every present row's sum [*batch, layer, query] is finite and positive."""
    if not np.all(np.isfinite(row_sum)):
        raise ConfigError(
            "attention contains NaN or infinite values; check the model's outputs (a float16 overflow, say)."
        )
    empty = present & (row_sum <= 0.0)
    if np.any(empty):
        index = tuple(int(axis[0]) for axis in np.nonzero(empty))
        raise ConfigError(
            f"residual weight {weight}{cause} leaves query {index[-1]} of layer {index[-2]} with no attention"
            f" (a row of zeros); use a residual weight above 0 (the paper's 0.5){remedy}."
        )


def augmented_attention(
    pattern: Float[np.ndarray, "*batch layer head query key"],
    *,
    head_fusion: str = "mean",
    residual_weight: float = 0.5,
    discard_ratio: float = 0.0,
    keep: Sequence[int] = (),
) -> Float[np.ndarray, "*batch layer query key"]:
    """Return Â [*batch, layer, query, key]: heads fused, lowest entries discarded, residual added, rows at 1.

    The order is the reference's (vit-explain): fuse, discard, then rownorm(w·I + (1 − w)·A) once, with rows
    (not columns) normalised; the discarded matrix is not renormalised before the residual is added, so a
    discard shifts weight towards the residual. A query is absent (padding: its row of Â stays zero) when no
    head attends from it at all, decided before fusing and discarding: a row that min-fusion or the discard
    empties keeps its residual (it becomes the identity row), and with residual weight 0 it raises ConfigError
    rather than turning into 0/0.
    """
    fused = fuse_heads(pattern, head_fusion)
    # From the heads, not the fused matrix: min-fusion can zero a row whose heads all attend somewhere.
    present = np.any(fused, axis=-1) if head_fusion != "min" else np.any(pattern, axis=-1).any(axis=-2)
    cause = f" with head fusion {head_fusion!r}" if head_fusion == "min" else ""
    remedy = " or head fusion 'mean'" if head_fusion == "min" else ""
    if discard_ratio > 0.0:
        fused = discard_lowest(fused, discard_ratio, keep)
        cause += f" with discard ratio {discard_ratio}"
        remedy += " or a smaller discard ratio"
    fused *= 1.0 - residual_weight  # `fused` is this function's own array: finish Â in it
    return _augment(fused, residual_weight, present, cause, remedy)


def augmented_layers(
    layers: Sequence[Float[np.ndarray, "_head query key"]],  # `_`: stages may differ in head count (Swin)
    *,
    head_fusion: str = "mean",
    residual_weight: float = 0.5,
    workers: int | None = None,
) -> Float[np.ndarray, "layer query key"]:
    """Return Â [layer, query, key] from per-layer heads, as `augmented_attention` with no discard computes it.

    The layers may be separate arrays (views into a trace's tensors): nothing is stacked. Large layers are
    read once by a compiled pass (`_augment.augment_rows`) whose row ranges run on `interpret.runtime.threads`
    (`workers`: a limit, None for every core); layers under `threads.SERIAL_WORK` head entries take the NumPy
    path, which is as fast there and needs no compiling. Both agree to rounding.
    """
    from interpret.plugins._augment import FUSIONS

    if head_fusion not in FUSIONS:
        raise ConfigError(f"head fusion {head_fusion!r} is unknown; use one of {', '.join(HEAD_FUSIONS)}.")
    if not 0.0 <= residual_weight <= 1.0:
        raise ConfigError(f"residual weight {residual_weight} is out of range; use a value in [0, 1].")
    n_head, n_query, n_key = layers[0].shape[-3:]
    if n_query != n_key:
        raise ConfigError(f"attention is {n_query}x{n_key}; the residual stream needs square self-attention.")
    if n_head * n_query * n_key < threads.SERIAL_WORK:
        # Fused one layer at a time: no stacked copy of the heads, which costs as much as the fusing.
        fused = np.stack([fuse_heads(heads[None], head_fusion)[0] for heads in layers])
        if head_fusion == "min":  # presence from the heads, as in augmented_attention
            present = np.stack([np.any(heads, axis=-1).any(axis=0) for heads in layers])
            cause, remedy = f" with head fusion {head_fusion!r}", " or head fusion 'mean'"
        else:
            present, cause, remedy = np.any(fused, axis=-1), "", ""
        fused *= 1.0 - residual_weight
        return _augment(fused, residual_weight, present, cause, remedy)
    from interpret.plugins._augment import augment_rows  # compiled (or loaded from cache) on first use

    out = np.empty((len(layers), n_query, n_key))
    n_threads = threads.threads_for(n_head * n_query * n_key, workers)
    failed: list[int] = []  # per job, the rows it could not normalise (list.append is thread-safe)
    for index, heads in enumerate(layers):
        contiguous = np.ascontiguousarray(heads)

        def job(start: int, stop: int, index: int = index, heads: np.ndarray = contiguous) -> None:
            failed.append(augment_rows(heads, FUSIONS[head_fusion], float(residual_weight), out[index], start, stop))

        threads.run([partial(job, *span) for span in threads.spans(n_query, n_threads)], n_threads)
    if any(failed):  # the error path: the NumPy statement names the row and the cause
        augmented_attention(np.stack(layers), head_fusion=head_fusion, residual_weight=residual_weight)
        raise ConfigError("the attention gives a row that sums to zero or is not finite; check the model's outputs.")
    return out


def chain(
    augmented: Float[np.ndarray, "*batch layer query key"],
    rows: Sequence[int] | None = None,
    streaming: bool = False,
    *,
    weights: Float[np.ndarray, "*start query"] | None = None,
) -> Float[np.ndarray, "*batch row key"]:
    """Return Â_{L−1} · … · Â_0 [*batch, row, key]: all rows (rows None), the rows given, or weighted rows.

    `streaming` propagates only the rows, r ← r · Â_l from the last layer down: O(L·n²) per row.
    `weights` [query] or [*batch, row, query] starts the propagation from weighted rows instead, always
    streamed: the result is weights · Â_{L−1} · … · Â_0 (one row for a 1-D vector), the rollout of a decision
    that pools the top layer with those weights (a mean-pooled classifier: 1/n on each real token), without
    ever forming the full product. Rollout is linear, so this equals weights @ chain(augmented).
    """
    if weights is not None:
        if rows is not None:
            raise ConfigError("chain takes rows or weights, not both; fold the rows into the weights.")
        start = np.asarray(weights, dtype=np.float64)
        if start.shape[-1] != augmented.shape[-1] or start.ndim not in (1, augmented.ndim - 1):
            raise ConfigError(
                f"start weights have shape {start.shape}; give [{augmented.shape[-1]}] or [*batch, row,"
                f" {augmented.shape[-1]}] for attention of shape {augmented.shape}."
            )
        if not np.all(np.isfinite(start)):
            raise ConfigError("start weights contain NaN or infinite values; give finite weights (e.g. 1/n per token).")
        current = start[None] if start.ndim == 1 else start
        with threads.blas_threads(_product_work(augmented, current.shape[-2])):
            for layer in range(augmented.shape[-3] - 1, -1, -1):
                current = current @ augmented[..., layer, :, :]
        return current
    if streaming and rows is not None:
        current = augmented[..., -1, list(rows), :]
        with threads.blas_threads(_product_work(augmented, len(rows))):
            for layer in range(augmented.shape[-3] - 2, -1, -1):
                current = current @ augmented[..., layer, :, :]
        return current
    current = augmented[..., 0, :, :]
    with threads.blas_threads(_product_work(augmented)):
        for layer in range(1, augmented.shape[-3]):
            current = augmented[..., layer, :, :] @ current
    return current if rows is None else current[..., list(rows), :]


def _product_work(augmented: np.ndarray, rows: int | None = None) -> int:
    """Return the multiply-adds of the products through `augmented` [*batch, layer, n, n] for `rows` rows (None: n)."""
    n = augmented.shape[-1]
    return int(np.prod(augmented.shape[:-3], dtype=np.int64)) * augmented.shape[-3] * (n if rows is None else rows) * n * n


def readout_positions(readout: int | Sequence[int] | None, n_query: int) -> list[int]:
    """Return the readout positions as non-negative ints (all positions for None; negatives count from the end)."""
    if readout is None:
        return list(range(n_query))
    wanted = [readout] if isinstance(readout, (int, np.integer)) else list(readout)
    if not wanted:
        raise ConfigError("readout is empty; give a position, a list of positions, or None for all rows.")
    positions = []
    for position in wanted:
        if not -n_query <= int(position) < n_query:
            raise ConfigError(f"readout position {position} is outside the {n_query} positions; use 0…{n_query - 1}.")
        positions.append(int(position) % n_query)
    return positions


def cumulative(
    augmented: Float[np.ndarray, "*batch layer query key"], start_layer: int = 0
) -> Float[np.ndarray, "*batch all_layer query key"]:
    """Return [*batch, start_layer + layer, query, key]: Â_l · … · Â_0 after each layer, the identity before.

    `augmented` holds the layers from `start_layer` on; the last entry equals `chain(augmented)`.
    """
    n_layer, n_query = augmented.shape[-3], augmented.shape[-2]
    out = np.empty(augmented.shape[:-3] + (start_layer + n_layer, n_query, n_query), dtype=np.float64)
    out[..., :start_layer, :, :] = np.eye(n_query)
    current = augmented[..., 0, :, :]
    out[..., start_layer, :, :] = current
    with threads.blas_threads(_product_work(augmented)):
        for layer in range(1, n_layer):
            current = augmented[..., layer, :, :] @ current
            out[..., start_layer + layer, :, :] = current
    return out


def _normalised_relevance(relevance: Float[np.ndarray, "*batch pos pos"]) -> Float[np.ndarray, "*batch pos pos"]:
    """Return R̄ = rownorm(R − I) + I [*batch, pos, pos] (Chefer et al. 2021, eqs. 8–9); zero rows stay zero."""
    identity = np.eye(relevance.shape[-1])
    context = relevance - identity
    row_sum = context.sum(axis=-1, keepdims=True)
    np.divide(context, row_sum, out=context, where=row_sum != 0)
    return context + identity


def rollout_encoder_decoder(
    encoder_pattern: Float[np.ndarray, "*batch enc_layer head enc enc"],
    decoder_pattern: Float[np.ndarray, "*batch dec_layer head dec dec"],
    cross_pattern: Float[np.ndarray, "*batch dec_layer head dec enc"],
) -> tuple[
    Float[np.ndarray, "*batch enc enc"],
    Float[np.ndarray, "*batch dec dec"],
    Float[np.ndarray, "*batch dec enc"],
]:
    """Return the relevance maps (R_ee [*batch, enc, enc], R_dd [*batch, dec, dec], R_de [*batch, dec, enc]).

    Chefer et al. 2021 (ICCV), rules 6–7 and 10–11, in their attention-only special case: the paper's
    Ā = E_h[(∇A ⊙ A)⁺] becomes the plain head mean Ā = E_h[A] (no gradients, so this is rollout without the
    residual weighting, not the gradient-weighted method). Start R_ee = I, R_dd = I, R_de = 0; then

      each encoder self-attention layer:   R_ee ← R_ee + Ā_ee · R_ee
      each decoder layer, self-attention:  R_dd ← R_dd + Ā_dd · R_dd
                                           R_de ← R_de + Ā_dd · R_de
      then its cross-attention:            R_de ← R_de + R̄_ddᵀ · Ā_de · R̄_ee

    with R̄ = rownorm(R − I) + I (eqs. 8–9), R_ee the final encoder map. Rule 11 (R_dd ← R_dd + Ā_de · R_ed)
    adds nothing because the encoder never attends to the decoder (R_ed = 0), so it is omitted.
    """
    encoder_mean = fuse_heads(encoder_pattern, "mean")
    decoder_mean = fuse_heads(decoder_pattern, "mean")
    cross_mean = fuse_heads(cross_pattern, "mean")
    batch_shape = encoder_pattern.shape[:-4]
    n_enc, n_dec = encoder_pattern.shape[-1], decoder_pattern.shape[-1]
    r_ee = np.broadcast_to(np.eye(n_enc), batch_shape + (n_enc, n_enc)).copy()
    r_dd = np.broadcast_to(np.eye(n_dec), batch_shape + (n_dec, n_dec)).copy()
    r_de = np.zeros(batch_shape + (n_dec, n_enc))
    for layer in range(encoder_mean.shape[-3]):
        r_ee = r_ee + encoder_mean[..., layer, :, :] @ r_ee
    r_ee_bar = _normalised_relevance(r_ee)
    for layer in range(decoder_mean.shape[-3]):
        self_mean = decoder_mean[..., layer, :, :]
        r_dd = r_dd + self_mean @ r_dd
        r_de = r_de + self_mean @ r_de
        r_dd_bar = _normalised_relevance(r_dd)
        r_de = r_de + np.swapaxes(r_dd_bar, -1, -2) @ cross_mean[..., layer, :, :] @ r_ee_bar
    return r_ee, r_dd, r_de
