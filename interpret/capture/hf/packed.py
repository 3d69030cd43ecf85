"""Adapter for vision towers that pack a batch's patches into one sequence: Qwen2-VL's and its kin's.

What it adds over the generic adapter: the input, and a batch axis. These towers (`Qwen2VisionTransformer`,
Qwen3-VL's, GLM-4V's, ...) take every image's patches flattened into one tensor [patches, patch_dim]
(`hidden_states` or `pixel_values`; patch_dim = channel × temporal patch × patch × patch) with `grid_thw`
[images, 3], each image's (frames, rows, columns) of patches. Their hidden states are [patches, d_model], with
no batch axis, and each block's attention runs its kernel once per image, over that image's rows of the
sequence. Within an image the patches are ordered by windows of merge × merge patches (the config's
`spatial_merge_size`, which the tower's merger joins into one token), as transformers' own
`vision_utils.get_vision_position_ids` lays them out; position names follow that order: `patch_{row}_{col}`
(`t{frame}_patch_{row}_{col}` for several temporal patches).

Input: `Encoded.pixel_values` [batch, frame, row, column, patch_dim], each image's patches in raster order on one
grid for the whole batch; images are read by the model's processor (`processor(images=...)` gives the packed
patches and `image_grid_thw`, which are checked to be one grid and unpacked), or taken as such a tensor. The run
puts each image's patches in the tower's order, packs the batch and passes the grid.

Capture: the probe reads [patches, ...] tensors as one example's (`probe.observe(packed=True)`); in a capture a
hidden tensor [batch × pos, ...] is unflattened to [batch, pos, ...], and a block's kernel calls, one per image
[1, ...], are gathered into one [batch, ...] tensor before the collector's sink sees them (`unpacked`, which the
`pixtral` adapter shares). Those are tensors the model never reads, so a capture with gradients is refused wherever
one is made (a kernel call that already is the whole batch's, as an image alone is, is handed on as it is).

Window attention (Qwen2.5-VL's tower, its Omni encoder, EXAONE 4.5's): before its first block such a tower reorders
each image's merge windows into windows of `window_size` pixels (transformers' `vision_utils.get_vision_window_index`),
and all but its `fullatt_block_indexes` blocks attend within a window only, one kernel call per window. The blocks'
order is then the window order, so positions are named in it (`hook_embed` is what enters the first block); a windowed block's calls are placed on the image's [pos, pos] block diagonal (a key outside the query's
window: probability 0, score the float32 minimum), and q, k, v joined along the positions. `hook_lse` is not
offered for such towers: the streamed computations restate a pattern row over every key from q, k and lse, which a
window does not attend to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.grid import no_graph
from interpret.capture.hf.media import image_side, pair
from interpret.capture.hf.probe import Probe
from interpret.capture.hf.recompute import LOWEST
from interpret.capture.hf.structure import ModelLayout, model_layout
from interpret.capture.sites import Capturable, Site, Sink
from interpret.errors import CaptureError, InputError, UnsupportedModelError
from interpret.inputs import Encoded

NAME = "packed"
_GRID_NAMES = ("grid_thw", "image_grid_thw")
_PROBE_GRID = (1, 2, 3)  # merge windows per (frame, row, column) of the probe's image: a non-square grid
_NO_GRADIENT = ("a packed vision tower's tensors are made into a batch from the one sequence it computes with, so"
                " the model's output has no gradient with respect to them; use the methods that need no gradients"
                " (rollout, flow, attention entropy) on it.")
_no_graph = partial(no_graph, _NO_GRADIENT)
_WINDOWED_LSE = ("its blocks attend within windows, and the streamed computations restate a pattern row over every key"
                 " from q, k and lse")
_IMAGE_PATCHES = frozenset({"kimi_k25_vision"})  # towers fed each patch as [channel, patch, patch]


@dataclass(frozen=True)
class Tower:
    """How a packed tower reads its input: the names of its patches and grid arguments, the merge window, the
    size of one flattened patch (channel × temporal patch × patch × patch), the shape one patch is fed as
    (`(patch_dim,)`, or Kimi-K2.5's `(channel, patch, patch)`), what the grid's rows and columns must be
    multiples of (the merge window, or the pooling kernel of a tower that pools after its blocks), whether it
    also takes each image's merge size (`merge_sizes`, VideoLLaMA3), and its attention windows: (window size in
    pixels, patch size in pixels) for a tower that reorders its patches into windows, else None."""

    patches: str
    grid: str
    merge: int
    patch_dim: int
    patch_shape: tuple[int, ...]
    multiple: tuple[int, int]
    merge_sizes: bool = False
    windows: tuple[int, int] | None = None

    def inputs(self, patches: Tensor, grid_thw: Tensor) -> dict[str, Tensor]:
        """Return the tower's keyword arguments for `patches` [patches, patch_dim] of images of `grid_thw`."""
        made = {self.patches: patches.reshape(-1, *self.patch_shape), self.grid: grid_thw}
        if self.merge_sizes:
            made["merge_sizes"] = torch.full((len(grid_thw),), self.merge, device=grid_thw.device)
        return made

    def block_order(self, grid: tuple[int, int, int]) -> Tensor | None:
        """Return [patches]: the position (in the tower's input order) each block position holds, for an image
        of `grid` patches; None where the blocks keep the input order (no windows)."""
        if self.windows is None:
            return None
        from transformers.vision_utils import get_vision_window_index

        units, _ = get_vision_window_index(torch.tensor([grid]), self.merge, self.windows[0], self.windows[1])
        unit = self.merge * self.merge
        return (units[:, None] * unit + torch.arange(unit)).reshape(-1)

    def names(self, grid: tuple[int, int, int]) -> list[str]:
        """Return the position names of an image of `grid` (frames, rows, columns) patches, in the blocks' order."""
        frame = "" if grid[0] == 1 else "t{}_"
        where = positions(grid, self.merge)
        order = self.block_order(grid)
        if order is not None:
            where = where[order]
        return [f"{frame.format(t)}patch_{r}_{c}" for t, r, c in where.tolist()]


