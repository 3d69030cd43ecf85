"""`Encoded`, the first object of the pipeline: token ids, masks and token strings, with length checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

import torch
from torch import Tensor

from interpret.errors import InputError
from interpret.reading.datasets import PAIR_COLUMN
from interpret.reading.text import marker_word_ids, token_scheme
from interpret.reading.text_size import check_text_bytes

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
        pixel_values: [batch, channel, height, width] for vision models ([batch, frame, channel, height, width]
            for video models: VideoMAE, ViViT).
        input_features: audio features as the model takes them (Whisper: log-mel [batch, mel, frame]; Parakeet
            and Wav2Vec2-BERT: [batch, frame, feature], positions the frames after the model's subsampling).
        input_values: raw audio [batch, samples] for speech encoders on waveforms (wav2vec2 family), whose
            positions are the frames of the model's feature encoder; or a log-mel spectrogram [batch, frame,
            mel] for the Audio Spectrogram Transformer, whose positions are two tokens and its patches.
        sample_mask: [batch, samples] 1 for a real sample of input_values, 0 for padding (or [batch, frame] for
            a log-mel encoder's input_features [batch, frame, feature]), given to the model as its
            attention_mask; None when the model is given none (its feature extractor returns none).
        token_type_ids: [batch, pos] the segment of each position (0: the text, 1: its pair), as the tokenizer gives
            them for a text pair (BERT-style models that embed segments); None for single texts (the model's
            default, all 0) and for tokenizers that give none (RoBERTa's).
        decoder: the decoder side of an encoder-decoder model, itself an Encoded.
        image: the image side of a text-image dual encoder (CLIP), itself an Encoded (pixel_values).
        pairs: per example, the second text of a text pair (a premise's hypothesis, a query's passage), read with
            its text as the tokenizer reads `tokenizer(text, text_pair)`; None for single texts.
        truncated: per example, whether the text was cut to fit.
        continuation: per example, how many of its last real tokens are a given continuation (the tokens a
            language model's explanation targets, one target per token); () when there is none.
        word_ids: per example, the word each position belongs to (None for special tokens and padding), as
            the tokenizer groups subwords; () when the tokenizer cannot tell.
        scheme: how the tokens mark subwords ("byte_bpe", "sentencepiece", "wordpiece" or "plain";
            `interpret.reading.text.token_scheme`), so that they can be shown as the words a person reads.
    """

    attention_mask: Tensor
    tokens: list[list[str]]
    special: Tensor
    input_ids: Tensor | None = None
    inputs_embeds: Tensor | None = None
    pixel_values: Tensor | None = None
    input_features: Tensor | None = None
    input_values: Tensor | None = None
    sample_mask: Tensor | None = None
    token_type_ids: Tensor | None = None
    decoder: Encoded | None = None
    image: Encoded | None = None
    texts: tuple[str, ...] | None = None
    pairs: tuple[str, ...] | None = None
    truncated: tuple[bool, ...] = field(default=())
    continuation: tuple[int, ...] = field(default=())
    word_ids: tuple[tuple[int | None, ...], ...] = field(default=())
    scheme: str = "plain"

    def __post_init__(self) -> None:
        if self.attention_mask.dim() != 2:
            raise InputError(
                f"attention_mask has shape {tuple(self.attention_mask.shape)}; expected [batch, pos]."
            )
        batch, pos = self.attention_mask.shape
        for label, tensor in (("input_ids", self.input_ids), ("special", self.special),
                              ("token_type_ids", self.token_type_ids)):
            if tensor is not None and tuple(tensor.shape) != (batch, pos):
                raise InputError(
                    f"{label} has shape {tuple(tensor.shape)} but attention_mask is {(batch, pos)};"
                    " give both as [batch, pos]."
                )
        if self.inputs_embeds is not None and tuple(self.inputs_embeds.shape[:2]) != (batch, pos):
            raise InputError(
                f"inputs_embeds has shape {tuple(self.inputs_embeds.shape)}; expected [{batch}, {pos}, d_model]."
            )
        if self.input_values is not None and (self.input_values.dim() not in (2, 3) or self.input_values.shape[0] != batch):
            raise InputError(
                f"input_values has shape {tuple(self.input_values.shape)}; expected [{batch}, samples] (a waveform) or"
                f" [{batch}, frame, mel] (a spectrogram)."
            )
        if self.sample_mask is not None and self._audio_steps() != tuple(self.sample_mask.shape):
            raise InputError(
                "sample_mask must be [batch, samples] of input_values (a waveform) or [batch, frame] of input_features."
            )
        if len(self.tokens) != batch or any(len(row) != pos for row in self.tokens):
            raise InputError(f"tokens must be {batch} lists of {pos} strings, one per position.")
        if self.continuation and len(self.continuation) != batch:
            raise InputError(f"continuation must give one count per example ({batch}), got {len(self.continuation)}.")
        if self.word_ids and (len(self.word_ids) != batch or any(len(row) != pos for row in self.word_ids)):
            raise InputError(f"word_ids must be {batch} rows of {pos} entries, one per position.")

    def _audio_steps(self) -> tuple[int, ...] | None:
        """Return [batch, steps] of the audio a sample mask covers: a waveform's samples, or feature frames."""
        if self.input_values is not None and self.input_values.dim() == 2:
            return tuple(self.input_values.shape)
        if self.input_features is not None and self.input_features.dim() == 3:
            return tuple(self.input_features.shape[:2])
        return None

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
    def reads_media(self) -> bool:
        """Whether the model reads pixels or audio (pixel_values, input_features or input_values), not tokens."""
        return any(value is not None for value in (self.pixel_values, self.input_features, self.input_values))

    @property
    def padding(self) -> Tensor:
        """[batch, pos] bool, True at padded positions."""
        return self.attention_mask == 0

    def rows(
        self,
        examples: Tensor | None = None,
        *,
        input_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        pixel_values: Tensor | None = None,
    ) -> Encoded:
        """Return the Encoded of rows `examples` [rows] (example indices; default all), with their inputs
        optionally replaced: input_ids [rows, pos], inputs_embeds [rows, pos, d_model] or pixel_values.

        Masks, tokens, raw audio and the decoder side are the examples' own; this is how a run of many rows per example
        (an integration path, perturbations) is fed to the model.
        """
        if examples is None:
            index = torch.arange(self.batch, device=self.attention_mask.device)
        else:
            index = examples.to(device=self.attention_mask.device, dtype=torch.long)
            if index.dim() != 1 or (index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.batch)):
                raise InputError(f"examples must be a 1-D tensor of indices into the {self.batch} examples.")
        rows = len(index)
        for label, tensor in (("input_ids", input_ids), ("inputs_embeds", inputs_embeds), ("pixel_values", pixel_values)):
            if tensor is not None and tensor.shape[0] != rows:
                raise InputError(f"{label} has {tensor.shape[0]} rows but {rows} examples were named; give one row per example.")
        picked = index.tolist()

        def take(tensor: Tensor | None) -> Tensor | None:
            return None if tensor is None else tensor.index_select(0, index.to(tensor.device))

        if inputs_embeds is not None:
            ids, embeds = None, inputs_embeds
        else:
            ids = input_ids if input_ids is not None else take(self.input_ids)
            embeds = None if input_ids is not None else take(self.inputs_embeds)
        return Encoded(
            attention_mask=take(self.attention_mask),
            tokens=[self.tokens[i] for i in picked],
            special=take(self.special),
            input_ids=ids,
            inputs_embeds=embeds,
            pixel_values=pixel_values if pixel_values is not None else take(self.pixel_values),
            input_features=take(self.input_features),
            input_values=take(self.input_values),
            sample_mask=take(self.sample_mask),
            token_type_ids=take(self.token_type_ids),
            decoder=None if self.decoder is None else self.decoder.rows(examples),
            image=None if self.image is None else self.image.rows(examples),
            texts=None if self.texts is None else tuple(self.texts[i] for i in picked),
            pairs=None if self.pairs is None else tuple(self.pairs[i] for i in picked),
            truncated=tuple(self.truncated[i] for i in picked) if self.truncated else (),
            continuation=tuple(self.continuation[i] for i in picked) if self.continuation else (),
            word_ids=tuple(self.word_ids[i] for i in picked) if self.word_ids else (),
            scheme=self.scheme,
        )

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
            input_values=move(self.input_values),
            sample_mask=move(self.sample_mask),
            token_type_ids=move(self.token_type_ids),
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


