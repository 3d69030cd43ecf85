"""Per-head gates: scale each head's output where the heads enter the attention output projection.

transformers 5 removed `head_mask`; this is its replacement for the reference model and every Hugging Face
model the collector captures: a hook at the very place `hook_z` is read, which multiplies head `h` of layer
`l` by `gates[l, h]` — or, with gates [rows, layer, head], row `r` of the batch by `gates[r, l, h]`, so each
example of a batch has gates of its own. A gate of 1 changes nothing; a gate of 0 removes the head's
contribution, exactly as zeroing that head's columns of the output projection would. The hooks live in a hook
session and are removed when the `with` block ends, also on errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from jaxtyping import Float
from torch import Tensor, nn

from interpret.capture.sites import Site, on_its_call
from interpret.errors import ConfigError, HookNameError
from interpret.hooks import hook_session
from interpret.trace import summarize_names


def _gate_sites(model: nn.Module, prefix: str, attention: str) -> tuple[list[Site], int]:
    """Return the hook_z sites `{prefix}blocks.{i}.{attention}.hook_z` in layer order, and the head count."""
    from interpret.capture.api import capturable_for

    capturable = capturable_for(model)
    by_name = {site.name: site for site in capturable.sites}
    sites = []
    for layer in range(capturable.n_layers):
        site = by_name.get(f"{prefix}blocks.{layer}.{attention}.hook_z")
        if site is not None:
            sites.append(site)
    if not sites:
        z_names = [name for name in by_name if name.endswith(".hook_z")]
        raise HookNameError(
            f"no {prefix}blocks.{{i}}.{attention}.hook_z on this model to gate; it has: {summarize_names(z_names)};"
            " pick prefix= and attention= to match."
        )
    return sites, capturable.n_heads


def _scale(tensor: Tensor, gate: Tensor, heads_last: bool, packed: bool = False) -> Tensor:
    """Return `tensor` [batch, pos, ...] with head h scaled by gate[h] (gate [head]) or row r's head h by
    gate[r, h] (gate [batch, head]); heads are [..., head, d_head] (heads_last) or joined [..., head*d_head].
    packed: the tensor holds every example's positions in its leading axes, example after example ([batch × pos,
    ...] or [1, batch × pos, ...]), so row r's gates act on the r-th equal share of them."""
    gate = gate.to(device=tensor.device, dtype=tensor.dtype)
    if gate.dim() == 2 and packed:
        lead = tensor.shape[:-2] if heads_last else tensor.shape[:-1]
        rows = math.prod(lead)
        if rows % gate.shape[0]:
            raise ConfigError(
                f"per-row gates have {gate.shape[0]} rows but the packed sequence has {rows} positions, no equal"
                " share per example; give one row per example."
            )
        gate = gate.repeat_interleave(rows // gate.shape[0], dim=0).view(*lead, gate.shape[-1])
    elif gate.dim() == 2:
        if gate.shape[0] != tensor.shape[0]:
            raise ConfigError(
                f"per-row gates have {gate.shape[0]} rows but the batch has {tensor.shape[0]}; give one row per example."
            )
        gate = gate[:, None, :]  # [batch, 1 (pos), head]
    split = tensor if heads_last else tensor.view(*tensor.shape[:-1], gate.shape[-1], -1)
    return (split * gate[..., None]).view(tensor.shape)


@contextmanager
def head_gates(
    model: nn.Module,
    gates: Float[Tensor, "*rows layer head"],
    *,
    prefix: str = "",
    attention: str = "attn",
) -> Iterator[None]:
    """Yield while the output of head h in layer l is scaled by gates[l, h] (gates: [layer, head]), or that of
    batch row r by gates[r, l, h] (gates: [rows, layer, head]).

    Gradients flow to `gates` when it requires them (head importance as d loss / d gate).
    prefix: "" for one-stack models, "encoder." or "decoder." for encoder-decoder models.
    attention: "attn" (self attention) or "cross_attn" (an encoder-decoder's cross attention).
    """
    sites, n_heads = _gate_sites(model, prefix, attention)
    if gates.dim() not in (2, 3) or tuple(gates.shape[-2:]) != (len(sites), n_heads):
        raise ConfigError(
            f"gates have shape {tuple(gates.shape)} but this model has {len(sites)} layers of {n_heads} heads;"
            f" pass a tensor of shape ({len(sites)}, {n_heads}) or (rows, {len(sites)}, {n_heads})."
        )
    with hook_session() as session:
        for layer, site in enumerate(sites):
            assert site.module is not None
            gate = gates[..., layer, :]  # [head] or [rows, head]
            if site.pre:  # the joined heads [batch, pos, head * d_head] entering the output projection
                session.add(site.module, on_its_call(site, partial(_gate_input, gate, site.packed)), pre=True)
            else:  # a hook point that passes z on as [batch, pos, head, d_head]
                session.add(site.module, on_its_call(site, partial(_gate_output, gate, site.packed)))
        yield


def _gate_input(gate: Tensor, packed: bool, module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (_scale(args[0], gate, heads_last=False, packed=packed), *args[1:])


def _gate_output(gate: Tensor, packed: bool, module: nn.Module, args: tuple[Any, ...], output: Tensor) -> Tensor:
    return _scale(output, gate, heads_last=True, packed=packed)
