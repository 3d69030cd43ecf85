"""Where a model's blocks, attentions, projections, MLPs and norms are, read from a probe of one forward pass.

The generic adapter's core. From the modules that called the attention kernel, or computed their attention in
their own code (`probe.observe`), it finds:

- the stacks of blocks: the innermost module list whose every block holds an attention (two stacks and a
  cross attention make an encoder-decoder); a block that runs several times in one pass, doing the same each
  time (ALBERT's one layer module run for every layer, a loop of layers), is one layer per call, in call order;
- per block, each attention and, in the order of calls, its output projection: the first projection after
  the kernel that takes [..., head * d_value] (the concatenated heads);
- the MLP: the modules with weights that the block calls after its last attention (norms and the attention
  itself aside), as the smallest module holding them all; its last projection (whose input is
  `mlp.hook_post`) when it is dense, none for a Mixture-of-Experts block;
- the norms by what they feed: `ln1` is the norm whose output object the attention reads, `ln2` the one the
  MLP reads, `ln_final` the one that reads the last block's output;
- the sizes from the kernel's own tensors (heads, key/value heads, head sizes), the block's input
  (d_model) and the MLP's last projection (d_mlp): what the model computes, whatever its config calls them.

What a model lacks is recorded per hook point with the reason, so the capture of one hook point can be
refused alone. A model that cannot be captured at all raises UnsupportedModelError saying why.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from interpret.capture.hf.layout import AttentionLayout, StackLayout, forward_parameters
from interpret.capture.hf.probe import PROJECTED, KernelCall, ModuleCall, Probe
from interpret.capture.hf.roles import common_path, is_mixture, is_norm, is_projection, relative, weights_act_here
from interpret.errors import UnsupportedModelError
from interpret.trace import ModelKind

ADAPTERS_HINT = "register an adapter for it under the entry-point group 'interpret.adapters'"


@dataclass(frozen=True)
class ModelLayout:
    """Everything the generic adapter derived: the stacks, the kind, and how the model is run.

    position_offset: None when the model gets no position ids from the collector; otherwise the first
        position's id, passed when a batch is left-padded (position ids then follow the padding).
    positions: how many positions the first self-attention saw in the probe (a vision model's special
        tokens and patches).
    """

    kind: ModelKind
    stacks: tuple[StackLayout, ...]
    max_positions: int | None = None
    position_offset: int | None = None
    positions: int = 0


@dataclass(frozen=True)
class AttentionCall:
    """One attention module's call as the structure sees it (from the kernel, or from a quirk adapter)."""

    path: str
    order: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_value: int
    query_length: int
    key_length: int
    own: bool = False
    projected: bool = False  # the call applies the output projection itself (F.multi_head_attention_forward)

    @classmethod
    def from_kernel(cls, call: KernelCall, own: bool = False) -> AttentionCall:
        """Return the attention call of one kernel call (own: an attention computed in the module's own code)."""
        return cls(call.path, call.order, call.n_heads, call.n_kv_heads, call.d_head, call.d_value,
                   call.query_length, call.key_length, own, PROJECTED in call.kwargs)


def model_layout(
    model: nn.Module,
    probe: Probe,
    attention_calls: Sequence[AttentionCall] | None = None,
    *,
    vision: bool = False,
) -> ModelLayout:
    """Return the layout of `model` from `probe` (attention calls default to the probe's kernel calls, and the
    attentions computed in the own code of modules that call no kernel)."""
    calls = list(attention_calls) if attention_calls is not None else probe_attentions(probe)
    if not calls:
        raise UnsupportedModelError(_no_attention_reason(model, probe))
    stacks = find_stacks(model, probe, calls)
    _refuse_missed_layers(model, probe, stacks)
    if len(stacks) == 2 and any(a.name == "cross_attn" for a in stacks[1].attentions):
        encoder, decoder = stacks
        stacks = [replace(encoder, prefix="encoder.", side="main"), replace(decoder, prefix="decoder.", side="decoder")]
        kind: ModelKind = "encoder-decoder"
    elif len(stacks) == 1:
        kind = "vision" if vision else "decoder" if _causal(model, probe, calls) else "encoder"
    else:
        lists = ", ".join(stack.blocks for stack in stacks)
        raise UnsupportedModelError(
            f"{type(model).__name__} runs {len(stacks)} stacks of attention blocks ({lists}) that are neither one"
            f" stack nor an encoder-decoder pair; {ADAPTERS_HINT} that says how they relate."
        )
    return ModelLayout(
        kind=kind,
        stacks=tuple(stacks),
        max_positions=None if vision else max_positions(model),
        position_offset=position_offset(model) if kind in ("decoder", "encoder") else None,
        positions=calls[0].query_length,
    )


