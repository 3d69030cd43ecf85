"""`Encoded`, the first object of the pipeline: token ids, masks and token strings, with length checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from interpret.errors import InputError

# Tokenizers report "no limit" as a huge sentinel (int(1e30)); anything above this is not a real limit.
_NO_LIMIT = 1_000_000


@dataclass(frozen=True)
class Encoded:
    """Model inputs and what they mean.

    Fields (batch is axis 0 everywhere):
        input_ids: [batch, pos] token ids, or None when the input was embeddings or pixels.
        attention_mask: [batch, pos] 1 for a real position, 0 for padding.
        tokens: per example, the `pos` token strings (padding included).
        special: [batch, pos] bool, True at special tokens (CLS, SEP, BOS, EOS, padding).
        inputs_embeds: [batch, pos, d_model] when the model is fed embeddings directly.
        pixel_values: [batch, channel, height, width] for vision models.
        input_features: audio features as the model takes them (Whisper: log-mel [batch, mel, frame]).
        decoder: the decoder side of an encoder-decoder model, itself an Encoded.
        image: the image side of a text-image dual encoder (CLIP), itself an Encoded (pixel_values).
        truncated: per example, whether the text was cut to fit.
    """

    attention_mask: Tensor
    tokens: list[list[str]]
    special: Tensor
    input_ids: Tensor | None = None
    inputs_embeds: Tensor | None = None
    pixel_values: Tensor | None = None
    input_features: Tensor | None = None
    decoder: Encoded | None = None
    image: Encoded | None = None
    texts: tuple[str, ...] | None = None
    truncated: tuple[bool, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.attention_mask.dim() != 2:
            raise InputError(
                f"attention_mask has shape {tuple(self.attention_mask.shape)}; expected [batch, pos]."
            )
        batch, pos = self.attention_mask.shape
        for label, tensor in (("input_ids", self.input_ids), ("special", self.special)):
            if tensor is not None and tuple(tensor.shape) != (batch, pos):
                raise InputError(
                    f"{label} has shape {tuple(tensor.shape)} but attention_mask is {(batch, pos)};"
                    " give both as [batch, pos]."
                )
        if self.inputs_embeds is not None and tuple(self.inputs_embeds.shape[:2]) != (batch, pos):
            raise InputError(
                f"inputs_embeds has shape {tuple(self.inputs_embeds.shape)}; expected [{batch}, {pos}, d_model]."
            )
        if len(self.tokens) != batch or any(len(row) != pos for row in self.tokens):
            raise InputError(f"tokens must be {batch} lists of {pos} strings, one per position.")

    @property
    def batch(self) -> int:
        """Number of examples."""
        return int(self.attention_mask.shape[0])

    @property
    def pos(self) -> int:
        """Sequence length, padding included."""
        return int(self.attention_mask.shape[1])

    @property
    def lengths(self) -> list[int]:
        """Number of real (non-padding) positions per example."""
        return [int(n) for n in self.attention_mask.sum(dim=1).tolist()]

    @property
    def padding(self) -> Tensor:
        """[batch, pos] bool, True at padded positions."""
        return self.attention_mask == 0

    def to(self, device: torch.device | str) -> Encoded:
        """Return a copy with every tensor on `device`."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(
            self,
            attention_mask=move(self.attention_mask),
            special=move(self.special),
            input_ids=move(self.input_ids),
            inputs_embeds=move(self.inputs_embeds),
            pixel_values=move(self.pixel_values),
            input_features=move(self.input_features),
            decoder=None if self.decoder is None else self.decoder.to(device),
            image=None if self.image is None else self.image.to(device),
        )


def model_limit(tokenizer: Any | None, model_max_positions: int | None) -> int | None:
    """Return the most tokens the pair accepts: the smaller of the tokenizer's and the model's limits."""
    limits = [model_max_positions] if model_max_positions else []
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < _NO_LIMIT:
        limits.append(tok_max)
    return min(limits) if limits else None


