"""`ReferenceModel`: what every model of our reference implementation offers to the collector."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from interpret.hooks import HookPoint, stamp_names
from interpret.inputs import Encoded
from interpret.reference.config import TransformerConfig
from interpret.trace import ModelKind


class ReferenceModel(nn.Module):
    """Base of the reference models: a config, a kind, named hook points and a forward on an Encoded."""

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