def _refuse_missed_layers(model: nn.Module, probe: Probe, stacks: Sequence[StackLayout]) -> None:
    """Refuse a model whose layers elsewhere compute attention in their own code that the probe could not take
    (windows, a softmax over another axis: `probe.missed`): capturing the stacks found would leave those layers
    out without a word (PP-FormulaNet's windowed vision encoder beside its text decoder)."""
    for path, why in probe.missed.items():
        module = type(probe.modules[path]).__name__
        inside = any(path.startswith(stack.blocks + ".") for stack in stacks)
        if "Attention" in module and not inside and _in_a_list(path, probe.modules):
            found = ", ".join(stack.blocks for stack in stacks)
            raise UnsupportedModelError(
                f"{type(model).__name__} computes attention in its own code at {path!r} ({module}), but {why}, so"
                f" those layers cannot be captured beside the stack{'s' if len(stacks) > 1 else ''} found ({found});"
                f" capturing only the rest would leave them out; {ADAPTERS_HINT} that reads {module}."
            )


def probe_attentions(probe: Probe) -> list[AttentionCall]:
    """Return the probe's attention calls in order: kernel calls, and what modules that call no kernel computed
    in their own code (`probe.own`, which also holds the eager kernel's own statement, seen from its caller),
    except outside every list of blocks: there it is a pooling head (AIMv2's), not a layer."""
    through_kernel = {call.path for call in probe.kernels}
    calls = [AttentionCall.from_kernel(call) for call in probe.kernels]
    calls += [AttentionCall.from_kernel(call, own=True) for call in probe.own
              if call.path not in through_kernel and _in_a_list(call.path, probe.modules)]
    return sorted(calls, key=lambda call: call.order)


def _in_a_list(path: str, modules: dict[str, nn.Module]) -> bool:
    parts = path.split(".")
    return any(parts[cut].isdigit() and isinstance(modules.get(".".join(parts[:cut])), (nn.ModuleList, nn.Sequential))
               for cut in range(1, len(parts)))


def find_stacks(model: nn.Module, probe: Probe, calls: Sequence[AttentionCall]) -> list[StackLayout]:
    """Return one StackLayout per stack of blocks holding `calls`, in the order the stacks first run."""
    paths = list(dict.fromkeys(call.path for call in calls))
    ran = {call.path for call in probe.calls}
    grouped: dict[str, dict[int, list[AttentionCall]]] = {}
    for call in calls:
        blocks, index = _block_of(call.path, probe.modules, ran, paths, model)
        grouped.setdefault(blocks, {}).setdefault(index, []).append(call)
    return [_stack(model, probe, blocks, by_block) for blocks, by_block in grouped.items()]


