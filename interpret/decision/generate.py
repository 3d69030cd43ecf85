"""Greedy generation for `explain(..., target=Subject(generate=N))`: the tokens a language model writes after
each text become the continuation it explains (`Encoded.continuation`, one target per token), the same path a
given continuation takes.

Each example is generated alone (no padding) by transformers' own `generate` with do_sample=False and num_beams=1,
so a token is the one `model.generate` picks greedily: the argmax of the model's logits after the checkpoint's
own generation settings (a repetition penalty, suppressed tokens), as in deployment. Generation stops after N
tokens or after the end-of-sequence token, which is kept as the last target. A decoder continues its text; an
encoder-decoder's decoder starts from its decoder start token and writes the output for the encoder's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from interpret.capture.sites import Capturable
from interpret.errors import InputError
from interpret.inputs import Encoded, as_encoded, continued, from_ids, model_limit, pad_token_id


def generated_inputs(
    capturable: Capturable, tokenizer: Any, texts: str | Sequence[str], steps: int, *, max_length: int | None = None,
) -> tuple[Encoded, Encoded | None]:
    """Return (inputs, decoder_inputs) for `collect`: each text followed by the tokens the model (`capturable.model`,
    as `interpret.capture.api.capturable_for` reads it) generates greedily after it (at most `steps`), counted as its continuation; for an encoder-decoder the inputs are
    the texts and the decoder inputs its start token followed by the generated tokens.

    max_length: the most tokens the model's input (a decoder's text with its generated tokens) may have; the
        text is truncated to leave room for `steps` generated tokens, as for a given continuation.
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise InputError(f"generate={steps!r} must be a whole number of tokens, 1 or more.")
    if not (isinstance(texts, str) or (isinstance(texts, Sequence) and all(isinstance(t, str) for t in texts))):
        raise InputError("generate continues a text; give the inputs as a text or a list of texts.")
    model = capturable.model
    can_generate = getattr(model, "can_generate", None)
    if capturable.kind not in ("decoder", "encoder-decoder") or capturable.prepare is not None or not (
            callable(can_generate) and can_generate()):
        raise InputError(f"generate needs a text language model that transformers can generate with, which"
                         f" {type(model).__name__} is not; drop generate (or explain a given text with continuation=).")
    limit = model_limit(tokenizer, capturable.max_positions)
    decoder = capturable.kind == "decoder"
    if decoder and max_length is not None and max_length <= steps:
        raise InputError(f"{steps} generated tokens leave no room for the text within max_length={max_length};"
                         " generate fewer.")
    start = torch.zeros(1 if isinstance(texts, str) else len(texts), 1, dtype=torch.long)  # replaced by generate's own
    room = max_length - steps if decoder and max_length else max_length  # a decoder's text leaves room for them
    prompt = as_encoded(tokenizer, texts, kind=capturable.kind, max_positions=capturable.max_positions, max_length=room,
                        decoder_inputs=None if decoder else start)
    device, news, starts = capturable.device, [], []
    for b, length in enumerate(prompt.lengths):
        first = length if decoder else 1  # the output starts with a decoder's prompt, an encoder-decoder's start token
        if limit is not None and first + steps > limit:
            raise InputError(f"{'text' if decoder else 'the decoder of text'} {b} would have {first + steps} tokens with"
                             f" {steps} generated, over the model's limit of {limit}; generate fewer or shorten the text.")
        real = prompt.attention_mask[b] != 0
        ids = prompt.input_ids[b, real][None].to(device)
        with torch.no_grad():
            sequence = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, num_beams=1,
                                      max_new_tokens=steps, pad_token_id=pad_token_id(tokenizer))
        news.append(sequence[0, first:].tolist())
        starts.append(sequence[0, :1].cpu())
    if decoder:
        return continued(tokenizer, prompt, news), None
    side = from_ids(torch.stack(starts), tokenizer=tokenizer)
    return replace(prompt, decoder=None), continued(tokenizer, side, news)