def as_encoded(
    tokenizer: Any | None,
    inputs: Any,
    *,
    kind: str,
    max_positions: int | None,
    max_length: int | None = None,
    decoder_inputs: Any = None,
    continuations: str | Sequence[str] | None = None,
    padding_side: Literal["left", "right"] | None = None,
) -> Encoded:
    """Return the Encoded of `inputs` for a text model of `kind` ("encoder", "decoder", "encoder-decoder")
    reading at most `max_positions` positions (None: no limit of its own), checked against `model_limit`.

    inputs, decoder_inputs (an encoder-decoder's decoder side: required there, refused elsewhere): a text or
        texts (`encode`), token ids [batch, pos] or embeddings [batch, pos, d_model] (cut to `max_length`), an Encoded;
        `inputs` also text pairs {"text": texts, "text_pair": texts} (`TEXT_PAIR`, the keys of a Hugging Face
        text-classification pipeline), each pair read as the tokenizer reads `tokenizer(text, text_pair)`.
    continuations: per text, a continuation appended after it (on the decoder side of an encoder-decoder).
    padding_side: where texts are padded (None: the tokenizer's side; see `encode`).
    """
    pair = kind == "encoder-decoder"
    if pair and decoder_inputs is None:
        raise InputError("an encoder-decoder model needs decoder inputs; pass decoder_inputs= (text or ids; CLI: --decoder-text).")
    if not pair and decoder_inputs is not None:
        raise InputError(f"decoder inputs were given but this is a {kind} model; drop them (CLI: --decoder-text).")
    limit = model_limit(tokenizer, max_positions)
    if isinstance(decoder_inputs, Mapping):
        raise InputError("text pairs are read by the encoder; give the decoder side as text or ids.")
    sides = [(inputs, None), (decoder_inputs, continuations)] if pair else [(inputs, continuations)]
    encoded, *decoder = [_one_side(tokenizer, given, limit, max_length, follow, padding_side) for given, follow in sides]
    if decoder and decoder[0].batch != encoded.batch:
        raise InputError(f"decoder inputs have {decoder[0].batch} examples but the encoder inputs {encoded.batch};"
                         " give one decoder input per example.")
    return replace(encoded, decoder=decoder[0]) if decoder else encoded


