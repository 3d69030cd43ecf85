"""`prepare`: turn what a user passes to `collect` into an Encoded, by the model's adapter or `as_encoded`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from interpret.capture.sites import Capturable
from interpret.errors import InputError
from interpret.inputs import Encoded, as_encoded

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
