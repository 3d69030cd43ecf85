"""Where each layer's heads live in the weights: the query, key and value projections (separate, or one fused
[q | k | v] projection) and the output projection, found from the module structure.

The output projection is the module the head gates act on (`interpret.capture.gates`: the input of the
attention output projection). The query, key and value projections are found in the smallest module above it
that holds projections named for them (q_proj / query / q_lin / query_proj / q, ...; fused: c_attn, qkv_proj,
Wqkv, in_proj). Layouts this cannot read (GPT-NeoX's per-head interleaved query_key_value) raise
UnsupportedModelError; the heads can then still be removed by zeroing, which needs only the output projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from transformers.pytorch_utils import Conv1D

from interpret.errors import UnsupportedModelError

_QUERY = {"q_proj", "query", "q_lin", "q", "query_proj", "wq"}
_KEY = {"k_proj", "key", "k_lin", "k", "key_proj", "wk"}
_VALUE = {"v_proj", "value", "v_lin", "v", "value_proj", "wv"}
_FUSED = {"c_attn", "qkv_proj", "wqkv", "qkv", "in_proj"}


@dataclass(frozen=True)
class LayerParts:
    """One attention layer's projections as module paths under the model.

    out: the output projection (input [.., n_heads * d_head]). query / key / value: separate projections, or
    fused: one projection whose output is [q (n_heads * d_head) | k (n_kv * d_head) | v (n_kv * d_head)].
    """

    out: str
    query: str | None = None
    key: str | None = None
    value: str | None = None
    fused: str | None = None


def layer_parts(model: nn.Module, out_paths: list[str]) -> list[LayerParts]:
    """Return each layer's parts, given the path of its output projection (one per layer, in order)."""
    modules = dict(model.named_modules())
    return [_find(out, modules, type(model).__name__) for out in out_paths]


def _find(out: str, modules: dict[str, nn.Module], model_name: str) -> LayerParts:
    scope = out.rsplit(".", 1)[0] if "." in out else ""
    for _ in range(3):  # the attention module, or at most two levels above it: never another layer's weights
        found: dict[str, str] = {}
        prefix = scope + "." if scope else ""
        for path, module in modules.items():  # projections: nn.Linear or GPT-2's Conv1D (weight [in, out])
            if not path.startswith(prefix) or path == out or not isinstance(module, (nn.Linear, Conv1D)):
                continue
            leaf = path.rsplit(".", 1)[-1].lower()
            for role, names in (("query", _QUERY), ("key", _KEY), ("value", _VALUE), ("fused", _FUSED)):
                if leaf in names and role not in found:
                    found[role] = path
        if "fused" in found and not {"query", "key", "value"} & found.keys():
            return LayerParts(out=out, fused=found["fused"])
        if {"query", "key", "value"} <= found.keys():
            return LayerParts(out=out, query=found["query"], key=found["key"], value=found["value"])
        if not scope:
            break
        scope = scope.rsplit(".", 1)[0] if "." in scope else ""
    raise UnsupportedModelError(
        f"no query, key and value projections of a layout this can slice were found near {out!r} in"
        f" {model_name}; its heads can be removed by zeroing only."
    )


def out_axis(module: nn.Module) -> int:
    """Return the weight axis of a projection's outputs: 0 for nn.Linear ([out, in]), 1 for Conv1D ([in, out])."""
    return 1 if isinstance(module, Conv1D) else 0