def _one_side(
    tokenizer: Any | None, inputs: Any, limit: int | None, max_length: int | None, continuations: Any,
    padding_side: Literal["left", "right"] | None = None,
) -> Encoded:
    """Return the Encoded of one side's `inputs` (see `as_encoded`)."""
    if isinstance(inputs, Mapping):
        texts, pairs = text_pairs(inputs)
        if tokenizer is None:
            raise InputError("text pairs need a tokenizer; pass tokenizer=.")
        return encode(tokenizer, texts, pairs=pairs, limit=limit, max_length=max_length, continuations=continuations,
                      padding_side=padding_side)
    is_text = isinstance(inputs, str) or (isinstance(inputs, Sequence) and bool(inputs) and all(isinstance(t, str) for t in inputs))
    if continuations is not None and not is_text:
        raise InputError("a continuation follows a text; give the inputs as text to add one.")
    if is_text:
        if tokenizer is None:
            raise InputError("text input needs a tokenizer; pass tokenizer= or give a tensor of token ids.")
        return encode(tokenizer, inputs, limit=limit, max_length=max_length, continuations=continuations,
                      padding_side=padding_side)
    if isinstance(inputs, Encoded):
        encoded = inputs
    elif isinstance(inputs, Tensor):  # ids [batch, pos] or embeddings [batch, pos, d_model]: checked whole, then cut
        side = from_embeds if inputs.is_floating_point() else partial(from_ids, tokenizer=tokenizer)
        encoded = side(inputs)
        if max_length is not None and encoded.pos > max_length:
            encoded = replace(side(inputs[:, :max_length]), truncated=(True,) * encoded.batch)
    else:
        raise InputError(f"inputs of type {type(inputs).__name__} are not understood; pass text, a list of texts, text"
                         " pairs, a tensor of token ids [batch, pos], embeddings [batch, pos, d_model] or an Encoded.")
    if limit is not None and encoded.pos > limit:
        raise InputError(f"the input has {encoded.pos} positions but the model accepts at most {limit};"
                         f" shorten it or pass max_length={limit}.")
    return encoded


TEXT_PAIR = ("text", PAIR_COLUMN)  # the keys of text pairs given as inputs (`reading.datasets.text_inputs`)