def _block_of(path: str, modules: dict[str, nn.Module], ran: set[str], attention_paths: Sequence[str],
              model: nn.Module) -> tuple[str, int]:
    """Return (path of the block list, block index) of an attention at `path`: the innermost module list
    above it whose every block that ran in the pass (`ran`: the paths of the modules called) holds an attention
    (a block the model skips on this input, as Mllama skips its cross-attention layers on text alone, mixes
    nothing)."""
    parts = path.split(".")
    lists = []
    for cut in range(len(parts) - 1, 0, -1):
        container = modules.get(".".join(parts[:cut]))
        if parts[cut].isdigit() and isinstance(container, (nn.ModuleList, nn.Sequential)):
            lists.append((".".join(parts[:cut]), int(parts[cut]), len(container)))
    for blocks, index, size in lists:
        if all(any(other.startswith(f"{blocks}.{i}.") for other in attention_paths) for i in range(size)
               if f"{blocks}.{i}" in ran):
            return blocks, index
    if lists:
        blocks, _, size = lists[-1]
        holding = sorted({int(p[len(blocks) + 1:].split(".")[0]) for p in attention_paths if p.startswith(blocks + ".")})
        if len(holding) == size:  # each element is an attention module itself: no block bounds a layer
            raise UnsupportedModelError(
                f"{type(model).__name__} keeps its attention modules in a list of their own ({blocks!r}), apart from"
                " the rest of each layer (parallel lists of norms and MLPs, as XLM's), so no block module bounds a"
                f" layer; {ADAPTERS_HINT} that maps each layer onto its lists."
            )
        raise UnsupportedModelError(
            f"{type(model).__name__} has attention in only {len(holding)} of the {size} blocks of {blocks!r} (the"
            " others mix tokens another way, e.g. state-space or convolution layers), so attention patterns"
            " alone do not describe how information moves through it; capture is not supported for such hybrids."
        )
    raise UnsupportedModelError(
        f"the attention module {path!r} of {type(model).__name__} is not inside a list of blocks; {ADAPTERS_HINT}."
    )


# Parts a block may lack while its neighbours have them (ModernBERT's first block has no attention norm; a
# Mixture-of-Experts model may keep dense MLPs in its first layers): they are declared missing per block.
_OPTIONAL = {"ln1": "ln1.hook_normalized", "ln2": "ln2.hook_normalized", "mlp_down": "mlp.hook_post"}
# Parts each block may have or lack on its own, so what a block lacks is said per block: the optional parts, and
# the module whose output is the MLP's contribution (which may also differ from block to block).
_PER_BLOCK = {**_OPTIONAL, "mlp_out": "hook_mlp_out"}


def _layer_calls(model: nn.Module, probe: Probe, blocks: str, by_block: dict[int, list[AttentionCall]]) -> tuple[
        dict[int, list[AttentionCall]], tuple[tuple[int, int], ...]]:
    """Return the attention calls of each block's first call, and per layer (block index, call of the block) in
    the order the layers run: each block once, or, where blocks run several times in one pass (ALBERT's one
    layer module run for every layer), one layer per call, each doing what the block's first call did."""
    first: dict[int, list[AttentionCall]] = {}
    order: list[tuple[int, int, int]] = []  # (start, block index, call)
    for index, made in by_block.items():
        block = f"{blocks}.{index}"
        runs = [call for call in probe.calls_of(block) if any(call.start < a.order < call.end for a in made)]
        inner = [[c.path for c in _inside(probe, block, run)] for run in runs]
        per_run = [[a for a in made if run.start < a.order < run.end] for run in runs]
        alike = all(work == inner[0] for work in inner) and all(len(a) == len(per_run[0]) for a in per_run)
        if len(runs) > 1 and not alike:
            raise UnsupportedModelError(
                f"{type(model).__name__} runs block {block!r} {len(runs)} times in one forward pass, doing different"
                f" work each time (a recurrent block), so its calls are not layers alike; {ADAPTERS_HINT}."
            )
        first[index] = per_run[0] if len(runs) > 1 else made
        order += [(run.start, index, call) for call, run in enumerate(runs)]
    layers = tuple((index, call) for _, index, call in sorted(order))
    # explicit where a block runs several times, or where some blocks of the list did not run (skipped on this
    # input): the layers are then the calls that ran, numbered in the order they ran
    every_block_once = sorted(by_block) == list(range(len(probe.modules[blocks])))
    return first, layers if len(layers) > len(by_block) or not every_block_once else ()


def _inside(probe: Probe, block: str, run: ModuleCall | None = None) -> list[ModuleCall]:
    """Return the calls of the modules inside `block`: all of them, or those made during its call `run`."""
    return [call for call in probe.calls if call.path.startswith(block + ".")
            and (run is None or run.start < call.start < run.end)]


