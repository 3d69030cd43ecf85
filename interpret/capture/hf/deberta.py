"""Adapter for DeBERTa and DeBERTa-v2/v3: disentangled attention, computed inside the module.

What it adds over the generic adapter: DeBERTa's `DisentangledSelfAttention` forms its scores itself (content
to content, content to position and position to content, each with its own scale) and never calls
transformers' attention interface. So the attention modules are found by class, not by a kernel call, and
the pattern is the module's own softmax output: each call is made with `output_attentions=True` (the module
then returns the probabilities it computed anyway, and its caller drops them unless asked, so the model's
outputs are unchanged). `hook_q|k|v` are the content projections (`query_proj`, `key_proj`, `value_proj`;
DeBERTa-v1 merges them with separate biases, so it offers none); `hook_attn_scores` is not offered (the
three score terms are summed inside the module). Everything else (blocks, output projection, MLP, norms,
gates) is the generic adapter's.
"""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any

from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.probe import Probe
from interpret.capture.hf.structure import AttentionCall, ModelLayout, model_layout
from interpret.capture.sites import Capturable, Site, Sink
from interpret.errors import UnsupportedModelError
from interpret.hooks import HookSession

ATTENTION_CLASS = "DisentangledSelfAttention"
SCORES_WHY = "DeBERTa sums its content and relative-position score terms inside the module; read hook_pattern"
MERGED_WHY = "DeBERTa-v1 projects query, key and value in one merged in_proj with separate biases"
LSE_WHY = "DeBERTa computes its softmax inside the module (no attention kernel returns a normaliser); read hook_pattern"
_KERNEL_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_lse")


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a DeBERTa model (any task head): generic sites, with the attention read from
    each DisentangledSelfAttention module."""
    layout = generic.layout_of(model, discover=_discover)
    unsupported: dict[str, str] = {}
    base = generic.capturable(model, layout, adapter="deberta")
    sites: list[Site] = []
    for site in base.sites:
        attention, _, hook = site.name.rpartition(".")
        if hook not in _KERNEL_HOOKS:
            sites.append(site)
            continue
        module = site.module
        assert module is not None
        if hook == "hook_attn_scores":
            unsupported[site.name] = SCORES_WHY
        elif hook == "hook_lse":
            unsupported[site.name] = LSE_WHY
        elif hook == "hook_pattern":
            sites.append(Site(site.name, site.axes, site.sizes, module=module, attach=partial(_attach_pattern, module),
                              itemsize=4, side=site.side))
        else:
            projection = getattr(module, {"hook_q": "query_proj", "hook_k": "key_proj", "hook_v": "value_proj"}[hook], None)
            if not isinstance(projection, nn.Module):
                unsupported[site.name] = MERGED_WHY
                continue
            heads, size = site.sizes["head"], site.sizes["d_head"]
            sites.append(Site(site.name, site.axes, site.sizes, module=projection, read=partial(_split_heads, heads, size),
                              side=site.side))
    base.sites = sites
    base.unsupported = {**base.unsupported, **unsupported}
    return base


def _discover(model: nn.Module, probe: Probe) -> ModelLayout:
    """Return the layout with the DisentangledSelfAttention modules' calls standing for kernel calls."""
    calls = []
    for call in probe.calls:
        module = probe.modules[call.path]
        if type(module).__name__ != ATTENTION_CLASS or call.in_shape is None:
            continue
        heads = int(module.num_attention_heads)
        size = int(module.attention_head_size)
        # Ordered at the module's end, so the output projection is searched after its own q/k/v projections.
        calls.append(AttentionCall(call.path, call.end, heads, heads, size, size, call.in_shape[1], call.in_shape[1]))
    if not calls:
        raise UnsupportedModelError(
            f"{type(model).__name__} has no {ATTENTION_CLASS} module called in a forward pass; the DeBERTa adapter"
            " does not match this transformers version."
        )
    return model_layout(model, probe, calls)


def _attach_pattern(module: nn.Module, session: HookSession, sink: Sink) -> None:
    """Make `module` return its probabilities and pass them on as float32 [batch, head, query, key]."""
    session.add(module, _ask_for_weights, pre=True, with_kwargs=True)
    session.add(module, partial(_read_weights, sink))


def _ask_for_weights(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    bound.arguments["output_attentions"] = True
    return tuple(bound.args), dict(bound.kwargs)


def _read_weights(sink: Sink, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
    weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
    if isinstance(weights, Tensor):
        sink(weights.float())


def _split_heads(heads: int, size: int, args: tuple[Any, ...], kwargs: Any, output: Tensor) -> Tensor:
    return output.view(*output.shape[:-1], heads, size)


ADAPTER = HFAdapter(
    model_types=("deberta", "deberta-v2"),
    build=build,
    adds="attention read from DisentangledSelfAttention's own probabilities (no kernel call); no hook_attn_scores",
)