@dataclass
class _Batch:
    """The images of the forward pass now running (set by the run, read by the sites' transforms): how many,
    positions per image, and the kernel tensors gathered so far per site."""

    size: int = 0
    pos: int = 0
    gathering: dict[int, list[Tensor]] = field(default_factory=dict)


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a packed vision tower: one position per patch, in the order its blocks see."""
    tower = tower_of(model)
    layout = generic.layout_of(model, inputs=_probe_inputs, discover=_discover, packed=True)  # probed once per model
    base = generic.capturable(model, layout, adapter=NAME, prepare=partial(prepare, tower, processor_default=processor))
    unsupported = dict(base.unsupported)
    if tower.windows is not None:
        unsupported.update({site.name: _WINDOWED_LSE for site in base.sites if site.name.endswith(".hook_lse")})
    sites = [site for site in base.sites if site.name not in unsupported]
    return unpacked(replace(base, sites=sites, unsupported=unsupported), run=partial(_run, model, tower))


def unpacked(capturable: Capturable, run: Callable[[Encoded], Any] | None = None) -> Capturable:
    """Return `capturable` read as a batch from a model that packs its images into one sequence: its sites' packed
    tensors unpacked into [batch, ...] (module tensors [batch × pos, ...] or [1, batch × pos, ...]; kernel calls per
    image, per window, or one for the whole batch whose images a block-diagonal mask keeps apart, as Pixtral's), and
    `run` (default: its own) run with the batch's size known to them, its output's `last_hidden_state` and
    `pooler_output` given the batch axis."""
    batch = _Batch()
    sites = [_packed_site(site, batch) for site in capturable.sites]
    return replace(capturable, sites=sites, run=partial(_batched_run, run or capturable.run, batch))


def tower_of(model: nn.Module) -> Tower:
    """Return how `model` reads its packed patches, from its forward's parameters and its config."""
    parameters = list(generic.forward_parameters(model))
    grid = next((name for name in _GRID_NAMES if name in parameters), None)
    if grid is None or not parameters:
        raise UnsupportedModelError(
            f"{type(model).__name__} takes no grid_thw; the {NAME} adapter serves towers that take packed patches"
            " and grid_thw."
        )
    config = model.config
    patch = pair(config.patch_size)
    channels = int(getattr(config, "in_channels", None) or getattr(config, "num_channels", None) or 3)
    frames = int(getattr(config, "temporal_patch_size", None) or 1)
    merge = int(getattr(config, "spatial_merge_size", None) or 1)
    patch_dim = channels * frames * patch[0] * patch[1]
    shape = (channels, *patch) if config.model_type in _IMAGE_PATCHES else (patch_dim,)
    multiple = pair(getattr(config, "merge_kernel_size", None) or merge)
    window = getattr(config, "window_size", None)
    windows = (int(window), patch[0]) if window and getattr(config, "fullatt_block_indexes", None) is not None else None
    return Tower(parameters[0], grid, merge, patch_dim, shape, multiple, "merge_sizes" in parameters, windows)


def positions(grid: tuple[int, int, int], merge: int) -> Tensor:
    """Return [patches, 3] long: the (frame, row, column) of each position of an image of `grid` patches, in
    the tower's order (transformers' `get_vision_position_ids`: merge × merge windows, row-major)."""
    from transformers.vision_utils import get_vision_position_ids

    return get_vision_position_ids(torch.tensor([grid]), merge, include_temporal=True)


def _raster(grid: tuple[int, int, int], merge: int) -> Tensor:
    """Return [patches] long: the raster index (frame, row, column order) of each position in the tower's order."""
    where = positions(grid, merge)
    return (where[:, 0] * grid[1] + where[:, 1]) * grid[2] + where[:, 2]


def packed_patches(pixel_values: Tensor, merge: int) -> tuple[Tensor, Tensor]:
    """Return (patches [batch × positions, patch_dim] in the tower's order, grid_thw [batch, 3]) from
    pixel_values [batch, frame, row, column, patch_dim] (raster order)."""
    batch, *grid, dim = pixel_values.shape
    raster = _raster(tuple(grid), merge)  # type: ignore[arg-type]
    flat = pixel_values.reshape(batch, -1, dim).index_select(1, raster.to(pixel_values.device))
    grid_thw = torch.tensor([grid] * batch, device=pixel_values.device)
    return flat.reshape(-1, dim), grid_thw


def prepare(
    tower: Tower, processor: Any | None, inputs: Any = None, *, max_length: int | None = None,
    decoder_inputs: Any | None = None, processor_default: Any | None = None,
) -> Encoded:
    """Return the Encoded of images: pixel_values [batch, frame, row, column, patch_dim] (raster order), positions
    named in the order the blocks see them (`Tower.names`). `inputs`: such a tensor, an Encoded, or images read by
    the processor."""
    if decoder_inputs is not None or max_length is not None:
        raise InputError("decoder inputs and max_length do not apply to a vision model; drop them.")
    if isinstance(inputs, Encoded):
        if inputs.pixel_values is None or inputs.pixel_values.dim() != 5:
            raise InputError("this Encoded has no packed patches; pass images or pixel_values [batch, frame, row,"
                             " column, patch_dim].")
        return inputs
    if isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and any(isinstance(x, str) for x in inputs)):
        raise InputError("a vision model takes images, not text; pass PIL images or pixel_values [batch, frame,"
                         " row, column, patch_dim].")
    pixel_values = inputs if isinstance(inputs, Tensor) else _processed(processor or processor_default, inputs, tower)
    if pixel_values.dim() != 5 or pixel_values.shape[-1] != tower.patch_dim or not pixel_values.is_floating_point():
        raise InputError(
            f"pixel_values have shape {tuple(pixel_values.shape)} ({pixel_values.dtype}); this tower takes float"
            f" patches [batch, frame, row, column, {tower.patch_dim}]: read images with its image processor."
        )
    grid = tuple(int(size) for size in pixel_values.shape[1:4])
    if grid[1] % tower.multiple[0] or grid[2] % tower.multiple[1]:
        raise InputError(
            f"a grid of {grid[1]} × {grid[2]} patches does not divide into the tower's {tower.multiple[0]} ×"
            f" {tower.multiple[1]} merge windows; resize the images with its image processor."
        )
    return image_side(pixel_values, tower.names(grid), 0)  # type: ignore[arg-type]


