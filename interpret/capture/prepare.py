"""`prepare`: turn what a user passes to `collect` (text, texts, ids, embeddings, an Encoded) into an Encoded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from interpret.capture.sites import Capturable
from interpret.errors import InputError
from interpret.inputs import Encoded, encode, from_embeds, from_ids, model_limit

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
    """Return the Encoded for `inputs` checked against the model's position limit.

    continuations: per text, a continuation appended after it (on the decoder side of an encoder-decoder).
    """
    if capturable.prepare is not None:
        if continuations is not None:
            raise InputError(f"a {capturable.kind} model takes no continuation; drop it.")
        return capturable.prepare(tokenizer, inputs, max_length=max_length, decoder_inputs=decoder_inputs)
    limit = model_limit(tokenizer, capturable.max_positions)
    decoder_side = capturable.kind == "encoder-decoder"
    encoded = _one_side(tokenizer, inputs, limit, max_length, None if decoder_side else continuations)
    if decoder_side:
        if decoder_inputs is None:
            raise InputError("an encoder-decoder model needs decoder inputs; pass decoder_inputs= (text or ids; CLI: --decoder-text).")
        encoded = replace(encoded, decoder=_one_side(tokenizer, decoder_inputs, limit, max_length, continuations))
        if encoded.decoder is not None and encoded.decoder.batch != encoded.batch:
            raise InputError(
                f"decoder inputs have {encoded.decoder.batch} examples but the encoder inputs {encoded.batch};"
                " give one decoder input per example."
            )
    elif decoder_inputs is not None:
        raise InputError(f"decoder inputs were given but this is a {capturable.kind} model; drop them (CLI: --decoder-text).")
    return encoded


def _one_side(
    tokenizer: Any | None, inputs: Any, limit: int | None, max_length: int | None, continuations: Any = None
) -> Encoded:
    is_text = isinstance(inputs, str) or (
        isinstance(inputs, Sequence) and bool(inputs) and all(isinstance(text, str) for text in inputs)
    )
    if continuations is not None and not is_text:
        raise InputError("a continuation follows a text; give the inputs as text to add one.")
    if isinstance(inputs, Encoded):
        encoded = inputs
    elif isinstance(inputs, Tensor):
        encoded = from_embeds(inputs) if inputs.is_floating_point() else from_ids(inputs, tokenizer=tokenizer)
        if max_length is not None and encoded.pos > max_length:
            encoded = _cut(encoded, max_length)
    elif is_text:
        if tokenizer is None:
            raise InputError("text input needs a tokenizer; pass tokenizer= or give a tensor of token ids.")
        return encode(tokenizer, inputs, limit=limit, max_length=max_length, continuations=continuations)
    else:
        raise InputError(
            f"inputs of type {type(inputs).__name__} are not understood; pass text, a list of texts, a tensor"
            " of token ids [batch, pos], embeddings [batch, pos, d_model] or an Encoded."
        )
    if limit is not None and encoded.pos > limit:
        raise InputError(
            f"the input has {encoded.pos} positions but the model accepts at most {limit};"
            f" shorten it or pass max_length={limit}."
        )
    return encoded


def _cut(encoded: Encoded, length: int) -> Encoded:
    """Return `encoded` truncated to its first `length` positions."""
    cut = lambda t: None if t is None else t[:, :length]  # noqa: E731
    return replace(
        encoded,
        input_ids=cut(encoded.input_ids),
        inputs_embeds=cut(encoded.inputs_embeds),
        attention_mask=encoded.attention_mask[:, :length],
        special=encoded.special[:, :length],
        tokens=[row[:length] for row in encoded.tokens],
        truncated=tuple(True for _ in encoded.tokens),
    )


def model_device(model: torch.nn.Module) -> torch.device:
    """Return the device of the model's first parameter (CPU for a parameterless model)."""
    for param in model.parameters():
        return param.device
    return torch.device("cpu")