def text_pairs(inputs: Mapping[str, Any]) -> tuple[Any, Any]:
    """Return (texts, pairs) of inputs {"text": a text or texts, "text_pair": one pair text per text}, as given
    (`encode` checks them); InputError naming what to give for a mapping of other keys."""
    keys = set(inputs)
    if keys != set(TEXT_PAIR):
        other = sorted(keys - set(TEXT_PAIR)) or sorted(set(TEXT_PAIR) - keys)
        raise InputError(f"text pairs are given as {{'text': texts, 'text_pair': texts}}; {other[0]!r}"
                         f" {'is not one of these keys' if keys - set(TEXT_PAIR) else 'is missing'}.")
    return inputs["text"], inputs[PAIR_COLUMN]


def encode(
    tokenizer: Any,
    texts: str | Sequence[str],
    *,
    pairs: str | Sequence[str] | None = None,
    limit: int | None = None,
    max_length: int | None = None,
    add_special_tokens: bool = True,
    continuations: str | Sequence[str] | None = None,
    padding_side: Literal["left", "right"] | None = None,
) -> Encoded:
    """Return the Encoded batch of `texts` ([batch, pos], padded on `padding_side`, by default the tokenizer's).

    A text longer than `limit` raises InputError unless `max_length` asks for truncation; `max_length`
    above `limit` is refused too, and so is a text of more bytes than `limit` tokens could hold
    (`interpret.reading.text_size`), before it is tokenized. A truncated text is cut by the tokenizer itself
    (`truncation=True`: on its truncation side, its special tokens kept), a continuation staying whole after
    it. A batch of one is never padded. A tokenizer without a pad token (GPT-2, Llama) is padded with its
    end-of-sequence token (else its beginning-of-sequence or unknown token), which the attention mask hides;
    the tokenizer passed in is not changed.
    continuations: per text, a continuation appended after it (tokenized on its own, without special
        tokens): its tokens are what a language model's explanation targets (`Encoded.continuation`).
    padding_side: where padding goes whatever the tokenizer says (a text tower that reads its row's last
        position, SigLIP's, is padded on the left so that it reads a real token).
    pairs: per text, its pair: the two are read as `tokenizer(text, pair)` reads them (its special tokens
        between and around them, its segment ids as `Encoded.token_type_ids`, its word ids, the pair's numbered
        after the text's), and a pair longer than the limit is cut as the tokenizer cuts it (`truncation=True`:
        the longer of the two, one token at a time).
    """
    batch = _texts(texts, "text")
    follow = None if continuations is None else _texts(continuations, "continuation")
    second = None if pairs is None else _texts(pairs, "text pair")
    if follow is not None and len(follow) != len(batch):
        raise InputError(f"{len(follow)} continuations for {len(batch)} texts; give one continuation per text.")
    if second is not None and len(second) != len(batch):
        raise InputError(f"{len(second)} text pairs for {len(batch)} texts; give one text_pair per text.")
    if second is not None and follow is not None:
        raise InputError("a continuation follows a single text; drop the text pairs or the continuations.")
    if limit is not None:  # a text far longer than the model reads is refused before the tokenizer spends time on it
        n = len(batch)
        check_text_bytes([*batch, *(follow or second or [])], limit,
                         lambda i: f"text {i}" if i < n else f"{'continuation' if follow else 'text pair'} {i - n}")
    if max_length is not None:
        if max_length < 1:
            raise InputError(f"max_length={max_length} must be a positive number of tokens.")
        if limit is not None and max_length > limit:
            raise InputError(f"max_length={max_length} exceeds the model's limit of {limit} tokens; use at most {limit}.")
    twins = second or [None] * len(batch)
    rows = [_tokenize(tokenizer, text, add_special_tokens, pair=pair) for text, pair in zip(batch, twins)]
    extras = [_Row([], [], []) for _ in batch] if follow is None else [_tokenize(tokenizer, text, False) for text in follow]
    cap = max_length if max_length is not None else limit
    truncated = tuple(cap is not None and len(row.ids) + len(extra.ids) > cap for row, extra in zip(rows, extras))
    for i, cut in enumerate(truncated):
        if not cut:
            continue
        what = "text" if second is None else "text pair"
        if max_length is None:
            raise InputError(
                f"{what} {i} has {len(rows[i].ids) + len(extras[i].ids)} tokens but the model accepts at most {limit};"
                f" shorten it or truncate with max_length={limit} (CLI: --max-length {limit})."
            )
        rows[i] = _truncated(tokenizer, batch[i], add_special_tokens, max_length - len(extras[i].ids), len(extras[i].ids),
                             twins[i])
    rows = [row.joined(extra) for row, extra in zip(rows, extras)]
    counts = tuple(len(extra.ids) for extra in extras) if follow is not None else ()
    encoded = _padded(tokenizer, rows, batch, truncated, counts, padding_side)
    if second is not None:
        encoded = replace(encoded, pairs=tuple(second))
    return replace(encoded, scheme=token_scheme(tokenizer))


