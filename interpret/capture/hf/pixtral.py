"""Adapter for Pixtral's vision encoder: a batch of images captured as a batch.

What it adds over the generic adapter: a batch axis. Pixtral's encoder joins the patches of every image of a batch
into one sequence [1, images × patches, d_model] and runs each block's attention once over it, a block-diagonal
mask keeping the images apart; the generic adapter captures one image at a time and refuses a batch (its tensors
are not [batch, positions]). This adapter unpacks them with the packed adapter's transforms (`packed.unpacked`):
module tensors [1, batch × pos, ...] become [batch, pos, ...], and each block's one kernel call is cut at the
images' boundaries, each image keeping its diagonal block of the pattern (the mask gave every other block nothing).
A batch's images share one size (`pixel_values` [batch, channel, height, width]); a batch of one is captured as
the generic adapter captures it, in the autograd graph, while a larger batch's unpacked tensors are copies the model
never reads, so a capture of them with gradients is refused.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.packed import unpacked
from interpret.capture.sites import Capturable

NAME = "pixtral"


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a Pixtral vision encoder, a batch of images read as a batch."""
    layout = generic.layout_of(model)
    return unpacked(generic.capturable(model, layout, adapter=NAME))


ADAPTER = HFAdapter(
    model_types=("pixtral",),
    build=build,
    adds="a batch of images unpacked from the one sequence the encoder joins them into (block-diagonal mask)",
)
