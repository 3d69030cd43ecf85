"""Declarative layouts of Hugging Face models, and the Capturable built from one.

A family adapter only says where things live (module paths) and how big they are; this module turns that
into canonical sites:

    {prefix}hook_embed                          [batch, pos, d_model]  what enters block 0
    {prefix}blocks.{i}.hook_resid_pre|post      [batch, pos, d_model]  block input / output
    {prefix}blocks.{i}.ln1|ln2.hook_normalized  [batch, pos, d_model]  the norm output the attention / MLP reads
    {prefix}blocks.{i}.{attn}.hook_q|k|v        [batch, pos, head, d_head]  as the kernel received them
                                                (after rotary embeddings; key/value heads repeated per
                                                query head under grouped-query attention)
    {prefix}blocks.{i}.{attn}.hook_attn_scores  [batch, head, query, key]  q·kᵀ·scale + bias + mask, float32
    {prefix}blocks.{i}.{attn}.hook_pattern      [batch, head, query, key]  softmax of the scores, float32
    {prefix}blocks.{i}.{attn}.hook_lse          [batch, head, query]  log Σ_key exp(score) of each row, float32
                                                (the kernel's own when a fused SDPA kernel returns it)
    {prefix}blocks.{i}.{attn}.hook_z            [batch, pos, head, d_head]  input of the output projection
    {prefix}blocks.{i}.hook_attn_out            [batch, pos, d_model]  output projection's output
    {prefix}blocks.{i}.hook_cross_attn_out      [batch, pos, d_model]  same, for cross attention
    {prefix}blocks.{i}.mlp.hook_post            [batch, pos, d_mlp]  input of the MLP's last linear
    {prefix}blocks.{i}.hook_mlp_out             [batch, pos, d_model]  the MLP's contribution
    {prefix}ln_final.hook_normalized            [batch, pos, d_model]  the norm after the last block

`{attn}` is `attn` (self attention) or `cross_attn` (query = decoder position, key = encoder position).
A hook point a model lacks (no norm before the attention, no single MLP hidden layer in a
Mixture-of-Experts block, ...) is listed in `Capturable.unsupported` with the reason, and asking for it is
an error that names it.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf.attention import AttentionRecorder, Field
from interpret.capture.hf.probe import Slot, read_slot
from interpret.capture.sites import Capturable, Side, Site
from interpret.errors import CaptureError, InputError, UnsupportedModelError
from interpret.inputs import Encoded
from interpret.trace import ModelKind

_PATTERN_ITEMSIZE = 4  # patterns, scores and row log-sum-exps are float32 whatever the model's dtype


@dataclass(frozen=True)
class AttentionLayout:
    """One attention of a block, as module paths relative to the block.

    kernel: the module that calls the attention kernel. out_proj: the output projection, whose input is
    the concatenated heads [batch, pos, head * d_head]; None when the model has none (no hook_z, no
    hook_attn_out). name: `attn` or `cross_attn`. own: the module computes its attention in its own code
    (`own_code`) instead of calling a kernel.
    """

    kernel: str
    out_proj: str | None
    name: str = "attn"
    own: bool = False


@dataclass(frozen=True)
class StackLayout:
    """One stack of blocks (the only one, the encoder, or the decoder) and its sizes.

    blocks: path of the block list under the model. mlp_out: module whose output is the MLP's
    contribution to the residual stream. mlp_down: the MLP's last linear (its input is mlp.hook_post).
    d_value: size of one value head (defaults to d_head). block_input: where a block receives the residual
    stream (("arg", 0) or ("kwarg", "hidden_states")). ln1 / ln2: the norms whose outputs the attention and
    the MLP read, relative to the block; ln_final: the norm after the last block, relative to the root, and
    ln_final_call which of its calls (of how many) that is, where the norm also runs elsewhere in the pass.
    unsupported: (hook-name suffix, reason) for what every block of the stack lacks, e.g. ("mlp.hook_post",
    "..."); block_unsupported: (block index, suffix, reason) for what single blocks lack. layers: per layer,
    (index of its block in the list, which call of that block it is) where one block runs for several layers
    (ALBERT runs one shared layer module num_hidden_layers times); empty: each block once, in list order.
    block_heads: (block index, d_head, d_value) for each block whose head sizes differ from the
    stack's (Gemma 4's global layers have heads twice as wide as its sliding-window ones); patterns are [batch,
    head, query, key] whatever the head size, so only hook_q/k/v/z of such a block have another last axis.
    block_mlp_out: (block index, path) for each block whose MLP output module is not `mlp_out` (HunYuan V4's
    dense first block, 'mlp.down_proj', under mixture-of-experts blocks, 'mlp').
    block_output: the module whose output is the block's output (the residual stream after it), relative to the
    block; None: the block itself. A path starting with `^` names the module at the block's index in a list
    beside the block list (XLM keeps parallel lists `attentions`, `layer_norm1`, `ffns`, `layer_norm2`: with
    `attentions` as the blocks, `^layer_norm2` is the layer's `layer_norm2[i]`, `^ffns.lin2` its `ffns[i].lin2`).
    """

    prefix: str
    blocks: str
    side: Side
    attentions: tuple[AttentionLayout, ...]
    mlp_out: str | None
    mlp_down: str | None
    n_heads: int
    d_head: int
    d_model: int
    d_mlp: int
    d_value: int | None = None
    n_kv_heads: int | None = None
    block_input: Slot = ("arg", 0)
    ln1: str | None = None
    ln2: str | None = None
    ln_final: str | None = None
    ln_final_call: tuple[int, int] = (0, 1)
    unsupported: tuple[tuple[str, str], ...] = ()
    block_unsupported: tuple[tuple[int, str, str], ...] = ()
    layers: tuple[tuple[int, int], ...] = ()
    block_output: str | None = None
    block_heads: tuple[tuple[int, int, int], ...] = ()
    block_mlp_out: tuple[tuple[int, str], ...] = ()

    def layer_calls(self, n_blocks: int) -> tuple[tuple[int, int], ...]:
        """Return per layer (block index, call of that block): `layers`, or each of `n_blocks` blocks once."""
        return self.layers or tuple((index, 0) for index in range(n_blocks))


def _read_first(args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any) -> Tensor:
    return output if isinstance(output, Tensor) else output[0]


def _read_projection_input(args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any) -> Tensor:
    return args[0] if args else next(value for value in kwargs.values() if isinstance(value, Tensor))


def _read_slot(slot: Slot, args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any) -> Tensor:
    return read_slot(slot, args, kwargs)


def _read_heads(n_heads: int, d_head: int, args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any) -> Tensor:
    joined = _read_projection_input(args, kwargs, output)
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


def part(root: nn.Module, stack: StackLayout, index: int, path: str) -> nn.Module:
    """Return the module at `path` of block `index` of `stack`: relative to the block, or with a leading `^` at
    the same index of a list beside the block list (`StackLayout.block_output`)."""
    if not path.startswith("^"):
        return submodule(submodule(root, stack.blocks)[index], path)
    parent = stack.blocks.rpartition(".")[0]
    head, _, rest = path[1:].partition(".")
    siblings = submodule(root, f"{parent}.{head}" if parent else head)
    if not isinstance(siblings, (nn.ModuleList, nn.Sequential)) or len(siblings) <= index:
        raise UnsupportedModelError(
            f"{head!r} of {type(root).__name__} is not a list beside {stack.blocks!r} with an entry per block; its"
            " layout differs from what the adapter expects."
        )
    return submodule(siblings[index], rest)


def stack_sites(root: nn.Module, stack: StackLayout, recorder: AttentionRecorder) -> tuple[list[Site], dict[str, str]]:
    """Return the sites of every block of `stack` in forward order, and {hook name: why it is not offered}."""
    blocks = submodule(root, stack.blocks)
    if not isinstance(blocks, (nn.ModuleList, nn.Sequential)) or len(blocks) == 0:
        raise UnsupportedModelError(
            f"{stack.blocks!r} of {type(root).__name__} is not a non-empty list of blocks; register an adapter"
            " that matches this model under the entry-point group 'interpret.adapters'."
        )
    base = {"head": stack.n_heads, "d_model": stack.d_model, "d_mlp": stack.d_mlp}
    heads = {index: (d_head, d_value) for index, d_head, d_value in stack.block_heads}
    mlp_outs = dict(stack.block_mlp_out)
    stack_heads = (stack.d_head, stack.d_value or stack.d_head)
    sizes = {**base, "d_head": stack.d_head}
    residual = ("batch", "pos", "d_model")
    per_head = ("batch", "pos", "head", "d_head")
    square = ("batch", "head", "query", "key")
    p, side = stack.prefix, stack.side
    missing = dict(stack.unsupported)
    skipped = {(index, suffix): why for index, suffix, why in stack.block_unsupported}
    read_block = partial(_read_slot, stack.block_input)
    layers = stack.layer_calls(len(blocks))
    runs = Counter(index for index, _ in layers)  # how many layers each block runs for
    first = {"call": layers[0][1], "calls": runs[layers[0][0]]}
    unsupported: dict[str, str] = {}
    sites: list[Site] = []
    if "hook_resid_pre" in missing:  # what enters block 0 is its hook_resid_pre
        unsupported[f"{p}hook_embed"] = missing["hook_resid_pre"]
    else:
        sites.append(Site(f"{p}hook_embed", residual, sizes, module=blocks[layers[0][0]], read=read_block, pre=True,
                          side=side, **first))
    for i, (index, call) in enumerate(layers):
        block, name, sites_before = blocks[index], f"{p}blocks.{i}", len(sites)
        d_head, d_value = heads.get(index, stack_heads)
        sizes, value_sizes = {**base, "d_head": d_head}, {**base, "d_head": d_value}
        unsupported.update({f"{name}.{suffix}": why for suffix, why in missing.items()})
        unsupported.update({f"{name}.{suffix}": why for (at, suffix), why in skipped.items() if at == index})
        if "hook_resid_pre" not in missing:
            sites.append(Site(f"{name}.hook_resid_pre", residual, sizes, block, read_block, pre=True, side=side))
        if stack.ln1 is not None and (index, "ln1.hook_normalized") not in skipped:
            sites.append(Site(f"{name}.ln1.hook_normalized", residual, sizes, part(root, stack, index, stack.ln1), _read_first, side=side))
        for attention in stack.attentions:
            kernel = part(root, stack, index, attention.kernel)
            cross = attention.name == "cross_attn"
            key_side: Side = "main" if cross else side
            fields: tuple[tuple[str, Field, tuple[str, ...], Side, Mapping[str, int]], ...] = (
                ("hook_q", "q", per_head, side, sizes),
                ("hook_k", "k", per_head, key_side, sizes),
                ("hook_v", "v", per_head, key_side, value_sizes),
                ("hook_attn_scores", "scores", square, "cross" if cross else side, sizes),
                ("hook_pattern", "pattern", square, "cross" if cross else side, sizes),
                ("hook_lse", "lse", ("batch", "head", "query"), "cross" if cross else side, sizes),
            )
            for hook, field, axes, site_side, site_sizes in fields:
                sites.append(
                    Site(
                        f"{name}.{attention.name}.{hook}",
                        axes,
                        site_sizes,
                        module=kernel,
                        side=site_side,
                        attach=partial(_listen, recorder, kernel, field, call, runs[index], attention.own),
                        itemsize=_PATTERN_ITEMSIZE if field in ("scores", "pattern", "lse") else None,
                        fresh=field in ("scores", "pattern", "lse"),
                    )
                )
            if attention.out_proj is not None:
                out_proj = part(root, stack, index, attention.out_proj)
                z_reader = partial(_read_heads, stack.n_heads, d_value)
                sites.append(Site(f"{name}.{attention.name}.hook_z", per_head, value_sizes, out_proj, z_reader, True, side))
                out_name = "hook_cross_attn_out" if cross else "hook_attn_out"
                sites.append(Site(f"{name}.{out_name}", residual, sizes, out_proj, _read_first, side=side))
        if stack.ln2 is not None and (index, "ln2.hook_normalized") not in skipped:
            sites.append(Site(f"{name}.ln2.hook_normalized", residual, sizes, part(root, stack, index, stack.ln2), _read_first, side=side))
        if stack.mlp_down is not None and (index, "mlp.hook_post") not in skipped:
            post_axes = ("batch", "pos", "d_mlp")
            mlp_down = part(root, stack, index, stack.mlp_down)
            sites.append(Site(f"{name}.mlp.hook_post", post_axes, sizes, mlp_down, _read_projection_input, pre=True, side=side))
        mlp_out = mlp_outs.get(index, stack.mlp_out)
        if mlp_out is not None and (index, "hook_mlp_out") not in skipped:
            sites.append(Site(f"{name}.hook_mlp_out", residual, sizes, part(root, stack, index, mlp_out), _read_first, side=side))
        if "hook_resid_post" not in missing:
            output = block if stack.block_output is None else part(root, stack, index, stack.block_output)
            sites.append(Site(f"{name}.hook_resid_post", residual, sizes, output, _read_first, side=side))
        if runs[index] > 1:  # every site of this layer reads its own call of the shared modules
            sites[sites_before:] = [replace(site, call=call, calls=runs[index]) for site in sites[sites_before:]]
    if stack.ln_final is not None:
        call, calls = stack.ln_final_call
        sites.append(Site(f"{p}ln_final.hook_normalized", residual, sizes, submodule(root, stack.ln_final), _read_first,
                          side=side, call=call, calls=calls))
    else:
        unsupported[f"{p}ln_final.hook_normalized"] = "no norm follows the last block"
    return sites, unsupported


def _listen(recorder: AttentionRecorder, kernel: nn.Module, field: Field, call: int, calls: int, own: bool,
            session: Any, sink: Any) -> None:
    recorder.listen(kernel, field, sink, call, calls)
    if own:
        recorder.watch(kernel)


@contextlib.contextmanager
def _scope(recorder: AttentionRecorder, skipped: Sequence[tuple[str, nn.Module]], selected: Sequence[Site],
           grad: bool) -> Iterator[None]:
    """Record the attention kernel's calls where a selected site listens to them, and refuse a pass that runs a
    block the probe pass skipped (`skipped`: (path, block)): the layers were numbered without it."""
    with contextlib.ExitStack() as stack:
        if any(site.attach is not None for site in selected):
            stack.enter_context(recorder.recording(grad=grad))
        for path, block in skipped:
            stack.callback(block.register_forward_pre_hook(partial(_refuse_skipped, path)).remove)
        yield


def _refuse_skipped(path: str, module: nn.Module, args: Any) -> None:
    raise CaptureError(
        f"block {path!r} ran on this input, but not on the probe's, from which the layers were numbered (it is not"
        " one of them): the model runs other blocks on this input (Mllama's cross-attention layers run only with"
        " an image); capture it on inputs like the probe's (text alone)."
    )


def skipped_blocks(root: nn.Module, stacks: Sequence[StackLayout]) -> list[tuple[str, nn.Module]]:
    """Return (path, block) of each block of `stacks`' lists that is none of their layers (skipped on the probe
    pass's input: `StackLayout.layers` names the blocks that ran)."""
    skipped = []
    for stack in stacks:
        if not stack.layers:
            continue
        blocks = submodule(root, stack.blocks)
        ran = {index for index, _ in stack.layers}
        skipped += [(f"{stack.blocks}.{i}", blocks[i]) for i in range(len(blocks)) if i not in ran]  # type: ignore[arg-type]
    return skipped


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
    unsupported: Mapping[str, str] | None = None,
) -> Capturable:
    """Return the Capturable of a Hugging Face model whose stacks under `root` follow `stacks`.

    adapter: the adapter's name (recorded in the trace's meta); prepare: the input preparation of a model
    whose inputs are not text (see `Capturable.prepare`); unsupported: further {hook name: reason} the
    adapter declares, beside what the stacks lack.
    """
    recorder = recorder_for(model, stacks)
    sites: list[Site] = []
    missing: dict[str, str] = dict(unsupported or {})
    for stack in stacks:
        stack_sites_, stack_missing = stack_sites(root, stack, recorder)
        sites += stack_sites_
        missing.update(stack_missing)
    n_layers = max(len(stack.layer_calls(len(submodule(root, stack.blocks)))) for stack in stacks)  # type: ignore[arg-type]
    return assemble(model, sites, recorder, kind=kind, run=run, n_layers=n_layers, n_heads=stacks[0].n_heads,
                    max_positions=max_positions, adapter=adapter, prepare=prepare, unsupported=missing,
                    skipped=skipped_blocks(root, stacks))


