"""The reference models: encoder, decoder, encoder-decoder, classifier and decoder-only language model.

All are batch-first. Hook names are module paths (see `layers` for the names inside a block):
    Encoder, EncoderClassifier, DecoderLM: hook_embed, hook_pos_embed, blocks.{i}.*; EncoderClassifier adds
        hook_pooled [batch, d_model].
    EncoderDecoder: encoder.hook_embed, encoder.hook_pos_embed, encoder.blocks.{i}.*, decoder.hook_embed,
        decoder.hook_pos_embed, decoder.blocks.{i}.* (with decoder.blocks.{i}.cross_attn.*).
    Decoder (a decoder half on its own, e.g. converted from nn.TransformerDecoder): the decoder.* names of
        EncoderDecoder, so captures read the same; its Encoded carries the memory.
hook_pos_embed exists only when config.positions is not "none"; hook_embed sees the token embeddings, or
the given inputs_embeds for a model without an embedding layer (vocab_size=None).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interpret.errors import ConfigError, InputError
from interpret.hooks import HookPoint, stamp_names
from interpret.inputs import Encoded
from interpret.reference.config import TransformerConfig
from interpret.reference.layers import DecoderLayer, EncoderLayer, Memory
from interpret.reference.masks import attention_allowed, padding_allowed
from interpret.reference.positions import PositionalEmbedding, check_length
from interpret.trace import ModelKind
from interpret.types import Residual, TokenIds

DecoderIds = Int[Tensor, "batch dec_pos"]
DecoderStream = Float[Tensor, "batch dec_pos d_model"]


class ReferenceModel(nn.Module):
    """Base of the reference models: a config, a kind, named hook points and a forward on an Encoded (what every
    model of our reference implementation offers to the collector)."""

    kind: ClassVar[ModelKind]

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config

    @property
    def n_layers(self) -> int:
        """Number of blocks (per stack for encoder-decoder models)."""
        raise NotImplementedError

    def hook_points(self) -> dict[str, HookPoint]:
        """Return every hook point by its module path (`blocks.0.attn.hook_pattern`), in forward order."""
        return stamp_names(self)

    def forward_encoded(self, encoded: Encoded) -> Tensor:
        """Run the model on an Encoded (ids or embeddings, mask, decoder side) and return its output."""
        raise NotImplementedError


class _Stack(ReferenceModel):
    """Embeddings, a list of blocks and an optional final LayerNorm."""

    def __init__(self, config: TransformerConfig, blocks: list[nn.Module]) -> None:
        super().__init__(config)
        if config.vocab_size is not None:
            self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.hook_embed = HookPoint("batch pos d_model")
        if config.positions != "none":
            self.pos_embed = PositionalEmbedding(config)
            self.hook_pos_embed = HookPoint("batch pos d_model")
        self.blocks = nn.ModuleList(blocks)
        if config.final_norm:
            self.ln_final = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)

    def embed_inputs(self, input_ids: TokenIds | None, inputs_embeds: Residual | None) -> Residual:
        """Return the [batch, pos, d_model] stream entering block 0: token (or given) + position vectors."""
        if (input_ids is None) == (inputs_embeds is None):
            raise InputError(
                "pass exactly one of input_ids [batch, pos] and inputs_embeds [batch, pos, d_model]."
            )
        if input_ids is not None and self.config.vocab_size is None:
            raise InputError(
                "this model has no embedding layer (vocab_size=None); pass inputs_embeds [batch, pos, d_model]."
            )
        given = input_ids if input_ids is not None else inputs_embeds
        assert given is not None
        check_length(given.shape[1], self.config.max_positions)
        resid = self.hook_embed(self.embed(input_ids) if input_ids is not None else inputs_embeds)
        if self.config.positions != "none":
            table = self.pos_embed(resid.shape[1])
            resid = resid + self.hook_pos_embed(table.expand(resid.shape[0], -1, -1))
        return resid

    def self_allowed(self, resid: Residual, attention_mask: Tensor | None, *, causal: bool) -> Tensor:
        """Return the self-attention mask [batch or 1, 1, pos, pos]: padding, causal and window combined."""
        batch, pos = resid.shape[:2]
        return attention_allowed(
            attention_mask, batch=batch, n_query=pos, n_key=pos, causal=causal, window=self.config.window,
            device=resid.device,
        )

    def finish(self, resid: Residual) -> Residual:
        """Return [batch, pos, d_model] after the final LayerNorm (unchanged without one)."""
        return self.ln_final(resid) if self.config.final_norm else resid


class _SelfAttentionStack(_Stack):
    """A stack of EncoderLayers (causal for a DecoderLM whose `config.causal` says so, else bidirectional) and
    its `readout` of the final stream."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, [EncoderLayer(config) for _ in range(config.n_layers)])

    @property
    def n_layers(self) -> int:
        """Number of blocks."""
        return self.config.n_layers

    def forward_encoded(self, encoded: Encoded) -> Tensor:
        """Return the model's output (as `forward` gives it) for the ids or embeddings and mask of `encoded`."""
        return self(encoded.input_ids, encoded.attention_mask, encoded.inputs_embeds)

    def forward(
        self,
        input_ids: TokenIds | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Residual | None = None,
    ) -> Tensor:
        """Return the `readout` of the final stream; attention_mask [batch, pos] has 1 at real positions, 0 at
        padding."""
        resid = self.embed_inputs(input_ids, inputs_embeds)
        allowed = self.self_allowed(resid, attention_mask, causal=self.kind == "decoder" and self.config.causal)
        for block in self.blocks:
            resid = block(resid, allowed)
        return self.readout(self.finish(resid), attention_mask)

    def readout(self, resid: Residual, attention_mask: Tensor | None) -> Tensor:
        """Return the final stream [batch, pos, d_model] itself."""
        return resid


