"""Adapter for pyramid vision Transformers with spatial-reduction attention: SegFormer (MiT), PVT v2 and GLPN.

What it adds over the generic adapter: geometry. These models run stages on ever coarser token grids (stage s:
the image's stride-4 grid made 2^s times coarser by an overlapping strided convolution), and in each stage the
keys and values are pooled by a convolution of stride `sr` (the stage's reduction ratio), so a query token of
stage s attends over a key grid `sr` times coarser than its own. The generic adapter sees several stacks whose
attention reads fewer keys than it has queries (as a cross attention would); this adapter reads each stage as
blocks of self-attention and puts every tensor on the grid of stage 0 (`patch_{row}_{col}`, no class token,
`interpret.capture.hf.grid`), so all blocks share one position axis:

- a token of stage s stands for the 2^s × 2^s patches under it: each reads its token's vector (residuals,
  queries, `hook_z`, outputs);
- a pooled key stands for the (2^s · sr)² patches under it: `hook_k`/`hook_v` are read by each of them, and a
  pattern gives its weight to them in equal shares (score − log share), so every row still sums to one and
  attention rollout composes across stages on one grid. `hook_lse` is not offered: the streamed analyzers
  restate a pattern from q, k and the row's log-sum-exp, which on the patch grid would count a pooled key once
  per patch under it; a run over the capture budget is refused in one line rather than streamed.

Blocks are numbered across stages (`blocks.0` … `blocks.{sum(depths) − 1}`). Stages differ in width and head
count, so per-head tensors keep each stage's heads (`trace.meta.n_heads` is the smallest) and `hook_z` (where
head gates act, as one [layer, head] tensor) is offered only when every stage has the same heads. A grid that
does not divide into the stage's or the keys' grid is refused. Images are resized to the config's image size
(224 × 224 where it sets none). A capture with gradients is refused: the model's output depends on the stages'
grids, not on their copies on the patch grid. PVT v1 (a class token in its last stage only) is not served.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.grid import lift_square, lift_tokens, lifted, parents, staged_sites
from interpret.capture.hf.layout import AttentionLayout, StackLayout, assemble, recorder_for
from interpret.capture.hf.media import pair, prepare_images
from interpret.capture.hf.probe import Probe
from interpret.capture.hf.structure import ModelLayout, find_stacks, probe_attentions
from interpret.capture.sites import Capturable, Site
from interpret.errors import CaptureError, UnsupportedModelError

NAME = "pyramid"
_FAMILY = "a pyramid vision Transformer"


@dataclass(frozen=True)
class Stage:
    """Where one stage's tokens and pooled keys sit on the patch grid: `factor` patches per token side, `key_factor`
    patches per pooled key side; `patch_grid` is stage 0's grid."""

    patch_grid: tuple[int, int]
    factor: int
    key_factor: int

    def grid(self, factor: int) -> tuple[int, int]:
        return self.patch_grid[0] // factor, self.patch_grid[1] // factor

    def queries(self) -> Tensor:
        """[patches]: the stage token each patch lies under."""
        return parents(self.patch_grid, self.factor, self.grid(self.factor))

    def keys(self) -> Tensor:
        """[patches]: the pooled key each patch lies under."""
        return parents(self.patch_grid, self.key_factor, self.grid(self.key_factor))

    def count(self, factor: int) -> int:
        rows, cols = self.grid(factor)
        return rows * cols


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a SegFormer, PVT v2 or GLPN model on stage 0's patch grid."""
    layout = generic.layout_of(model, discover=_discover)
    stages = [_self_attention(stage) for stage in layout.stacks]
    image_size = _image_size(model)
    geometries = _geometries(model, image_size, len(stages))
    patch_grid = geometries[0].patch_grid
    patch_size = (image_size[0] // patch_grid[0], image_size[1] // patch_grid[1])
    recorder = recorder_for(model, stages)

    def lift(index: int, site: Site, name: str) -> Site | str:
        if site.name.endswith(".hook_lse"):  # the streamed computations restate patterns from q, k and lse
            return ("a pooled key stands for several patches on the patch grid, so the patterns cannot be restated"
                    " there from q, k and a row's log-sum-exp (streamed analyzers); the captured patterns are exact")
        return _lifted(site, name, geometries[index])

    sites, unsupported, layers = staged_sites(model, stages, recorder, lift)
    channels = int(getattr(model.config, "num_channels", 3) or 3)
    prepare = partial(prepare_images, image_size=image_size, patch_size=patch_size, channels=channels, specials=())
    return assemble(
        model, sites, recorder, kind="vision", run=generic.runner(model, layout), n_layers=layers,
        n_heads=min(stage.n_heads for stage in stages),
        adapter=NAME, prepare=prepare, unsupported=unsupported,
    )


def _discover(model: nn.Module, probe: Probe) -> ModelLayout:
    """Return one stack per stage, in order."""
    calls = probe_attentions(probe)
    if not calls:
        raise UnsupportedModelError(f"{type(model).__name__} called no attention kernel; the {NAME} adapter does not match it.")
    return ModelLayout(kind="vision", stacks=tuple(find_stacks(model, probe, calls)), positions=calls[0].query_length)


def _geometries(model: nn.Module, image_size: tuple[int, int], count: int) -> list[Stage]:
    """Return each stage's geometry from the config: the stride of each stage's patch embedding (`strides`) and
    its keys' reduction ratio (`sr_ratios`); the grid must divide at every stage."""
    config = model.config
    strides, ratios = list(getattr(config, "strides", []) or []), list(getattr(config, "sr_ratios", []) or [])
    if getattr(config, "linear_attention", False):
        raise UnsupportedModelError(
            f"{type(model).__name__} pools its keys to a fixed grid (linear_attention=True); the {NAME} adapter reads"
            " keys pooled by a stride (sr_ratios)."
        )
    if len(strides) != count or len(ratios) != count:
        raise UnsupportedModelError(
            f"{type(config).__name__} states {len(strides)} strides and {len(ratios)} reduction ratios for"
            f" {count} stages; the {NAME} adapter does not match it."
        )
    # every stage's grid and pooled keys: the product of the strides so far, times the stage's ratio
    needed = math.lcm(math.prod(strides), *(math.prod(strides[: s + 1]) * ratios[s] for s in range(count)))
    if image_size[0] % needed or image_size[1] % needed:
        raise UnsupportedModelError(
            f"a {image_size[0]} × {image_size[1]} image does not divide into every stage's grid and pooled keys of"
            f" {type(model).__name__} (it needs a multiple of {needed}); set the config's image_size to one."
        )
    patch_grid = (image_size[0] // strides[0], image_size[1] // strides[0])
    factors = [math.prod(strides[1: s + 1]) for s in range(count)]
    return [Stage(patch_grid, factor, factor * ratio) for factor, ratio in zip(factors, ratios)]


def _self_attention(stage: StackLayout) -> StackLayout:
    """Return the stage with its attention read as self-attention: its keys are its own tokens, pooled (the
    structure names an attention over fewer keys than queries `cross_attn`)."""
    renamed = {"cross_attn.": "attn.", "hook_cross_attn_out": "hook_attn_out"}

    def plain(hook: str) -> str:
        for old, new in renamed.items():
            hook = hook.replace(old, new)
        return hook

    attentions = tuple(AttentionLayout(a.kernel, a.out_proj, "attn", a.own) for a in stage.attentions)
    if len(attentions) != 1:
        raise UnsupportedModelError(f"a block of {stage.blocks!r} runs {len(attentions)} attentions; the {NAME} adapter expects one.")
    return replace(
        stage,
        attentions=attentions,
        unsupported=tuple((plain(hook), why) for hook, why in stage.unsupported),
        block_unsupported=tuple((index, plain(hook), why) for index, hook, why in stage.block_unsupported),
    )


def _image_size(model: nn.Module) -> tuple[int, int]:
    return pair(getattr(model.config, "image_size", None) or generic.PROBE_IMAGE_SIZE)


def _lifted(site: Site, name: str, stage: Stage) -> Site:
    """Return `site` renamed and put on the patch grid: stage tokens and pooled keys lifted to their patches."""
    hook = site.name.rsplit(".", 1)[-1]
    queries, keys = stage.count(stage.factor), stage.count(stage.key_factor)
    transform: Callable[[Tensor], Tensor]
    if hook in ("hook_pattern", "hook_attn_scores"):  # [batch, head, query token, key]
        lift = partial(lift_square, stage.queries(), stage.keys(), stage.key_factor**2, hook == "hook_pattern")
        transform = partial(_checked, lift, {2: queries, 3: keys}, name)
    elif hook in ("hook_k", "hook_v"):  # [batch, key, head, d_head]
        transform = partial(_checked, partial(lift_tokens, stage.keys()), {1: keys}, name)
    else:  # [batch, token, ...]
        transform = partial(_checked, partial(lift_tokens, stage.queries()), {1: queries}, name)
    return lifted(site, name, transform, _FAMILY)


def _checked(lift: Callable[[Tensor], Tensor], sizes: dict[int, int], name: str, tensor: Tensor) -> Tensor:
    """Return `lift(tensor)` after checking that the stage's tensor has the token and key counts its geometry
    gives (a lift of another grid would copy the wrong tokens)."""
    for axis, size in sizes.items():
        if tensor.shape[axis] != size:
            raise CaptureError(
                f"{name} has {tensor.shape[axis]} positions on axis {axis} where the stage's grid has {size}; the"
                " image was not resized to the config's image_size. Pass images through the model's processor or"
                " at that size."
            )
    return lift(tensor)


ADAPTER = HFAdapter(
    model_types=("segformer", "pvt_v2", "glpn"),
    build=build,
    adds="stages with pooled keys put on one patch grid: stage tokens and pooled keys lifted to their patches",
)
