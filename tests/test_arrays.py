"""One way from a tensor to NumPy (`interpret.arrays.to_numpy`): detached and on the host, so no analyzer, table
or report hands NumPy a CUDA tensor (`.cpu().numpy()` raises on one) or a tensor that requires grad."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch
from hf_tiny import TEST_DEVICE

from interpret.arrays import to_numpy

ROOT = Path(__file__).resolve().parents[1]


def test_a_tensor_on_the_test_device_that_requires_grad_becomes_a_host_array() -> None:
    tensor = torch.arange(6, dtype=torch.float64, device=TEST_DEVICE).view(2, 3).requires_grad_()
    array = to_numpy(tensor * 2)
    assert isinstance(array, np.ndarray) and array.shape == (2, 3)
    np.testing.assert_array_equal(array, np.arange(6, dtype=np.float64).reshape(2, 3) * 2)


def test_the_product_calls_numpy_only_through_the_helper() -> None:
    """Every `.cpu().numpy()` call of interpret/, plugins/ and cli/ is the helper's own."""
    calls = []
    for path in sorted(p for folder in ("interpret", "plugins", "cli") for p in (ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "numpy":
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert [call.split(":")[0] for call in calls] == ["interpret/arrays.py"], calls