def recorder_for(model: nn.Module, stacks: Sequence[StackLayout]) -> AttentionRecorder:
    """Return a recorder for `model`'s attention kernel (patterns read from the eager kernel's own weights), and
    for the attentions of `stacks` computed in a module's own code (`own_code`)."""
    own_code = any(attention.own for stack in stacks for attention in stack.attentions)
    return AttentionRecorder(use_kernel_weights=_implementation(model) == "eager", own_code=own_code)


def assemble(
    model: nn.Module,
    sites: Sequence[Site],
    recorder: AttentionRecorder,
    *,
    kind: ModelKind,
    run: Callable[[Encoded], Any],
    n_layers: int,
    n_heads: int,
    max_positions: int | None = None,
    adapter: str = "",
    prepare: Callable[..., Encoded] | None = None,
    unsupported: Mapping[str, str] | None = None,
    skipped: Sequence[tuple[str, nn.Module]] = (),
) -> Capturable:
    """Return the Capturable of `model` over `sites`, whose kernel sites listen through `recorder`. An attention
    with sinks (its module holds a `sinks` tensor, which it gives its kernel as `s_aux`) has its patterns
    restated from the scores and the sinks under every kernel (`recompute.sink_logits`). A capture that runs
    one of the `skipped` blocks (path, block) is refused (`_scope`)."""
    implementation = _implementation(model)
    sinks = any(isinstance(getattr(site.module, "sinks", None), Tensor) for site in sites
                if site.name.endswith(".hook_pattern"))
    attentions = _main_attentions(sites)
    windows = tuple(_window(module) for module in attentions) if kind == "decoder" else ()
    scales = tuple(_scale(module) for module in attentions)
    softcaps = tuple(_positive(getattr(module, "attn_logit_softcapping", None)) for module in attentions)
    return Capturable(
        model=model,
        model_id=str(getattr(model, "name_or_path", "") or type(model).__name__),
        kind=kind,
        n_layers=n_layers,
        n_heads=n_heads,
        sites=list(sites),
        run=run,
        max_positions=max_positions,
        attention="eager" if implementation == "eager" and not sinks else "recomputed",
        scope=partial(_scope, recorder, tuple(skipped)),
        prepare=prepare,
        embedding=partial(_embedding, model),
        adapter=adapter,
        implementation=implementation,
        model_class=type(model).__name__,
        unsupported=dict(unsupported or {}),
        sinks=sinks,
        windows=windows if any(windows) else (),
        skipped=_model_paths(model, [block for _, block in skipped]),
        scales=scales if any(scales) else (),
        softcaps=softcaps if any(softcaps) else (),
        sink_logits=partial(_sink_logits, tuple(attentions)) if sinks else (lambda: ()),
    )


