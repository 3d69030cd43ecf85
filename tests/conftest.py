"""Test set-up: offline hub, seeded generators, and run-time checking of the tensor shape annotations."""

from __future__ import annotations

import os
import random

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Triton's kernels (interpret.streaming.triton_attention) run without a GPU only in Triton's interpreter, which
# Triton reads as it is imported: set before anything imports it, unless the tests run on CUDA.
if not os.environ.get("INTERPRET_TEST_DEVICE", "cpu").startswith("cuda"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

from jaxtyping import install_import_hook  # noqa: E402

# Every annotated function of the library is checked against its jaxtyping/beartype annotations while the
# tests run; this has to be installed before `interpret` is first imported.
_hook = install_import_hook("interpret", "beartype.beartype")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

# Tiny models run op by op: one torch thread per test process (xdist runs one per core) is an order of
# magnitude faster than threads that wait on each other on a shared machine. INTERPRET_TEST_THREADS overrides.
torch.set_num_threads(int(os.environ.get("INTERPRET_TEST_THREADS", "1")))


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