class Encoder(_SelfAttentionStack):
    """Bidirectional encoder stack; forward returns the final stream [batch, pos, d_model]."""

    kind = "encoder"


class EncoderClassifier(_SelfAttentionStack):
    """Encoder, pooling (first token or mean of real positions), linear head; returns [batch, n_classes]."""

    kind = "encoder"

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.hook_pooled = HookPoint("batch d_model")
        self.classifier = nn.Linear(config.d_model, config.n_classes, bias=config.bias)

    def readout(self, resid: Residual, attention_mask: Tensor | None) -> Float[Tensor, "batch n_classes"]:
        """Return class logits [batch, n_classes]."""
        if self.config.pooling == "first":
            pooled = resid[:, 0]
        else:
            real = (
                torch.ones(resid.shape[:2], device=resid.device) if attention_mask is None else attention_mask
            )
            weight = (real != 0).to(resid.dtype)[:, :, None]
            pooled = (resid * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1.0)
        return self.classifier(self.hook_pooled(pooled))


class DecoderLM(_SelfAttentionStack):
    """Decoder-only language model (causal self-attention unless `config.causal` is False, no cross-attention):
    logits [batch, pos, vocab]."""

    kind = "decoder"

    def __init__(self, config: TransformerConfig) -> None:
        if config.vocab_size is None:
            raise ConfigError(
                "DecoderLM needs vocab_size; set vocab_size to the tokenizer's vocabulary size."
            )
        super().__init__(config)
        self.unembed = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def readout(self, resid: Residual, attention_mask: Tensor | None) -> Float[Tensor, "batch pos vocab"]:
        """Return next-token logits [batch, pos, vocab]."""
        return self.unembed(resid)