def _model_paths(model: nn.Module, modules: Sequence[nn.Module]) -> tuple[str, ...]:
    """Return the paths under `model` of `modules` (its submodules), in order."""
    if not modules:
        return ()
    paths = {id(module): path for path, module in model.named_modules()}
    return tuple(paths[id(module)] for module in modules)


_MAIN_PATTERN = re.compile(r"blocks\.(\d+)\.attn\.hook_pattern")


def _main_attentions(sites: Sequence[Site]) -> list[nn.Module | None]:
    """Return the attention module of each layer of the main stack (`blocks.{i}.attn.hook_pattern`'s), in order."""
    found = {int(match.group(1)): site.module for site in sites if (match := _MAIN_PATTERN.fullmatch(site.name))}
    return [found.get(layer) for layer in range(max(found, default=-1) + 1)]


_ABSENT = object()


def _window(module: nn.Module | None) -> int:
    """Return the sliding window a decoder's attention module gives its kernel (`sliding_window`: its own
    attribute, None on its full-attention layers, as Qwen2, Gemma 2 and 3, Cohere 2 and gpt-oss keep it; else its
    config's, which Mistral and Phi-3 pass on every layer), 0 for none. The streamed checks confirm it."""
    if module is None:
        return 0
    window = getattr(module, "sliding_window", _ABSENT)
    if window is _ABSENT:
        window = getattr(getattr(module, "config", None), "sliding_window", None)
    return int(window) if isinstance(window, int) and window > 0 else 0