def _texts(texts: str | Sequence[str], what: str) -> list[str]:
    batch = [texts] if isinstance(texts, str) else list(texts)
    if not batch:
        raise InputError(f"no {what} given; pass at least one non-empty {what}.")
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise InputError(f"{what} {i} is a {type(text).__name__}, not a string; pass str or list of str.")
        if not text.strip():
            raise InputError(f"{what} {i} is empty; give at least one word.")
    return batch


@dataclass(frozen=True)
class _Row:
    """One text's (or text pair's) ids, special-token flags, word ids and segment ids (None: none given), before
    padding."""

    ids: list[int]
    special: list[bool]
    words: list[int | None] | None
    types: list[int] | None = None

    def joined(self, other: _Row) -> _Row:
        """Return this row followed by `other` (a continuation: no segment ids), whose words are numbered after this
        row's."""
        if not other.ids:
            return self
        words = None
        if self.words is not None and other.words is not None:
            offset = max((w for w in self.words if w is not None), default=-1) + 1
            words = self.words + [None if w is None else w + offset for w in other.words]
        return _Row(self.ids + other.ids, self.special + other.special, words)


def _tokenize(
    tokenizer: Any, text: str, add_special_tokens: bool, max_length: int | None = None, pair: str | None = None,
) -> _Row:
    """Return the tokenizer's own encoding of `text` (and its `pair`: `tokenizer(text, pair)`), truncated by the
    tokenizer itself to `max_length` if given. A pair's word ids, which the tokenizer starts again at 0, are numbered
    after the text's; its segment ids are kept where the tokenizer gives them (`token_type_ids`)."""
    cut = {} if max_length is None else {"truncation": True, "max_length": max_length}
    out = tokenizer(text, pair, add_special_tokens=add_special_tokens, return_special_tokens_mask=True, **cut)
    ids = [int(i) for i in out["input_ids"]]
    special = [bool(flag) for flag in out.get("special_tokens_mask", [0] * len(ids))]
    words = None
    if getattr(out, "is_fast", False):
        words = [None if flag else word for word, flag in zip(out.word_ids(), special)]
        if pair is not None:
            offset = max((w for w, s in zip(words, out.sequence_ids()) if w is not None and s == 0), default=-1) + 1
            words = [w if w is None or s != 1 else w + offset for w, s in zip(words, out.sequence_ids())]
    types = out.get("token_type_ids") if pair is not None else None
    return _Row(ids, special, words, None if types is None else [int(t) for t in types])


def _truncated(
    tokenizer: Any, text: str, add_special_tokens: bool, budget: int, continuation: int, pair: str | None = None,
) -> _Row:
    """Return `text` (with its `pair`) cut to `budget` tokens as the tokenizer cuts it (`truncation=True`: on its
    truncation side, a pair's longer text first), its special tokens ([CLS] ... [SEP], <s>, </s>) kept, so the model
    sees what it saw in training.

    A budget with no room for one token of each text beside the special tokens is refused: the tokenizer would
    return only special tokens, or (below their count) log an error and return the whole text uncut.
    """
    specials = tokenizer.num_special_tokens_to_add(pair=pair is not None) if add_special_tokens else 0
    texts = 1 if pair is None else 2
    if budget < specials + texts:
        beside = f" and {continuation} continuation tokens" if continuation else ""
        each = "text" if pair is None else "each text of the pair"
        raise InputError(
            f"max_length={budget + continuation} leaves no room for {each} beside {specials} special tokens{beside};"
            f" use at least {specials + continuation + texts}."
        )
    row = _tokenize(tokenizer, text, add_special_tokens, budget, pair)
    if len(row.ids) > budget:
        raise InputError(f"the tokenizer returned {len(row.ids)} tokens when asked to truncate to {budget}; shorten the text.")
    return row


