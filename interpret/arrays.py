"""The one way a tensor becomes a NumPy array: detached and on the host, whatever device the model runs on."""

from __future__ import annotations

import numpy as np
from torch import Tensor


def to_numpy(tensor: Tensor) -> np.ndarray:
    """Return `tensor` (any shape, any device, NumPy-compatible dtype) as a NumPy array of the same shape on the
    host: detached from autograd and copied off an accelerator (a CPU tensor's array shares its memory)."""
    return tensor.detach().cpu().numpy()