def _scale(module: nn.Module | None) -> float:
    """Return the softmax scale an attention module gives its kernel (its `scaling`, which transformers'
    attention modules pass as the kernel's `scaling`), 0.0 where it keeps none."""
    return _positive(getattr(module, "scaling", None))


def _positive(value: Any) -> float:
    """Return `value` as a float when it is a positive number, else 0.0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0.0


def _sink_logits(attentions: Sequence[nn.Module | None]) -> tuple[tuple[float, ...], ...]:
    """Return each layer's sink logits now [head] as floats (empty for a layer without sinks)."""
    logits = [getattr(module, "sinks", None) for module in attentions]
    return tuple(tuple(each.detach().float().cpu().tolist()) if isinstance(each, Tensor) else () for each in logits)


def _implementation(model: nn.Module) -> str:
    return str(getattr(model.config, "_attn_implementation", None) or "eager")


def _embedding(model: nn.Module, side: str) -> nn.Module | None:
    """Return the token-embedding module of `side` that the forward really calls: the encoder's in an
    encoder-decoder (transformers 5 ties `shared` to separate modules of each stack, so `shared` never runs),
    a dual encoder's text tower's (CLIP: the model offers none of its own), the model's input embeddings
    otherwise, or the decoder's."""
    owner: nn.Module | None = model
    if side == "main" and getattr(model.config, "is_encoder_decoder", False):
        get_encoder = getattr(model, "get_encoder", None)
        owner = get_encoder() if callable(get_encoder) else model
    if side == "decoder":
        get_decoder = getattr(model, "get_decoder", None)
        owner = get_decoder() if callable(get_decoder) else None
    module = _input_embeddings(owner)
    tower = getattr(model, "text_model", None)
    if module is None and side == "main" and isinstance(tower, nn.Module):
        module = _input_embeddings(tower) or _token_embedding(tower, getattr(getattr(tower, "config", None), "vocab_size", None))
    return module