def _stack(model: nn.Module, probe: Probe, blocks: str, by_block: dict[int, list[AttentionCall]]) -> StackLayout:
    """Return the StackLayout of the block list at `blocks`, from its blocks, which must agree but for
    optional parts (norms, the MLP's hidden layer) some blocks may lack."""
    by_block, layers = _layer_calls(model, probe, blocks, by_block)
    layouts = {index: _block_layout(probe, f"{blocks}.{index}", made, model, shared=bool(layers))
               for index, made in sorted(by_block.items())}
    first = min(layouts)
    template = layouts[first]
    chosen: dict[str, Any] = {}
    per_block: list[tuple[int, str, str]] = []
    for name, hook in _OPTIONAL.items():
        values = {getattr(layout, name) for layout in layouts.values()} - {None}
        if len(values) > 1:
            chosen[name] = None
            per_block += [(i, hook, f"blocks differ in {name} ({', '.join(sorted(values))})") for i in layouts]
            continue
        chosen[name] = next(iter(values), None)
        for index, layout in layouts.items():
            if getattr(layout, name) is None and chosen[name] is not None:
                why = dict(layout.unsupported).get(hook, "this block lacks it")
                per_block.append((index, hook, why))
    if chosen["mlp_down"] is not None and len({layout.d_mlp for layout in layouts.values() if layout.mlp_down}) > 1:
        chosen["mlp_down"] = None
        per_block += [(i, "mlp.hook_post", "blocks differ in MLP width") for i in layouts]
    d_mlp = max(layout.d_mlp for layout in layouts.values()) if chosen["mlp_down"] else 0
    # The module whose output is the MLP's contribution may differ from block to block (a dense MLP's own
    # projection in the first blocks, a mixture of experts in the rest): the most common path is the stack's,
    # the others are the blocks' own, and a block without one lacks hook_mlp_out.
    outputs = Counter(layout.mlp_out for layout in layouts.values() if layout.mlp_out is not None)
    chosen["mlp_out"] = outputs.most_common(1)[0][0] if outputs else None
    block_mlp_out = tuple((index, layout.mlp_out) for index, layout in layouts.items()
                          if layout.mlp_out is not None and layout.mlp_out != chosen["mlp_out"])
    if chosen["mlp_out"] is not None:
        per_block += [(index, "hook_mlp_out", dict(layout.unsupported).get("hook_mlp_out", "this block has no MLP"))
                      for index, layout in layouts.items() if layout.mlp_out is None]
    shared = {hook: why for hook, why in template.unsupported
              if hook not in _PER_BLOCK.values() or chosen[_key(hook)] is None}
    block_heads = tuple((index, *_heads(layout)) for index, layout in layouts.items()
                        if _heads(layout) != _heads(template))
    for index, layout in layouts.items():
        if _core(layout) != _core(template):
            raise UnsupportedModelError(
                f"block {index} of {blocks!r} in {type(model).__name__} is laid out unlike block {first}"
                f" ({_difference(_core(template), _core(layout))}); per-layer layouts need an adapter: {ADAPTERS_HINT}."
            )
        for hook, why in layout.unsupported:
            if hook not in _PER_BLOCK.values() and hook not in shared:
                per_block.append((index, hook, why))
    ln_final, ln_final_call = _final_norm(probe, blocks, layers[-1][0] if layers else max(layouts))
    return replace(
        template,
        blocks=blocks,
        layers=layers,
        ln_final=ln_final,
        ln_final_call=ln_final_call,
        d_mlp=d_mlp,
        unsupported=tuple(sorted(shared.items())),
        block_unsupported=tuple(sorted(set(per_block))),
        block_heads=block_heads,
        block_mlp_out=block_mlp_out,
        **chosen,
    )


def _heads(layout: StackLayout) -> tuple[int, int]:
    """A block's head sizes, which may differ from block to block: (d_head, d_value)."""
    return layout.d_head, layout.d_value or layout.d_head


def _core(layout: StackLayout) -> StackLayout:
    """A block's layout without what may differ from block to block: optional parts, head sizes, the module whose
    output is the MLP's contribution, and the count of key/value heads (hook_k and hook_v hold them repeated per
    query head, so no hook's shape depends on it)."""
    return replace(layout, ln1=None, ln2=None, mlp_down=None, d_mlp=0, unsupported=(), d_head=0, d_value=None,
                   n_kv_heads=None, mlp_out=None)


def _key(hook: str) -> str:
    return next(name for name, suffix in _PER_BLOCK.items() if suffix == hook)


