"""Adapter for Swin, Swin V2, Donut's Swin encoder, MaskFormer's Swin backbone and Swin2SR: shifted-window
attention in stages.

What it adds over the generic adapter: geometry. Swin attends within windows of the stage's token grid
(every other block shifts the windows cyclically by half a window), and merges 2 × 2 tokens between stages,
so stage s has (H / 2^s) × (W / 2^s) tokens and its own width and head count (Swin2SR merges none: every
stage keeps the full grid, so each token is one patch). The kernel sees one window
at a time ([batch · windows, head, window², window²]); this adapter puts every tensor back on the patch grid
of the first stage (`patch_{row}_{col}`, no class token), so all blocks share one position axis:

- window tensors are scattered back to their grid positions (undoing the cyclic shift); a query's keys
  outside its window get probability 0 (score: the float32 minimum, i.e. masked);
- a token of stage s stands for the 2^s × 2^s patches merged into it: each patch reads its token's vector,
  and a pattern gives a key token's weight to its patches in equal shares (score − log 4^s), so every row
  still sums to one and attention rollout composes across stages on one grid.

Blocks are numbered across stages (`blocks.0` … `blocks.{sum(depths) − 1}`). Stages differ in head count,
so per-head tensors keep each stage's heads (`trace.meta.n_heads` is the smallest), and `hook_z` (where
head gates act, as one [layer, head] tensor) is offered only when every stage has the same heads. A stage
whose grid is not a whole number of windows (Swin then pads with zeros the model attends to) is refused.
Swin V2 (cosine attention, a continuous position bias) and Donut's Swin compute their attention in the
module's own code (`own_code`): the same windows, recorded from the module's softmax. Memory: lifted patterns
are [batch, head, patches, patches] per block; the collector's estimate includes
that, and `reduce=` or `layers=` bring it down. A capture with gradients is refused: the model's output
depends on the windows, not on their copies on the grid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.grid import lift_square, lift_tokens, lifted, parents, staged_sites
from interpret.capture.hf.layout import StackLayout, assemble, recorder_for
from interpret.capture.hf.media import pair, prepare_images
from interpret.capture.hf.probe import Probe
from interpret.capture.hf.recompute import LOWEST
from interpret.capture.hf.structure import ModelLayout, find_stacks, probe_attentions
from interpret.capture.sites import Capturable, Site
from interpret.errors import UnsupportedModelError


@dataclass(frozen=True)
class Geometry:
    """Where one block's tokens sit: its grid (rows, cols), window, cyclic shift, and the patches per token
    side (`factor` = 2^stage); `patch_grid` is the first stage's grid."""

    grid: tuple[int, int]
    window: int
    shift: int
    factor: int
    patch_grid: tuple[int, int]

    @property
    def tokens(self) -> int:
        return self.grid[0] * self.grid[1]

    def window_index(self) -> Tensor:
        """Return [windows, window²]: the grid position (row-major) of each window's tokens, shift undone."""
        rows, cols = self.grid
        size, shift = self.window, self.shift
        window_rows = torch.arange(rows // size)[:, None, None, None] * size + torch.arange(size)[None, None, :, None]
        window_cols = torch.arange(cols // size)[None, :, None, None] * size + torch.arange(size)[None, None, None, :]
        # The kernel's windows are cut from the grid rolled by −shift: windowed position r holds row r + shift.
        grid_rows = (window_rows + shift) % rows
        grid_cols = (window_cols + shift) % cols
        return (grid_rows * cols + grid_cols).reshape(-1, size * size)

    def parents(self) -> Tensor:
        """Return [patches]: the token of this block's grid that each patch of the first stage is merged into."""
        return parents(self.patch_grid, self.factor, self.grid)


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a Swin model (SwinModel, SwinForImageClassification, Swin V2's, Donut's) on the
    patch grid."""
    layout = generic.layout_of(model, discover=_discover)
    stages = [_with_norm_before(stage) for stage in layout.stacks]
    image_size, patch_size, channels = generic.vision_sizes(model)
    patch_grid = (image_size[0] // patch_size[0], image_size[1] // patch_size[1])
    recorder = recorder_for(model, stages)

    def lift(index: int, site: Site, name: str) -> Site | str:
        if site.name.endswith(".hook_lse"):
            return "Swin attends within shifted windows; its per-window normalisers have no place on the patch grid"
        blocks = model.get_submodule(stages[index].blocks)
        layer = site.layer
        block = blocks[layer] if layer is not None else blocks[0 if site.name == "hook_embed" else -1]
        return _lifted(site, name, _geometry(block, patch_grid))

    sites, unsupported, layers = staged_sites(model, stages, recorder, lift)
    prepare = partial(prepare_images, image_size=image_size, patch_size=patch_size, channels=channels, specials=())
    return assemble(
        model, sites, recorder, kind="vision", run=generic.runner(model, layout), n_layers=layers,
        n_heads=min(stage.n_heads for stage in stages),
        adapter="swin", prepare=prepare, unsupported=unsupported,
    )


def _discover(model: nn.Module, probe: Probe) -> ModelLayout:
    """Return one stack per stage (each a list of SwinLayer blocks), in order."""
    calls = probe_attentions(probe)
    if not calls:
        raise UnsupportedModelError(f"{type(model).__name__} called no attention kernel; the Swin adapter does not match it.")
    stages = find_stacks(model, probe, calls)
    return ModelLayout(kind="vision", stacks=tuple(stages), positions=calls[0].query_length)


def _with_norm_before(stage: StackLayout) -> StackLayout:
    """Return the stage with `layernorm_before` as ln1: the attention reads its output rolled and cut into
    windows (a copy), so the probe's identity test cannot see it, but it is the attention's normalised input."""
    if stage.ln1 is not None:
        return stage
    missing = tuple((hook, why) for hook, why in stage.unsupported if hook != "ln1.hook_normalized")
    return replace(stage, ln1="layernorm_before", unsupported=missing)


def _geometry(block: nn.Module, patch_grid: tuple[int, int]) -> Geometry:
    """Return the geometry of a Swin block (its attributes are settled by the probe pass at the config size)."""
    grid = pair(block.input_resolution)
    window, shift = int(block.window_size), int(block.shift_size)
    if grid[0] % window or grid[1] % window:
        raise UnsupportedModelError(
            f"a Swin stage's {grid[0]} × {grid[1]} grid is not a whole number of {window} × {window} windows (Swin"
            " then attends to zero padding); use an image size whose patch grid divides into windows at every stage."
        )
    return Geometry(grid, window, shift, patch_grid[0] // grid[0], patch_grid)


def _lifted(site: Site, name: str, geometry: Geometry) -> Site:
    """Return `site` renamed and put on the patch grid: window tensors unwindowed, stage tokens lifted."""
    hook = site.name.rsplit(".", 1)[-1]
    if hook in ("hook_pattern", "hook_attn_scores"):
        transform: Callable[[Tensor], Tensor] = partial(_lift_square, geometry, hook == "hook_pattern")
    elif hook in ("hook_q", "hook_k", "hook_v", "hook_z", "hook_attn_out"):
        transform = partial(_lift_windows, geometry)
    else:
        transform = partial(lift_tokens, geometry.parents())
    return lifted(site, name, transform, "Swin")


def _lift_windows(geometry: Geometry, windows: Tensor) -> Tensor:
    """Return [batch, patches, ...] from the kernel's [batch · windows, window², ...]."""
    index = geometry.window_index().to(windows.device)  # [windows, window²]
    n_windows = index.shape[0]
    batch = windows.shape[0] // n_windows
    flat = windows.reshape(batch, n_windows * index.shape[1], *windows.shape[2:])
    tokens = torch.empty_like(flat)
    tokens[:, index.reshape(-1)] = flat
    return lift_tokens(geometry.parents(), tokens)


def _lift_square(geometry: Geometry, pattern: bool, windows: Tensor) -> Tensor:
    """Return [batch, head, patches, patches] from the kernel's [batch · windows, head, window², window²]:
    scattered to the stage's grid (keys outside the window: probability 0, score masked), then lifted."""
    index = geometry.window_index().to(windows.device)
    n_windows, size = index.shape
    batch, heads = windows.shape[0] // n_windows, windows.shape[1]
    tokens = geometry.tokens
    pairs = (index[:, :, None] * tokens + index[:, None, :]).reshape(-1)  # [windows · window² · window²]
    values = windows.reshape(batch, n_windows, heads, size, size).transpose(1, 2).reshape(batch, heads, -1)
    full = torch.full((batch, heads, tokens * tokens), 0.0 if pattern else LOWEST, dtype=windows.dtype, device=windows.device)
    full[:, :, pairs] = values
    full = full.view(batch, heads, tokens, tokens)
    patches = geometry.parents()
    return lift_square(patches, patches, geometry.factor**2, pattern, full)


ADAPTER = HFAdapter(
    model_types=("swin", "swinv2", "donut-swin", "maskformer-swin", "swin2sr"),
    build=build,
    adds="windows and stages put back on the patch grid: shifted windows unrolled, merged tokens lifted to their patches",
)
