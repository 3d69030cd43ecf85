"""One patch grid for hierarchical vision models whose stages attend over coarser grids (Swin's windows and
merged tokens, SegFormer's and PVT v2's pooled keys).

Every block's tensors are put on the grid of the first stage's patches (`patch_{row}_{col}`), so all blocks share
one position axis and rollout composes across stages: a token of a grid `factor` times coarser than the patch
grid stands for the factor × factor patches under it (`parents`); each of those patches reads the token's
vector, and a pattern gives a key token's weight to its patches in equal shares (a score: minus the log of the
share count), so every row still sums to one. A tensor put on the grid is a copy the model never reads, so a
capture with gradients is refused (`no_graph`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf.attention import AttentionRecorder
from interpret.capture.hf.layout import StackLayout, stack_sites
from interpret.capture.sites import Site, Sink
from interpret.errors import NoGradientError

_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def staged_sites(
    model: nn.Module,
    stages: list[StackLayout],
    recorder: AttentionRecorder,
    lift: Callable[[int, Site, str], Site | str],
) -> tuple[list[Site], dict[str, str], int]:
    """Return (sites, {hook name: why not offered}, layers) of every stage's blocks, numbered across stages
    (`blocks.0` … `blocks.{layers − 1}`), each put on the patch grid by `lift(stage index, site, name)`, which
    returns the lifted site or why it is not offered. `hook_embed` is stage 0's, `ln_final` the last stage's, and
    `hook_z` (where head gates act, as one [layer, head] tensor) is offered only when every stage has the same
    heads."""
    heads = {stage.n_heads for stage in stages}
    sites: list[Site] = []
    unsupported: dict[str, str] = {}
    offset = 0
    for index, stage in enumerate(stages):
        last = index == len(stages) - 1
        stage_sites, stage_missing = stack_sites(model, stage, recorder)
        for site in stage_sites:
            if (site.name == "hook_embed" and index > 0) or (site.name.startswith("ln_final.") and not last):
                continue
            name = renumber(site.name, offset)
            made = ("the stages differ in head count, so per-head gates [layer, head] do not apply"
                    if site.name.endswith(".hook_z") and len(heads) > 1 else lift(index, site, name))
            if isinstance(made, str):
                unsupported[name] = made
            else:
                sites.append(made)
        unsupported.update({renumber(name, offset): why for name, why in stage_missing.items()
                            if not name.startswith("ln_final.") or last})
        offset += len(model.get_submodule(stage.blocks))
    return sites, unsupported, offset


def parents(patch_grid: tuple[int, int], factor: int, grid: tuple[int, int]) -> Tensor:
    """Return [patches]: the token (row-major) of `grid`, `factor` times coarser, that each patch lies under."""
    rows = torch.arange(patch_grid[0])[:, None] // factor
    cols = torch.arange(patch_grid[1])[None, :] // factor
    return (rows * grid[1] + cols).reshape(-1)


def renumber(name: str, offset: int) -> str:
    """Return a stage's hook name with its block index moved by `offset` (blocks numbered across stages)."""
    return _BLOCK.sub(lambda match: f"blocks.{int(match.group(1)) + offset}.", name)


def lifted(site: Site, name: str, transform: Callable[[Tensor], Tensor], family: str) -> Site:
    """Return `site` renamed, its tensor passed through `transform` (onto the patch grid) before it is stored."""
    check = partial(no_graph, _grid_copies(family))
    if site.attach is not None:
        return replace(site, name=name, attach=partial(_attach, site.attach, transform, check), fresh=True)
    return replace(site, name=name, read=partial(_read, site.read, transform, check), fresh=True)


def _attach(attach: Callable[[Any, Sink], None], transform: Callable[[Tensor], Tensor],
            check: Callable[[Tensor], Tensor], session: Any, sink: Sink) -> None:
    attach(session, lambda tensor: sink(transform(check(tensor))))


def _read(read: Any, transform: Callable[[Tensor], Tensor], check: Callable[[Tensor], Tensor],
          args: tuple[Any, ...], kwargs: Any, output: Any) -> Tensor:
    return transform(check(read(args, kwargs, output)))


def no_graph(why: str, tensor: Tensor) -> Tensor:
    """Return `tensor`, or raise NoGradientError saying `why` when it is captured for gradients: a tensor an
    adapter re-arranged (put on the patch grid, unpacked from a packed sequence) is a copy the model never reads, so
    the model's output has no gradient with respect to it."""
    if tensor.requires_grad and torch.is_grad_enabled():
        raise NoGradientError(why)
    return tensor


def _grid_copies(family: str) -> str:
    return (f"{family}'s tensors are put on the patch grid from the windows and stages the model computes with, so"
            f" the model's output has no gradient with respect to them; capture {family} without gradients.")


def lift_tokens(index: Tensor, tokens: Tensor) -> Tensor:
    """Return [batch, patches, ...] from [batch, tokens, ...]: each patch reads its token (`index`: `parents`);
    always a copy (the token tensor may be one the model later writes in place, and a lifted site is stored as
    it comes)."""
    return tokens.index_select(1, index.to(tokens.device))


def lift_square(queries: Tensor, keys: Tensor, share: int, pattern: bool, square: Tensor) -> Tensor:
    """Return [batch, head, patches, patches] from [batch, head, query token, key token]: each patch reads its
    query token's row (`queries`: `parents` of the query grid), and a key token's weight is shared equally among
    the `share` patches under it (a score: minus log(share)). The share is taken on the token grid, before the
    [patches, patches] copy is made, so that copy is written once."""
    if share > 1:
        square = square / share if pattern else square - math.log(share)
    return _select(_select(square, 2, queries), 3, keys)


def _select(tensor: Tensor, axis: int, index: Tensor) -> Tensor:
    """Return `tensor.index_select(axis, index)`, or `tensor` itself where `index` is 0, 1, ... over the axis (a
    grid as fine as the patches': stage 0's tokens); a pattern or score is the recorder's own tensor, which the
    model never writes."""
    index = index.to(tensor.device)
    if index.numel() == tensor.shape[axis] and bool((index == torch.arange(index.numel(), device=index.device)).all()):
        return tensor
    return tensor.index_select(axis, index)