def _difference(a: StackLayout, b: StackLayout) -> str:
    for name in ("attentions", "n_heads", "d_head", "d_value", "mlp_out", "mlp_down", "d_mlp", "d_model", "ln1", "ln2"):
        if getattr(a, name) != getattr(b, name):
            return f"{name}: {getattr(a, name)!r} vs {getattr(b, name)!r}"
    return "unsupported hook points differ"


def _block_layout(
    probe: Probe, block: str, attention_calls: list[AttentionCall], model: nn.Module, shared: bool = False
) -> StackLayout:
    """Return the layout of one block (paths relative to it, `blocks` left empty), with what it lacks and why;
    shared: the block runs for several layers, and its first call is read."""
    block_calls = probe.calls_of(block)
    inside = _inside(probe, block, block_calls[0] if shared and block_calls else None)
    if not block_calls or block_calls[0].hidden is None or block_calls[0].in_shape is None:
        raise UnsupportedModelError(
            f"block {block!r} of {type(model).__name__} takes no [batch, pos, d_model] tensor; {ADAPTERS_HINT}."
        )
    block_call = block_calls[0]
    d_model = block_call.in_shape[-1]
    unsupported: dict[str, str] = {}
    if len(block_call.in_shape) != 3:  # Gemma 3n's AltUp: [predictions, batch, pos, d]; hyper-connections: [.., n, d]
        why = (f"the blocks pass the residual stream as a tensor of shape {list(block_call.in_shape)}, not [batch,"
               " pos, d_model]: several streams at once (Gemma 3n's AltUp predictions, DeepSeek V4's hyper-connections)")
        unsupported["hook_resid_pre"] = unsupported["hook_resid_post"] = why
    attentions: list[AttentionLayout] = []
    scopes: list[str] = []
    heads: tuple[int, int, int, int] | None = None
    attention_end = 0
    for call in sorted(attention_calls, key=lambda c: c.order):
        cross = call.key_length != call.query_length
        name = "cross_attn" if cross else "attn"
        if any(a.kernel == relative(call.path, block) and a.name == name for a in attentions):
            raise UnsupportedModelError(
                f"the attention module {call.path!r} of {type(model).__name__} makes two attention calls at once and"
                " combines their outputs (differential attention subtracts one softmax map from another), so no one"
                " pattern over the keys is what it applies; attention patterns do not describe it."
            )
        if any(a.name == name for a in attentions):
            raise UnsupportedModelError(
                f"block {block!r} of {type(model).__name__} runs two {'cross' if cross else 'self'}-attentions;"
                f" {ADAPTERS_HINT}."
            )
        joined = call.n_heads * call.d_value
        out_proj = None if call.projected else next(
            (c for c in inside if c.start > call.order and is_projection(probe.modules[c.path])
             and c.in_shape is not None and c.in_shape[-1] == joined),
            None,
        )
        if out_proj is None:
            why = ("the output projection runs inside torch's multi_head_attention_forward, which takes its weights"
                   " and never calls it" if call.projected
                   else "no projection takes the concatenated heads after the attention")
            unsupported[f"{name}.hook_z"] = unsupported[f"hook_{'cross_' if cross else ''}attn_out"] = why
            scopes.append(call.path)
            attention_end = max(attention_end, call.order)
        else:
            # The attention is everything from the kernel's module to the output projection (BERT's
            # `attention` holds both `attention.self` and `attention.output.dense`).
            scopes.append(common_path(call.path, out_proj.path))
            attention_end = max(attention_end, out_proj.end)
        out_path = None if out_proj is None else relative(out_proj.path, block)
        attentions.append(AttentionLayout(relative(call.path, block), out_path, name, own=call.own))
        sizes = (call.n_heads, call.n_kv_heads, call.d_head, call.d_value)
        if heads is None:
            heads = sizes
        elif heads[0] != sizes[0] or heads[2] != sizes[2] or heads[3] != sizes[3]:
            raise UnsupportedModelError(
                f"the attentions of block {block!r} differ in heads or head size ({heads} vs {sizes}); {ADAPTERS_HINT}."
            )
    assert heads is not None
    in_scope = lambda path: any(path == s or path.startswith(s + ".") for s in scopes)  # noqa: E731
    leaves = [
        call for call in inside
        if call.start > attention_end and not in_scope(call.path) and weights_act_here(probe.modules[call.path])
    ]
    leaves = _feed_forward(probe, block, leaves, unsupported)
    mlp_out, mlp_down, d_mlp = _mlp(probe, block, inside, leaves, d_model, unsupported)
    self_scope = scopes[[a.name for a in attentions].index("attn")] if any(a.name == "attn" for a in attentions) else scopes[0]
    in_self = lambda path: path == self_scope or path.startswith(self_scope + ".")  # noqa: E731
    ln1, ln2 = _block_norms(probe, inside, mlp_out, leaves, block, in_scope, in_self, unsupported)
    return StackLayout(
        prefix="",
        blocks="",
        side="main",
        attentions=tuple(attentions),
        mlp_out=mlp_out,
        mlp_down=mlp_down,
        n_heads=heads[0],
        d_head=heads[2],
        d_model=d_model,
        d_mlp=d_mlp,
        d_value=heads[3],
        n_kv_heads=heads[1],
        block_input=block_call.hidden,
        ln1=ln1,
        ln2=ln2,
        unsupported=tuple(sorted(unsupported.items())),
    )


