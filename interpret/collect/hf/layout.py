"""Declarative layouts of Hugging Face models, and the Capturable built from one.

A family adapter only says where things live (module paths) and how big they are; this module turns that
into canonical sites:

    {prefix}hook_embed                          [batch, pos, d_model]  what enters block 0
    {prefix}blocks.{i}.hook_resid_pre|post      [batch, pos, d_model]  block input / output
    {prefix}blocks.{i}.{attn}.hook_q|k|v        [batch, pos, head, d_head]  as the kernel received them
                                                (after rotary embeddings; key/value heads repeated per
                                                query head under grouped-query attention)
    {prefix}blocks.{i}.{attn}.hook_attn_scores  [batch, head, query, key]  q·kᵀ·scale + bias + mask, float32
    {prefix}blocks.{i}.{attn}.hook_pattern      [batch, head, query, key]  softmax of the scores, float32
    {prefix}blocks.{i}.{attn}.hook_z            [batch, pos, head, d_head]  input of the output projection
    {prefix}blocks.{i}.hook_attn_out            [batch, pos, d_model]  output projection's output
    {prefix}blocks.{i}.hook_cross_attn_out      [batch, pos, d_model]  same, for cross attention
    {prefix}blocks.{i}.mlp.hook_post            [batch, pos, d_mlp]  input of the MLP's last linear
    {prefix}blocks.{i}.hook_mlp_out             [batch, pos, d_model]  the MLP's contribution

`{attn}` is `attn` (self attention) or `cross_attn` (query = decoder position, key = encoder position).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from torch import Tensor, nn

from interpret.collect.hf.attention import AttentionRecorder, Field
from interpret.collect.sites import Capturable, Side, Site
from interpret.errors import UnsupportedModelError
from interpret.inputs import Encoded
from interpret.trace import ModelKind

_PATTERN_ITEMSIZE = 4  # patterns and scores are float32 whatever the model's dtype


@dataclass(frozen=True)
class AttentionLayout:
    """One attention of a block, as module paths relative to the block.

    kernel: the module that calls the attention kernel. out_proj: the output projection, whose input is
    the concatenated heads [batch, pos, head * d_head]. name: `attn` or `cross_attn`.
    """

    kernel: str
    out_proj: str
    name: str = "attn"


@dataclass(frozen=True)
class StackLayout:
    """One stack of blocks (the only one, the encoder, or the decoder) and its sizes.

    blocks: path of the block list under the model. mlp_out: module whose output is the MLP's
    contribution to the residual stream. mlp_down: the MLP's last linear (its input is mlp.hook_post).
    """

    prefix: str
    blocks: str
    side: Side
    attentions: tuple[AttentionLayout, ...]
    mlp_out: str
    mlp_down: str
    n_heads: int
    d_head: int
    d_model: int
    d_mlp: int


def _read_input(args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any) -> Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _read_first(args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any) -> Tensor:
    return output if isinstance(output, Tensor) else output[0]


def _read_heads(n_heads: int, d_head: int, args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any) -> Tensor:
    joined = _read_input(args, kwargs, output)
    return joined.view(*joined.shape[:-1], n_heads, d_head)


def submodule(root: nn.Module, path: str) -> nn.Module:
    """Return `root`'s module at `path`, or raise UnsupportedModelError naming the missing path."""
    try:
        return root.get_submodule(path)
    except AttributeError:
        raise UnsupportedModelError(
            f"{type(root).__name__} has no module {path!r}; its layout differs from what the adapter expects"
            " (another transformers version?); register an adapter for it under the entry-point group"
            " 'interpret.adapters'."
        ) from None