def encode(
    tokenizer: Any,
    texts: str | Sequence[str],
    *,
    limit: int | None = None,
    max_length: int | None = None,
    add_special_tokens: bool = True,
) -> Encoded:
    """Return the Encoded batch of `texts` ([batch, pos], right-padded).

    A text longer than `limit` raises InputError unless `max_length` asks for truncation; `max_length`
    above `limit` is refused too.
    """
    batch = [texts] if isinstance(texts, str) else list(texts)
    if not batch:
        raise InputError("no text given; pass at least one non-empty text.")
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise InputError(f"text {i} is a {type(text).__name__}, not a string; pass str or list of str.")
        if not text.strip():
            raise InputError(f"text {i} is empty; give at least one word.")
    if max_length is not None:
        if max_length < 1:
            raise InputError(f"max_length={max_length} must be a positive number of tokens.")
        if limit is not None and max_length > limit:
            raise InputError(f"max_length={max_length} exceeds the model's limit of {limit} tokens; use at most {limit}.")
    untruncated = tokenizer(batch, add_special_tokens=add_special_tokens)["input_ids"]
    cap = max_length if max_length is not None else limit
    if max_length is None and limit is not None:
        for i, ids in enumerate(untruncated):
            if len(ids) > limit:
                raise InputError(
                    f"text {i} has {len(ids)} tokens but the model accepts at most {limit};"
                    f" shorten it or truncate with max_length={limit} (CLI: --max-length {limit})."
                )
    out = tokenizer(
        batch,
        add_special_tokens=add_special_tokens,
        padding=True,
        truncation=cap is not None,
        max_length=cap,
        return_tensors="pt",
        return_special_tokens_mask=True,
        return_attention_mask=True,
    )
    input_ids = out["input_ids"]
    attention_mask = out["attention_mask"]
    special = out["special_tokens_mask"].bool() | (attention_mask == 0)
    tokens = [tokenizer.convert_ids_to_tokens(row) for row in input_ids.tolist()]
    truncated = tuple(len(ids) > input_ids.shape[1] for ids in untruncated)
    return Encoded(
        input_ids=input_ids,
        attention_mask=attention_mask,
        tokens=tokens,
        special=special,
        texts=tuple(batch),
        truncated=truncated,
    )


def from_ids(
    input_ids: Tensor, attention_mask: Tensor | None = None, tokenizer: Any | None = None
) -> Encoded:
    """Return the Encoded of a [batch, pos] tensor of token ids (all positions real unless masked)."""
    if input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
        raise InputError(
            f"token ids must be an integer tensor [batch, pos]; got {input_ids.dtype} of shape"
            f" {tuple(input_ids.shape)}."
        )
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    if tokenizer is not None:
        tokens = [tokenizer.convert_ids_to_tokens(row) for row in input_ids.tolist()]
        special_ids = set(getattr(tokenizer, "all_special_ids", []))
        special = torch.tensor([[i in special_ids for i in row] for row in input_ids.tolist()], dtype=torch.bool)
    else:
        tokens = [[str(i) for i in row] for row in input_ids.tolist()]
        special = torch.zeros_like(input_ids, dtype=torch.bool)
    return Encoded(
        input_ids=input_ids.long(),
        attention_mask=mask,
        tokens=tokens,
        special=special | (mask == 0),
    )


def from_embeds(inputs_embeds: Tensor, attention_mask: Tensor | None = None) -> Encoded:
    """Return the Encoded of a [batch, pos, d_model] float tensor fed to a model without embeddings."""
    if inputs_embeds.dim() != 3 or not inputs_embeds.is_floating_point():
        raise InputError(
            f"embeddings must be a float tensor [batch, pos, d_model]; got {inputs_embeds.dtype} of shape"
            f" {tuple(inputs_embeds.shape)}."
        )
    batch, pos = inputs_embeds.shape[:2]
    mask = torch.ones(batch, pos, dtype=torch.long) if attention_mask is None else attention_mask
    return Encoded(
        inputs_embeds=inputs_embeds,
        attention_mask=mask,
        tokens=[[f"pos{p}" for p in range(pos)] for _ in range(batch)],
        special=(mask == 0),
    )