def _feed_forward(probe: Probe, block: str, leaves: list[ModuleCall], unsupported: dict[str, str]) -> list[ModuleCall]:
    """Return the MLP's modules among `leaves` (the modules with weights the block calls after its attention),
    none where the block runs more than one feed-forward branch (with the reason in `unsupported`).

    The leaves are grouped by the child of the block that holds them, in call order. Where the first child holds
    a whole MLP (two or more of them) and single modules follow outside it, those are a branch of their own
    and are left out: Gemma 3n and Gemma 4 add a per-layer input through a gate and a projection after the MLP.
    A second such child, or experts beside the MLP (Gemma 4's Mixture-of-Experts half), make the feed-forward
    two branches that no one module's output sums."""
    groups: dict[str, list[ModuleCall]] = {}
    for call in leaves:
        groups.setdefault(relative(call.path, block).split(".")[0], []).append(call)
    children = list(groups)
    if len(children) < 2 or len(groups[children[0]]) < 2:
        return leaves
    rest = [call for child in children[1:] for call in groups[child]]
    if any(len(groups[child]) > 1 for child in children[1:]) or is_mixture(probe.modules, None, rest):
        why = (f"the block runs more than one branch after its attention ({', '.join(children)}), so no one module's"
               " output is the MLP's contribution")
        unsupported.update({"mlp.hook_post": why, "hook_mlp_out": why})
        return []
    return groups[children[0]]


def _mlp(
    probe: Probe, block: str, inside: list[ModuleCall], leaves: list[ModuleCall], d_model: int,
    unsupported: dict[str, str],
) -> tuple[str | None, str | None, int]:
    """Return (MLP module, its last projection, d_mlp) relative to the block, from the modules with weights the
    block calls after its attention (`leaves`); None where there is none, with the reason in `unsupported`."""
    if not leaves:  # none, or none that is the MLP alone (`_feed_forward` gave the reason)
        why = "no module with weights follows the attention in the block"
        for hook in ("mlp.hook_post", "hook_mlp_out"):
            unsupported.setdefault(hook, why)
        return None, None, 0
    holder = common_path(*(call.path for call in leaves))
    called = {call.path for call in inside}
    children = dict.fromkeys(f"{block}.{relative(call.path, block).split('.')[0]}" for call in leaves)
    mixtures = [child for child in children if child in called and is_mixture(probe.modules, child, [])]
    if holder == block and len(mixtures) == 1:
        # Leaves spread over several children of the block, one of which holds experts: that child is the MLP
        # (DeepSeek V4: its hyper-connection mixing before it, and inside it only the shared expert's calls are
        # [batch, pos] leaves), whose output is the whole mixture's, not the shared expert's last projection.
        holder = mixtures[0]
        leaves = [call for call in leaves if call.path.startswith(holder + ".")]
    projections = [call for call in leaves if is_projection(probe.modules[call.path])]
    last = projections[-1] if projections else None
    if holder == block:  # the MLP's modules sit directly in the block (BERT, BART): its last projection is its output
        if last is None or last is not leaves[-1] or last.out_shape is None or last.out_shape[-1] != d_model:
            why = "the block's MLP has no single output module"
            unsupported.update({"mlp.hook_post": why, "hook_mlp_out": why})
            return None, None, 0
        output = last
    else:
        output = next(call for call in inside if call.path == holder)
    if output.out_shape is None or len(output.out_shape) < 3:
        why = "the MLP works on flattened [batch * pos] rows, not [batch, pos, ...]"
        unsupported.update({"mlp.hook_post": why, "hook_mlp_out": why})
        return None, None, 0
    mlp_out = relative(output.path, block)
    if is_mixture(probe.modules, None if holder == block else holder, leaves):
        unsupported["mlp.hook_post"] = "Mixture-of-Experts block: each expert has its own hidden layer"
        return mlp_out, None, 0
    if last is None or last.out_shape is None or last.out_shape[-1] != d_model or last.in_shape is None:
        why = "the MLP's last projection does not map [batch, pos, d_mlp] to d_model"
        unsupported["mlp.hook_post"] = why
        return mlp_out, None, 0
    return mlp_out, relative(last.path, block), last.in_shape[-1]