def stack_sites(root: nn.Module, stack: StackLayout, recorder: AttentionRecorder) -> list[Site]:
    """Return the sites of every block of `stack`, in forward order."""
    blocks = submodule(root, stack.blocks)
    if not isinstance(blocks, (nn.ModuleList, nn.Sequential)) or len(blocks) == 0:
        raise UnsupportedModelError(
            f"{stack.blocks!r} of {type(root).__name__} is not a non-empty list of blocks; register an adapter"
            " that matches this model under the entry-point group 'interpret.adapters'."
        )
    sizes = {"head": stack.n_heads, "d_head": stack.d_head, "d_model": stack.d_model, "d_mlp": stack.d_mlp}
    residual = ("batch", "pos", "d_model")
    per_head = ("batch", "pos", "head", "d_head")
    square = ("batch", "head", "query", "key")
    p, side = stack.prefix, stack.side
    sites = [Site(f"{p}hook_embed", residual, sizes, module=blocks[0], read=_read_input, pre=True, side=side)]
    for i, block in enumerate(blocks):
        name = f"{p}blocks.{i}"
        sites.append(Site(f"{name}.hook_resid_pre", residual, sizes, block, _read_input, pre=True, side=side))
        for attention in stack.attentions:
            kernel = submodule(block, attention.kernel)
            out_proj = submodule(block, attention.out_proj)
            cross = attention.name == "cross_attn"
            key_side: Side = "main" if cross else side
            fields: tuple[tuple[str, Field, tuple[str, ...], Side], ...] = (
                ("hook_q", "q", per_head, side),
                ("hook_k", "k", per_head, key_side),
                ("hook_v", "v", per_head, key_side),
                ("hook_attn_scores", "scores", square, "cross" if cross else side),
                ("hook_pattern", "pattern", square, "cross" if cross else side),
            )
            for hook, field, axes, site_side in fields:
                sites.append(
                    Site(
                        f"{name}.{attention.name}.{hook}",
                        axes,
                        sizes,
                        module=kernel,
                        side=site_side,
                        attach=partial(_listen, recorder, kernel, field),
                        itemsize=_PATTERN_ITEMSIZE if field in ("scores", "pattern") else None,
                        fresh=field in ("scores", "pattern"),
                    )
                )
            z_reader = partial(_read_heads, stack.n_heads, stack.d_head)
            sites.append(Site(f"{name}.{attention.name}.hook_z", per_head, sizes, out_proj, z_reader, True, side))
            out_name = "hook_cross_attn_out" if cross else "hook_attn_out"
            sites.append(Site(f"{name}.{out_name}", residual, sizes, out_proj, _read_first, side=side))
        mlp_down = submodule(block, stack.mlp_down)
        mlp_out = submodule(block, stack.mlp_out)
        post_axes = ("batch", "pos", "d_mlp")
        sites.append(Site(f"{name}.mlp.hook_post", post_axes, sizes, mlp_down, _read_input, pre=True, side=side))
        sites.append(Site(f"{name}.hook_mlp_out", residual, sizes, mlp_out, _read_first, side=side))
        sites.append(Site(f"{name}.hook_resid_post", residual, sizes, block, _read_first, side=side))
    return sites


def _listen(recorder: AttentionRecorder, kernel: nn.Module, field: Field, session: Any, sink: Any) -> None:
    recorder.listen(kernel, field, sink)


def _scope(recorder: AttentionRecorder, selected: Sequence[Site], grad: bool) -> contextlib.AbstractContextManager[Any]:
    if any(site.attach is not None for site in selected):
        return recorder.recording(grad=grad)
    return contextlib.nullcontext()


def build_capturable(
    model: nn.Module,
    root: nn.Module,
    stacks: Sequence[StackLayout],
    *,
    kind: ModelKind,
    run: Callable[[Encoded], Any],
    max_positions: int | None = None,
    adapter: str = "",
    prepare: Callable[..., Encoded] | None = None,
) -> Capturable:
    """Return the Capturable of a Hugging Face model whose stacks under `root` follow `stacks`.

    adapter: the adapter's name (recorded in the trace's meta); prepare: the input preparation of a model
    whose inputs are not text (see `Capturable.prepare`).
    """
    implementation = str(getattr(model.config, "_attn_implementation", None) or "eager")
    recorder = AttentionRecorder(use_kernel_weights=implementation == "eager")
    sites = [site for stack in stacks for site in stack_sites(root, stack, recorder)]

    n_layers = max(len(submodule(root, stack.blocks)) for stack in stacks)  # type: ignore[arg-type]
    return Capturable(
        model=model,
        model_id=str(getattr(model, "name_or_path", "") or type(model).__name__),
        kind=kind,
        n_layers=n_layers,
        n_heads=stacks[0].n_heads,
        sites=sites,
        run=run,
        max_positions=max_positions,
        attention="eager" if implementation == "eager" else "recomputed",
        scope=partial(_scope, recorder),
        prepare=prepare,
        embedding=partial(_embedding, model),
        adapter=adapter,
        implementation=implementation,
        model_class=type(model).__name__,
    )


def _embedding(model: nn.Module, side: str) -> nn.Module | None:
    """Return the token-embedding module of `side`: the model's input embeddings, or its decoder's."""
    owner = model
    if side == "decoder":
        get_decoder = getattr(model, "get_decoder", None)
        owner = get_decoder() if callable(get_decoder) else None
    get = getattr(owner, "get_input_embeddings", None)
    if not callable(get):
        return None
    try:
        module = get()
    except NotImplementedError:
        return None
    return module if isinstance(module, nn.Module) else None


def run_model(model: nn.Module, encoded: Encoded, *, disable_cache: bool) -> Any:
    """Return the model's output on an Encoded: ids or embeddings, masks, the decoder side, pixels."""
    inputs: dict[str, Any] = {}
    if encoded.pixel_values is not None:
        inputs["pixel_values"] = encoded.pixel_values
    else:
        inputs.update(_side_inputs(encoded, ""))
    if encoded.decoder is not None:
        inputs.update(_side_inputs(encoded.decoder, "decoder_"))
    if disable_cache:  # a decoder would otherwise build a key/value cache it never reuses here
        inputs["use_cache"] = False
    return model(**inputs, return_dict=True)


def _side_inputs(encoded: Encoded, prefix: str) -> Iterator[tuple[str, Tensor]]:
    if encoded.input_ids is not None:
        yield f"{prefix}input_ids", encoded.input_ids
    elif encoded.inputs_embeds is not None:
        yield f"{prefix}inputs_embeds", encoded.inputs_embeds
    yield f"{prefix}attention_mask", encoded.attention_mask