def _input_embeddings(owner: nn.Module | None) -> nn.Module | None:
    """Return `owner.get_input_embeddings()`, or None where it has none (or transformers does not find it)."""
    get = getattr(owner, "get_input_embeddings", None)
    if not callable(get):
        return None
    try:
        module = get()
    except NotImplementedError:
        return None
    return module if isinstance(module, nn.Module) else None


def _token_embedding(tower: nn.Module, vocab: int | None) -> nn.Module | None:
    """Return the one embedding table of `tower` with a row per token of its `vocab` (OWL-ViT's text tower, which
    does not name it as its input embeddings), or None where there is not exactly one."""
    tables = [module for module in tower.modules() if isinstance(module, nn.Embedding) and module.num_embeddings == vocab]
    return tables[0] if len(tables) == 1 else None


def run_model(
    model: nn.Module, encoded: Encoded, *, disable_cache: bool, position_offset: int | None = None,
    extra: Mapping[str, Any] | None = None, pixels: Callable[[Tensor], Mapping[str, Any]] | None = None,
) -> Any:
    """Return the model's output on an Encoded: ids or embeddings, masks, the decoder or image side, pixels, audio
    (features, or raw audio with its sample mask).

    position_offset: for models that take `position_ids` (absolute or rotary positions), the id of the first
    position; a left-padded batch then gets position ids that follow the padding, so every example sees the
    positions it would see alone. Unpadded and right-padded batches get none (the model's own are right).
    extra: further keyword arguments an adapter passes (ViT-MAE's `noise`, which keeps its patches in order).
    pixels: the keyword arguments that feed the Encoded's pixel values (of the main or the image side) to the
    model, for a model that takes more than `pixel_values` (`naflex`: the patches with where they lie).
    """
    feed = pixels or (lambda values: {"pixel_values": values})
    inputs: dict[str, Any] = {}
    if encoded.pixel_values is not None:
        inputs.update(feed(encoded.pixel_values))
    elif encoded.input_features is not None or encoded.input_values is not None:
        # audio; its mask is per sample or feature frame (the positions are frames after the model's own encoder)
        field = "input_features" if encoded.input_features is not None else "input_values"
        inputs[field] = getattr(encoded, field)
        if encoded.sample_mask is not None:
            inputs["attention_mask"] = encoded.sample_mask
    else:
        inputs.update(_side_inputs(encoded, ""))
        if encoded.token_type_ids is not None:
            inputs["token_type_ids"] = segment_ids(model, encoded.token_type_ids)
        if position_offset is not None:
            # Positions numbered after a padding index (RoBERTa) are derived from the ids themselves, so ids
            # replaced by a baseline (pad tokens) would move them: such models always get the real positions.
            positions = padded_positions(encoded.attention_mask, position_offset, always=position_offset > 0)
            if positions is not None:
                inputs["position_ids"] = positions
    if encoded.decoder is not None:
        inputs.update(_side_inputs(encoded.decoder, "decoder_"))
    if encoded.image is not None:
        inputs.update(feed(encoded.image.pixel_values))
    if disable_cache:  # a decoder would otherwise build a key/value cache it never reuses here
        inputs["use_cache"] = False
    return model(**inputs, **(extra or {}), return_dict=True)