def _block_norms(
    probe: Probe, inside: list[ModuleCall], mlp_out: str | None, mlp_leaves: list[ModuleCall], block: str,
    in_scope: Any, in_self: Any, unsupported: dict[str, str],
) -> tuple[str | None, str | None]:
    """Return (ln1, ln2) relative to the block: the norms whose output objects the self-attention and the MLP
    read (a decoder block's cross attention reads its own norm, which is neither)."""
    norms = [
        call for call in inside
        if is_norm(probe.modules[call.path]) and call.out_shape is not None and len(call.out_shape) >= 3
    ]
    attention_calls = [call for call in inside if in_self(call.path)]
    attention_reads = frozenset().union(*(call.inputs for call in attention_calls))
    # Norms inside the attention (query/key norms) normalise heads, not the attention's input.
    ln1 = next((c for c in norms if not in_scope(c.path) and c.output in attention_reads), None)
    mlp_path = None if mlp_out is None else f"{block}.{mlp_out}"
    in_mlp = lambda path: mlp_path is not None and (path == mlp_path or path.startswith(mlp_path + "."))  # noqa: E731
    mlp_calls = [c for c in inside if in_mlp(c.path)] + mlp_leaves
    mlp_reads = frozenset().union(*(call.inputs for call in mlp_calls))
    ln2 = next((c for c in norms if not in_mlp(c.path) and c.output in mlp_reads), None)
    if ln1 is None:
        first = min((call.start for call in attention_calls), default=0)
        before = [c for c in norms if c.end < first and not in_scope(c.path)]
        unsupported["ln1.hook_normalized"] = (
            f"the attention reads a reshaped copy of {relative(before[-1].path, block)}'s output, not the output itself"
            if before else "the attention reads the residual stream unnormalised (post-norm block)"
        )
    if ln2 is None:
        unsupported["ln2.hook_normalized"] = "no norm's output feeds the MLP as it is"
    elif ln1 is not None and ln2.path == ln1.path:
        unsupported["ln2.hook_normalized"] = "the MLP reads ln1's output (one norm for attention and MLP)"
        ln2 = None
    return (None if ln1 is None else relative(ln1.path, block), None if ln2 is None else relative(ln2.path, block))


def _final_norm(probe: Probe, blocks: str, last: int) -> tuple[str | None, tuple[int, int]]:
    """Return the path of the norm outside the blocks that reads the last block's output (or None), and which of
    its calls that is, of how many (a norm may also run between the layers: Dory's before each loop)."""
    last_calls = probe.calls_of(f"{blocks}.{last}")
    if not last_calls or last_calls[-1].output is None:
        return None, (0, 1)
    output = last_calls[-1].output
    for call in probe.calls:
        if call.start > last_calls[-1].end and output in call.inputs and is_norm(probe.modules[call.path]):
            runs = probe.calls_of(call.path)
            return call.path, ((runs.index(call), len(runs)) if len(runs) > 1 else (0, 1))
    return None, (0, 1)


