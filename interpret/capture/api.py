"""`collect`: run a model once and return a Trace of the requested hook names (its inputs prepared by `prepare`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from interpret.capture.engine import Reduce, capture, normalize_indices, select_sites
from interpret.capture.sites import Capturable
from interpret.errors import InputError, UnsupportedModelError
from interpret.estimate.memory import CAPTURE_BUDGET
from interpret.inputs import Encoded, as_encoded
from interpret.runtime.versions import library_versions
from interpret.trace import Trace, TraceMeta

# What `collect` accepts: a text, a list of texts, token ids [batch, pos], embeddings [batch, pos, d_model], an
# Encoded, or whatever the model's adapter prepares itself (PIL images or pixel values [batch, channel,
# height, width] for a vision model). Checked by `prepare`, which names what it cannot use.
Inputs = Any


def prepare(
    capturable: Capturable,
    tokenizer: Any | None,
    inputs: Inputs,
    *,
    max_length: int | None = None,
    decoder_inputs: str | Sequence[str] | Tensor | Encoded | None = None,
    continuations: str | Sequence[str] | None = None,
) -> Encoded:
    """Return the Encoded of `inputs`: the adapter's own preparation (`Capturable.prepare`: images, audio) or,
    for a text model, `interpret.inputs.as_encoded` (which explains continuations and the position limit)."""
    if capturable.prepare is not None:
        if continuations is not None:
            raise InputError(f"a {capturable.kind} model takes no continuation; drop it.")
        return capturable.prepare(tokenizer, inputs, max_length=max_length, decoder_inputs=decoder_inputs)
    return as_encoded(tokenizer, inputs, kind=capturable.kind, max_positions=capturable.max_positions,
                      max_length=max_length, decoder_inputs=decoder_inputs, continuations=continuations)


def capturable_for(model: nn.Module, tokenizer: Any | None = None) -> Capturable:
    """Return the Capturable for a reference model or a Hugging Face model with a registered adapter."""
    from interpret.reference.models import ReferenceModel

    if hasattr(model, "config") and hasattr(model.config, "model_type"):  # a reference model's config has none
        from interpret.capture.hf.registry import hf_capturable

        return hf_capturable(model, tokenizer)
    if isinstance(model, ReferenceModel):
        from interpret.capture.reference import reference_capturable

        return reference_capturable(model)
    raise UnsupportedModelError(
        f"{type(model).__name__} is neither a reference model nor a Hugging Face model; convert an"
        " nn.Transformer with interpret.reference.from_torch, or load with interpret.load."
    )


def collect(
    model: nn.Module | Capturable, tokenizer: Any | None, inputs: Inputs, *, names: Sequence[str] | str | None = None,
    layers: Sequence[int] | None = None, heads: Sequence[int] | None = None, reduce: Reduce = None,
    max_length: int | None = None, decoder_inputs: str | Sequence[str] | Tensor | Encoded | None = None,
    budget_bytes: int | None = CAPTURE_BUDGET, continuations: str | Sequence[str] | None = None, offload: bool = False,
) -> Trace:
    """Run `model` once on `inputs` and return a Trace of the hook names matching `names` (globs).

    model: the model, or its Capturable (`capturable_for`) when the caller already holds it (the pipeline).

    inputs: a text, texts, token ids [batch, pos], embeddings [batch, pos, d_model], an Encoded, or for a
        vision model PIL images (with its image processor as `tokenizer`) or pixel values [batch, channel,
        height, width].
    names: globs over canonical hook names; default every attention pattern (`*hook_pattern`).
    layers / heads: indices to keep (negatives count from the end); others are not captured.
    reduce: None, "mean" or "max" over heads, applied inside the hook (head axis kept with size 1).
    budget_bytes: refuse a capture estimated above this many bytes per example.
    continuations: per text, a continuation appended to it whose tokens a language model's explanation
        targets (`Encoded.continuation`); text inputs only.
    offload: on a CUDA model, keep every captured tensor in pinned host memory from the moment its hook fires,
        so the GPU holds one layer's at a time (long inputs; the trace's tensors are then on the host).
    """
    capturable = model if isinstance(model, Capturable) else capturable_for(model, tokenizer)
    encoded = prepare(
        capturable, tokenizer, inputs, max_length=max_length, decoder_inputs=decoder_inputs, continuations=continuations
    )
    encoded = encoded.to(capturable.device)
    sites = select_sites(capturable, names, layers)
    tensors, output, total = capture(
        capturable, encoded, sites, heads=heads, reduce=reduce, budget_bytes=budget_bytes, offload=offload
    )
    head_list = normalize_indices(heads, capturable.n_heads, "head")
    layer_list = sorted({site.layer for site in sites if site.layer is not None})
    meta = TraceMeta(
        model_id=capturable.model_id,
        kind=capturable.kind,
        n_layers=capturable.n_layers,
        n_heads=capturable.n_heads,
        attention=capturable.attention,
        layers=tuple(layer_list),
        heads=None if head_list is None else tuple(head_list),
        reduce=reduce,
        capture_bytes=total,
        versions=dict(library_versions()),
        adapter=capturable.adapter,
        implementation=capturable.implementation,
        model_class=capturable.model_class,
        sinks=capturable.sinks,
        windows=capturable.windows,
        scales=capturable.scales,
        softcaps=capturable.softcaps,
        sink_logits=capturable.sink_logits(),
    )
    return Trace(tensors=tensors, encoded=encoded, meta=meta, output=output)
