"""Position embeddings: the fixed sinusoids of Vaswani et al. (2017) or a learned table."""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interpret.errors import ConfigError, InputError
from interpret.reference.config import TransformerConfig

PositionTable = Float[Tensor, "pos d_model"]


def sinusoidal_table(n_positions: int, d_model: int) -> PositionTable:
    """Return [pos, d_model]: PE[p, 2i] = sin(p / 10000^(2i/d_model)), PE[p, 2i+1] = cos(same angle)."""
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    pair = torch.arange(0, d_model, 2, dtype=torch.float32)
    angle = position * torch.exp(pair * (-math.log(10000.0) / d_model))  # [pos, ceil(d_model / 2)]
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # an odd d_model has one sine column more
    return table


def check_length(n_positions: int, max_positions: int) -> None:
    """Return None, or raise InputError when a sequence of `n_positions` exceeds `max_positions`."""
    if n_positions > max_positions:
        raise InputError(
            f"sequence of {n_positions} positions is longer than max_positions={max_positions};"
            f" shorten or truncate it to at most {max_positions}."
        )


class PositionalEmbedding(nn.Module):
    """Position vectors for the first `pos` positions: [pos, d_model] (sinusoidal or learned)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if config.positions not in ("sinusoidal", "learned"):
            raise ConfigError(
                f"positions={config.positions!r} has no embedding table; use 'sinusoidal' or 'learned'."
            )
        self.kind = config.positions
        self.max_positions = config.max_positions
        if config.positions == "learned":
            self.table = nn.Parameter(torch.randn(config.max_positions, config.d_model) * 0.02)
        else:
            # Not persistent: the sinusoids are a function of the config, so they stay out of saved weights.
            self.register_buffer(
                "table", sinusoidal_table(config.max_positions, config.d_model), persistent=False
            )

    def forward(self, n_positions: int) -> PositionTable:
        """Return [pos, d_model] vectors for positions 0..n_positions-1; too long raises InputError."""
        check_length(n_positions, self.max_positions)
        return self.table[:n_positions]

    def extra_repr(self) -> str:
        return f"{self.kind}, max_positions={self.max_positions}"