def _causal(model: nn.Module, probe: Probe, calls: Sequence[AttentionCall]) -> bool:
    """Return whether the model's self-attention is causal (a decoder): as its attention modules say, else as
    its config or class says, else whether transformers ships the type as a causal language model and not as a
    masked one (BLOOM, MPT, XGLM: modules computing attention in their own code often declare nothing)."""
    from transformers.models.auto import modeling_auto

    flags = {getattr(probe.modules[call.path], "is_causal", None) for call in calls}
    if flags <= {True, False} and flags:
        return flags == {True}
    if getattr(model.config, "is_decoder", False) or type(model).__name__.endswith(("ForCausalLM", "LMHeadModel")):
        return True
    model_type = getattr(model.config, "model_type", None)
    return (model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
            and model_type not in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def max_positions(model: nn.Module) -> int | None:
    """Return the most positions the model's position embeddings allow, or None when it has no such limit."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("max_position_embeddings", "n_positions", "max_positions", "max_seq_len", "max_target_positions"):
        value = getattr(text, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            offset = _padding_offset(model)
            return value - offset if offset else value
    return None


def position_offset(model: nn.Module) -> int | None:
    """Return the id of the first position when the model takes `position_ids` (0, or RoBERTa's padding
    index + 1), or None when its forward takes no position ids."""
    if "position_ids" not in forward_parameters(model):
        return None
    return _padding_offset(model)


def _padding_offset(model: nn.Module) -> int:
    """Return padding_idx + 1 for embeddings that number positions after the padding index (RoBERTa), else 0."""
    for _, module in model.named_modules():
        padding = getattr(module, "padding_idx", None)
        if isinstance(padding, int) and isinstance(getattr(module, "position_embeddings", None), nn.Embedding):
            return padding + 1
    return 0


# What a model's own code says where it computes attention: a softmax, an attention kernel (PyTorch's SDPA or
# multi-head attention, transformers' attention interface). Read case-blind (`nn.Softmax`).
_ATTENTION_SIGNS = ("softmax", "scaled_dot_product_attention", "all_attention_functions", "attention_interface",
                    "multi_head_attention_forward", "multiheadattention")


def has_attention_code(model: nn.Module) -> bool:
    """Whether the modeling code of `model` (every transformers model module its modules' classes come from, the
    whole file) can compute attention: some of it names a softmax or an attention kernel. False is proof of no
    attention without running the model (a neural audio codec's convolutions); a module whose source cannot be
    read counts as attention."""
    modules = {inspect.getmodule(cls) for module in model.modules() for cls in type(module).__mro__
               if cls.__module__.startswith("transformers.models.")}
    for module in modules:
        try:
            source = inspect.getsource(module).lower()
        except (OSError, TypeError):  # no source to read (or no module: `getsource(None)` is a TypeError)
            return True
        if any(sign in source for sign in _ATTENTION_SIGNS):
            return True
    return False


def no_attention(model: nn.Module, seen: str) -> str:
    """Return the refusal of a model with no attention layers, `seen` saying how that was found."""
    model_type = getattr(model.config, "model_type", "?")
    return (
        f"{type(model).__name__} (model type {model_type!r}) has no attention layers ({seen}), so there is no"
        " attention to capture; interpret explains Transformers."
    )


def _no_attention_reason(model: nn.Module, probe: Probe) -> str:
    """Return why no attention was seen: none at all, or attention computed outside transformers' interface."""
    model_type = getattr(model.config, "model_type", "?")
    named = sorted({type(module).__name__ for module in probe.modules.values() if "Attention" in type(module).__name__})
    missed = [(path, why) for path, why in probe.missed.items() if "Attention" in type(probe.modules[path]).__name__]
    if missed:
        path, why = missed[0]
        module = type(probe.modules[path]).__name__
        return (
            f"{type(model).__name__} (model type {model_type!r}) computes attention in its own code ({module}), but"
            f" {why}, so its patterns are not the [query, key] probabilities the toolkit records; {ADAPTERS_HINT}"
            f" that reads {module}."
        )
    if named:
        return (
            f"{type(model).__name__} (model type {model_type!r}) computes no softmax over keys in its attention"
            f" modules ({named[0]}): it mixes tokens another way (a recurrence, a linear or an approximate attention),"
            " so it has no attention pattern to capture."
        )
    return no_attention(model, "no module called an attention kernel in a forward pass")