def forward_parameters(model: nn.Module) -> Mapping[str, inspect.Parameter]:
    """Return the parameters of `model.forward` by name (empty where its signature cannot be read)."""
    try:
        return inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}


def segment_ids(model: nn.Module, token_type_ids: Tensor) -> Tensor:
    """Return a text pair's segment ids [batch, pos] for `model`, which must take them (`token_type_ids` in its
    forward's parameters): a tokenizer that gives them for a model that does not read them is refused, not dropped."""
    if "token_type_ids" not in forward_parameters(model):
        raise InputError(f"the tokenizer gives segment ids (token_type_ids) for text pairs, but {type(model).__name__}"
                         " takes none; load the tokenizer this model was trained with.")
    return token_type_ids


def padded_positions(attention_mask: Tensor, offset: int = 0, *, always: bool = False) -> Tensor | None:
    """Return position ids [batch, pos] that count real tokens only (offset + 0, 1, ...), or None when no
    padding precedes a real token (the model's default positions are then the same for every real token) and
    not `always`.

    Padding gets `offset - 1` (RoBERTa's padding index) or 0; it is masked, so its value changes nothing.
    """
    mask = attention_mask.bool()
    if not always and not bool((~mask[:, :-1] & mask[:, 1:]).any()):
        return None
    counted = mask.long().cumsum(-1) - 1 + offset
    return torch.where(mask, counted, torch.full_like(counted, max(offset - 1, 0)))


def _side_inputs(encoded: Encoded, prefix: str) -> Iterator[tuple[str, Tensor]]:
    if encoded.input_ids is not None:
        yield f"{prefix}input_ids", encoded.input_ids
    elif encoded.inputs_embeds is not None:
        yield f"{prefix}inputs_embeds", encoded.inputs_embeds
    yield f"{prefix}attention_mask", encoded.attention_mask