class Decoder(_Stack):
    """Decoder stack (self-attention, cross-attention to a memory, MLP); returns [batch, pos, d_model].

    Its hook names are prefixed `decoder.` as inside EncoderDecoder. Through `forward_encoded` the memory is
    the main side of the Encoded (inputs_embeds [batch, key, d_model], attention_mask) and the target is
    `encoded.decoder`.
    """

    kind = "encoder-decoder"

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, [DecoderLayer(config) for _ in range(config.n_decoder_blocks)])

    @property
    def n_layers(self) -> int:
        """Number of decoder blocks."""
        return self.config.n_decoder_blocks

    def hook_points(self) -> dict[str, HookPoint]:
        """Return every hook point by name (`decoder.blocks.0.cross_attn.hook_pattern`), in forward order."""
        return stamp_names(self, prefix="decoder.")

    def forward(
        self,
        input_ids: TokenIds | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Residual | None = None,
        *,
        memory: Memory,
        memory_mask: Tensor | None = None,
    ) -> Residual:
        """Return [batch, pos, d_model] of the target attending to `memory` [batch, key, d_model].

        attention_mask: [batch, pos] target padding; memory_mask: [batch, key] memory padding (1 real, 0 pad).
        """
        resid = self.embed_inputs(input_ids, inputs_embeds)
        allowed = self.self_allowed(resid, attention_mask, causal=self.config.causal)
        memory_allowed = None
        if memory_mask is not None:
            memory_allowed = padding_allowed(memory_mask.to(resid.device), resid.shape[0], memory.shape[1])
        for block in self.blocks:
            resid = block(resid, memory, allowed, memory_allowed)
        return self.finish(resid)

    def forward_encoded(self, encoded: Encoded) -> Residual:
        """Return [batch, pos, d_model] for the target `encoded.decoder`, memory `encoded.inputs_embeds`."""
        if encoded.inputs_embeds is None or encoded.decoder is None:
            raise InputError(
                "a Decoder reads its memory from encoded.inputs_embeds [batch, key, d_model] and its target"
                " from encoded.decoder; pass the memory as inputs and the target as decoder_inputs."
            )
        target = encoded.decoder
        return self(
            target.input_ids,
            target.attention_mask,
            target.inputs_embeds,
            memory=encoded.inputs_embeds,
            memory_mask=encoded.attention_mask,
        )


class EncoderDecoder(ReferenceModel):
    """Encoder and decoder stacks; returns [batch, dec_pos, vocab] logits with vocab_size, else the decoder
    stream [batch, dec_pos, d_model] (as nn.Transformer)."""

    kind = "encoder-decoder"

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        if config.vocab_size is not None:
            self.unembed = nn.Linear(config.d_model, config.vocab_size, bias=False)

    @property
    def n_layers(self) -> int:
        """Number of blocks per stack (the larger, when the stacks differ)."""
        return max(self.config.n_layers, self.config.n_decoder_blocks)

    def forward(
        self,
        input_ids: TokenIds | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Residual | None = None,
        decoder_input_ids: DecoderIds | None = None,
        decoder_attention_mask: Tensor | None = None,
        decoder_inputs_embeds: DecoderStream | None = None,
    ) -> Float[Tensor, "batch dec_pos out"]:
        """Return [batch, dec_pos, vocab] logits (or [batch, dec_pos, d_model] without vocab_size).

        The encoder reads input_ids / inputs_embeds with attention_mask [batch, pos]; the decoder reads
        decoder_input_ids / decoder_inputs_embeds with decoder_attention_mask [batch, dec_pos].
        """
        memory = self.encoder(input_ids, attention_mask, inputs_embeds)
        hidden = self.decoder(
            decoder_input_ids,
            decoder_attention_mask,
            decoder_inputs_embeds,
            memory=memory,
            memory_mask=attention_mask,
        )
        return self.unembed(hidden) if self.config.vocab_size is not None else hidden

    def forward_encoded(self, encoded: Encoded) -> Float[Tensor, "batch dec_pos out"]:
        """Return the output of `forward` for the encoder side of `encoded` and its `decoder` side."""
        target = encoded.decoder
        if target is None:
            raise InputError(
                "an encoder-decoder model needs decoder inputs; pass decoder_inputs= (text or ids)."
            )
        return self(
            encoded.input_ids,
            encoded.attention_mask,
            encoded.inputs_embeds,
            target.input_ids,
            target.attention_mask,
            target.inputs_embeds,
        )