def pad_token_id(tokenizer: Any) -> int:
    """Return the id a batch is padded with: the pad token, else end-of-sequence, beginning, unknown, or 0."""
    for name in ("pad_token_id", "eos_token_id", "bos_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
        if isinstance(value, list) and value and isinstance(value[0], int):
            return value[0]
    return 0


def _padded(
    tokenizer: Any, rows: list[_Row], texts: list[str], truncated: tuple[bool, ...], continuation: tuple[int, ...],
    padding_side: Literal["left", "right"] | None = None,
) -> Encoded:
    """Return the Encoded of `rows`, padded to the longest on `padding_side` (None: the tokenizer's) with a token
    the attention mask hides."""
    left = (padding_side or getattr(tokenizer, "padding_side", "right")) == "left"
    length = max(len(row.ids) for row in rows)
    pad = pad_token_id(tokenizer)
    ids, mask, special, types = [], [], [], []
    words: list[tuple[int | None, ...]] = []
    pad_type = int(getattr(tokenizer, "pad_token_type_id", 0) or 0)
    for row in rows:
        fill = length - len(row.ids)

        def place(values: list[Any], value: Any) -> list[Any]:
            return [value] * fill + values if left else values + [value] * fill

        ids.append(place(row.ids, pad))
        mask.append(place([1] * len(row.ids), 0))
        special.append(place(row.special, True))
        if row.types is not None:
            types.append(place(row.types, pad_type))
        if row.words is not None:
            words.append(tuple(place(row.words, None)))
    input_ids = torch.tensor(ids, dtype=torch.long)
    tokens = [[str(token) for token in tokenizer.convert_ids_to_tokens(row)] for row in ids]
    return Encoded(
        input_ids=input_ids,
        attention_mask=torch.tensor(mask, dtype=torch.long),
        tokens=tokens,
        special=torch.tensor(special, dtype=torch.bool),
        token_type_ids=torch.tensor(types, dtype=torch.long) if types and len(types) == len(rows) else None,
        texts=tuple(texts),
        truncated=truncated,
        continuation=continuation,
        word_ids=tuple(words) if len(words) == len(rows) else (),
    )


def continued(tokenizer: Any, encoded: Encoded, continuations: Sequence[Sequence[int]]) -> Encoded:
    """Return `encoded` with `continuations[b]` (token ids) after example b's real tokens, re-padded on the
    tokenizer's padding side and counted in `Encoded.continuation`: the tokens a language model's explanation
    targets, one per token, as a text continuation's are (`encode`). This is how generated tokens
    (`interpret.decision.generate`) join the prompt they were generated from, unchanged (no decoding and re-tokenizing).
    Their words are read from the tokens' markers (`interpret.reading.text.marker_word_ids`), numbered after the prompt's.
    """
    if encoded.input_ids is None or encoded.continuation or len(continuations) != encoded.batch:
        raise InputError("continued() takes token ids without a continuation, and one continuation per example.")
    if encoded.pairs is not None:
        raise InputError("a continuation follows a single text; give texts without text pairs.")
    special_ids = set(getattr(tokenizer, "all_special_ids", []))
    scheme = token_scheme(tokenizer)
    rows = []
    for b, ids in enumerate(continuations):
        real = torch.nonzero(encoded.attention_mask[b] != 0).flatten().tolist()
        words = [encoded.word_ids[b][p] for p in real] if encoded.word_ids else None
        prompt = _Row([int(encoded.input_ids[b, p]) for p in real], [bool(encoded.special[b, p]) for p in real], words)
        special = [int(i) in special_ids for i in ids]
        tokens = [str(token) for token in tokenizer.convert_ids_to_tokens([int(i) for i in ids])]
        rows.append(prompt.joined(_Row([int(i) for i in ids], special, marker_word_ids(tokens, scheme, special))))
    out = _padded(tokenizer, rows, list(encoded.texts or ()), encoded.truncated, tuple(len(ids) for ids in continuations))
    return replace(out, texts=encoded.texts, scheme=scheme)


def from_ids(
    input_ids: Tensor, attention_mask: Tensor | None = None, tokenizer: Any | None = None
) -> Encoded:
    """Return the Encoded of a [batch, pos] tensor of token ids (all positions real unless masked)."""
    if input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
        raise InputError(
            f"token ids must be an integer tensor [batch, pos]; got {input_ids.dtype} of shape"
            f" {tuple(input_ids.shape)}."
        )
    # Held on the CPU like every Encoded made from text; the collector moves a batch to the model's device.
    input_ids = input_ids.cpu()
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.cpu()
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