def _processed(processor: Any | None, images: Any, tower: Tower) -> Tensor:
    """Return pixel_values [batch, frame, row, column, patch_dim] of images read by the tower's processor (its
    packed patches and image_grid_thw), refused unless every image has the same grid."""
    if processor is None or not callable(processor):
        raise InputError("image input needs the model's image processor; pass the one interpret.load returned, or"
                         f" pixel_values [batch, frame, row, column, {tower.patch_dim}].")
    images = list(images) if isinstance(images, (list, tuple)) else [images]
    made = processor(images=images, return_tensors="pt")
    patches, grids = made["pixel_values"], made.get("image_grid_thw")
    if grids is None:
        raise InputError(f"{type(processor).__name__} gave no image_grid_thw; pass the tower's own image processor.")
    distinct = {tuple(row) for row in grids.tolist()}
    if len(distinct) > 1:
        raise InputError(
            f"the images make {len(distinct)} different patch grids ({', '.join('×'.join(map(str, g)) for g in sorted(distinct))});"
            " one batch needs one grid: resize the images to one size, or explain them one at a time."
        )
    grid = distinct.pop()
    raster = _raster(grid, tower.merge)
    per_image = patches.reshape(len(images), -1, patches.shape[-1])
    unpacked = torch.empty_like(per_image)
    unpacked[:, raster] = per_image
    return unpacked.reshape(len(images), *grid, patches.shape[-1])


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    """Return the probe's input: one image of (1, 2, 3) merge windows of zero patches (fewer where a tower's
    attention window is smaller), packed, with its grid on the CPU (the tower reads its values). On the meta device
    a windowed tower is also given its window order (`window_index`) and rotary `position_ids` on the model's
    device, to index and rotate its meta tensors, and `cu_window_seqlens` on the CPU, as transformers'
    `get_vision_window_index` and `get_vision_position_ids` make them: the tower would compute them from values the
    meta device lacks."""
    tower = tower_of(model)
    frames, rows, columns = _PROBE_GRID
    if tower.windows is not None:  # within one window: each block then makes one call, as the probe expects
        across = max(1, tower.windows[0] // tower.merge // tower.windows[1])
        rows, columns = min(rows, across), min(columns, across)
    grid = (frames, rows * tower.multiple[0], columns * tower.multiple[1])
    parameter = next(model.parameters())
    patches = torch.zeros(grid[0] * grid[1] * grid[2], tower.patch_dim, device=parameter.device, dtype=parameter.dtype)
    inputs: dict[str, Any] = tower.inputs(patches, torch.tensor([grid]))
    if tower.windows is not None and parameter.device.type == "meta":
        from transformers.vision_utils import get_vision_position_ids, get_vision_window_index

        grid_thw = torch.tensor([grid])
        window_index, cu_window_seqlens = get_vision_window_index(grid_thw, tower.merge, *tower.windows)
        inputs.update(window_index=window_index.to(parameter.device), cu_window_seqlens=cu_window_seqlens,
                      position_ids=get_vision_position_ids(grid_thw, tower.merge).to(parameter.device))
    return inputs


def _discover(model: nn.Module, probe: Probe) -> ModelLayout:
    return model_layout(model, probe, vision=True)


def _run(model: nn.Module, tower: Tower, encoded: Encoded) -> Any:
    """Run the tower on the Encoded's images packed into one sequence, in its order, with their grid."""
    if encoded.pixel_values is None or encoded.pixel_values.dim() != 5:
        raise CaptureError("a packed vision tower runs on pixel_values [batch, frame, row, column, patch_dim].")
    patches, grid_thw = packed_patches(encoded.pixel_values, tower.merge)
    return model(**tower.inputs(patches, grid_thw), return_dict=True)


def _batched_run(run: Callable[[Encoded], Any], batch: _Batch, encoded: Encoded) -> Any:
    """Return `run(encoded)` with the batch's size known to the sites' transforms, its output's `last_hidden_state`
    [batch, pos, d_model] and `pooler_output` ([batch, tokens, ...] where merged) given the batch axis."""
    batch.size, batch.pos, batch.gathering = encoded.batch, encoded.pos, {}
    try:
        output = run(encoded)
    finally:
        batch.size = 0
    for name in ("last_hidden_state", "pooler_output"):
        value = output.get(name) if hasattr(output, "get") else None
        if not isinstance(value, Tensor) or value.dim() < 2 or (value.shape[0] == encoded.batch and value.dim() > 2):
            continue
        if value.dim() > 2 and value.shape[0] == 1:  # [1, batch × pos, ...]: one sequence of every image's rows
            value = value[0]
        if value.shape[0] % encoded.batch == 0:
            output[name] = value.unflatten(0, (encoded.batch, -1))
    return output


def _packed_site(site: Site, batch: _Batch) -> Site:
    """Return `site` reading a batch: a kernel site's calls assembled into [batch, ...], a module's packed rows
    unflattened."""
    if site.attach is not None:
        fill = LOWEST if site.name.endswith("hook_attn_scores") else 0.0
        gather = partial(_gather, batch, id(site), site.axes, fill)
        return replace(site, attach=partial(_attach_gathered, site.attach, gather))
    return replace(site, read=partial(_read_unpacked, site.read, batch, len(site.axes)), packed=True)


def _attach_gathered(attach: Callable[[Any, Sink], None], gather: Callable[[Sink, Tensor], None], session: Any,
                     sink: Sink) -> None:
    attach(session, partial(gather, sink))


def _gather(batch: _Batch, key: int, axes: tuple[str, ...], fill: float, sink: Sink, tensor: Tensor) -> None:
    """Collect one kernel call's tensor [1, ...] (an image's, a window's, or the whole batch's); once the batch's
    images are all in, pass [batch, ...] on: each image's windows on its [pos, pos] diagonal (`fill` elsewhere)
    or joined along the positions; a call over several images cut at their boundaries (the diagonal blocks of a
    square tensor: a block-diagonal mask gave every other block nothing). A call that already is the whole
    batch's [batch, ...] is passed on as it is (in the autograd graph)."""
    parts = batch.gathering.setdefault(key, [])
    parts.append(tensor)
    rows = axes.index("query") if "query" in axes else axes.index("pos")
    if sum(part.shape[rows] for part in parts) < batch.size * batch.pos:
        return
    del batch.gathering[key]
    if len(parts) == 1 and tensor.shape[0] == batch.size and tensor.shape[rows] == batch.pos:
        sink(tensor)
        return
    square = "key" in axes
    images, image, filled = [], [], 0
    for part in map(_no_graph, parts):
        start = 0
        while start < part.shape[rows]:
            take = min(part.shape[rows] - start, batch.pos - filled)
            piece = part.narrow(rows, start, take)
            image.append(piece.narrow(rows + 1, start, take) if square else piece)
            filled, start = filled + take, start + take
            if filled == batch.pos:
                images.append(image[0] if len(image) == 1 else _joined(image, rows, square, fill))
                image, filled = [], 0
    if image or len(images) != batch.size:
        raise CaptureError(f"the model's kernel calls over {sum(p.shape[rows] for p in parts)} rows do not split into"
                           f" {batch.size} images of {batch.pos} positions; its adapter does not match it.")
    sink(torch.cat(images, dim=0))


def _joined(windows: list[Tensor], rows: int, square: bool, fill: float) -> Tensor:
    """Return one image's tensor from its windows' (in the blocks' order): a square [1, head, pos, pos] with each
    window on the diagonal and `fill` elsewhere, or the windows joined along the positions."""
    if not square:
        return torch.cat(windows, dim=rows)
    first = windows[0]
    size = sum(window.shape[rows] for window in windows)
    out = first.new_full((*first.shape[:rows], size, size), fill)
    start = 0
    for window in windows:
        end = start + window.shape[rows]
        out[..., start:end, start:end] = window
        start = end
    return out


def _read_unpacked(read: Any, batch: _Batch, dims: int, args: tuple[Any, ...], kwargs: Any, output: Any) -> Tensor:
    """Return a module's tensor as [batch, pos, ...] from [batch × pos, ...] or [1, batch × pos, ...]."""
    tensor = read(args, kwargs, output)
    if not batch.size:
        return tensor
    if tensor.dim() == dims - 1:
        return _no_graph(tensor).unflatten(0, (batch.size, -1))
    if tensor.dim() == dims and tensor.shape[0] == 1 and batch.size > 1:
        return _no_graph(tensor)[0].unflatten(0, (batch.size, -1))
    return tensor


ADAPTER = HFAdapter(
    model_types=(
        "qwen2_vl_vision", "qwen3_vl_vision", "qwen3_vl_moe_vision", "qwen3_5_vision", "qwen3_5_moe_vision",
        "qwen3_omni_moe_vision_encoder", "qwen4_exp_vision", "qwen2_5_vl_vision", "qwen2_5_omni_vision_encoder",
        "glm4v_vision", "glm4v_moe_vision", "glm_ocr_vision", "glm5_next_vision", "ernie4_5_vl_moe_vision",
        "exaone4_5_vision", "cohere_compass_vision",
        "cosmos3_edge_vision", "dots3_note_vision_encoder", "glm_image_vision", "hunyuan_vl_vision", "hy_v4_vl_vision",
        "kimi_k25_vision", "lfm3_vl_vision", "minimax_m3_vl_vision", "muse_glimmer_vision", "muse_spark_vision",
        "video_llama_3_vision",
    ),
    build=build,
    adds="packed patches: images [batch, frame, row, column, patch_dim] packed into one sequence with grid_thw,"
         " one position per patch in the tower's merge-window order; per-image kernel calls gathered into a batch",
)
