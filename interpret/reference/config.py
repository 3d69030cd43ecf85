"""`TransformerConfig`: every size and choice of a reference model, validated once when it is built."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from interpret.errors import ConfigError, listing, suggest

POSITIONS = ("sinusoidal", "learned", "none")
SCORINGS = ("scaled_dot", "dot", "additive")
ACTIVATIONS = ("relu", "gelu")
POOLINGS = ("first", "mean")


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes and choices of a reference Transformer (all models are batch-first).

    d_model: width of the residual stream; must be divisible by n_heads unless head_dim is given.
    n_heads: attention heads per layer; d_head = d_model // n_heads, or head_dim.
    n_layers: blocks of the encoder stack (or of the only stack).
    n_decoder_layers: blocks of the decoder stack; None means the same as n_layers.
    d_mlp: hidden width of each MLP; None means 4 * d_model.
    vocab_size: token embedding size; None means no embedding layer (inputs are embeddings, as for a stack
        converted from PyTorch).
    max_positions: the longest sequence a model accepts.
    positions: "sinusoidal" (Vaswani et al.), "learned", or "none".
    scoring: "scaled_dot" (q·k / sqrt(d_head)), "dot" (q·k), or "additive" (Bahdanau, per head:
        v·tanh(W_q q + W_k k)).
    packed_qkv: one input projection [3 * d_model, d_model] as in nn.MultiheadAttention, or separate W_q,
        W_k, W_v.
    window: local self-attention, key j allowed iff |i - j| <= window (causal: i - window <= j <= i);
        None attends everywhere. Cross-attention is never windowed.
    norm_first: pre-norm (LayerNorm before each sub-block) or post-norm (after the residual sum).
    activation: "relu" or "gelu" (exact, not the tanh approximation).
    layer_norm_eps: epsilon of every LayerNorm.
    dropout: dropout on the pattern and after each sub-block, as PyTorch places it; only active in training.
    bias: whether projections and LayerNorms have a bias.
    final_norm: a LayerNorm after the last block of each stack (nn.TransformerEncoder's `norm`).
    causal: self-attention of decoder stacks (Decoder, DecoderLM, the decoder of EncoderDecoder) is causal;
        encoder stacks always attend in both directions.
    n_classes: outputs of EncoderClassifier.
    pooling: how EncoderClassifier pools the sequence: "first" token or "mean" over real positions.
    head_dim: the width of one head when it is not d_model // n_heads (a model whose heads were pruned:
        q, k, v project to n_heads * head_dim and the output projection maps that back to d_model).
    """

    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    n_decoder_layers: int | None = None
    d_mlp: int | None = None
    vocab_size: int | None = None
    max_positions: int = 512
    positions: str = "sinusoidal"
    scoring: str = "scaled_dot"
    packed_qkv: bool = True
    window: int | None = None
    norm_first: bool = False
    activation: str = "relu"
    layer_norm_eps: float = 1e-5
    dropout: float = 0.0
    bias: bool = True
    final_norm: bool = False
    causal: bool = True
    n_classes: int = 2
    pooling: str = "first"
    head_dim: int | None = None

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "n_layers", "max_positions", "n_classes"):
            _check_positive(name, getattr(self, name))
        for name in ("n_decoder_layers", "d_mlp", "vocab_size", "head_dim"):
            if getattr(self, name) is not None:
                _check_positive(name, getattr(self, name))
        if self.head_dim is None and self.d_model % self.n_heads:
            divisors = [n for n in range(1, self.d_model + 1) if self.d_model % n == 0]
            shown = ", ".join(map(str, divisors[:5])) + (", ..." if len(divisors) > 5 else "")
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; pick n_heads in {shown}."
            )
        choices = (("positions", POSITIONS), ("scoring", SCORINGS), ("activation", ACTIVATIONS), ("pooling", POOLINGS))
        for name, allowed in choices:
            _check_choice(name, getattr(self, name), allowed)
        if self.window is not None and (
            isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0
        ):
            raise ConfigError(f"window={self.window!r} is not allowed; use None or an integer >= 0.")
        if not self.layer_norm_eps > 0:
            raise ConfigError(f"layer_norm_eps={self.layer_norm_eps!r} must be > 0, e.g. 1e-5.")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout!r} must be in [0, 1); use 0 for exact comparisons.")
        # Resolve the "same as" defaults once, so every reader sees plain ints.
        if self.n_decoder_layers is None:
            object.__setattr__(self, "n_decoder_layers", self.n_layers)
        if self.d_mlp is None:
            object.__setattr__(self, "d_mlp", 4 * self.d_model)

    @property
    def d_head(self) -> int:
        """Width of one head: head_dim, else d_model // n_heads."""
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    @property
    def d_attn(self) -> int:
        """Width of the joined heads: n_heads * d_head (d_model unless head_dim is given)."""
        return self.n_heads * self.d_head

    @property
    def n_decoder_blocks(self) -> int:
        """Blocks of the decoder stack (n_decoder_layers, resolved)."""
        return int(self.n_decoder_layers or self.n_layers)

    @property
    def mlp_width(self) -> int:
        """Hidden width of each MLP (d_mlp, resolved)."""
        return int(self.d_mlp or 4 * self.d_model)

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TransformerConfig:
        """Return the config of a dict written by `to_dict`; unknown keys are refused."""
        known = [field.name for field in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                raise ConfigError(
                    f"unknown config key {key!r};{suggest(key, known)} known keys: {listing(known, 30)}."
                )
        return cls(**dict(values))


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r} is not allowed; use an integer >= 1.")


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        options = ", ".join(repr(choice) for choice in allowed)
        hint = suggest(value, allowed) if isinstance(value, str) else ""
        raise ConfigError(f"{name}={value!r} is not known; use one of {options}.{hint}")
