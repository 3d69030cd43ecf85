"""Weight surgery: remove pruned heads from the query, key, value and output projections, and write a config
that builds the smaller model, for the reference models and Hugging Face models alike.

Every layer stores the same number of heads (no family of transformers 5 and not the reference model store
per-layer head counts), so each layer keeps the heads its mask keeps, padded up to the largest count of any
layer with heads of its own that the mask removed; a padding head's output-projection columns are zeroed, so
it adds exactly nothing, as its gate of 0 did. Under grouped-query attention a key/value head (and its group of
query heads) goes only when every query head of its group goes; within the groups kept, query heads go too,
as long as every group keeps the same number (the largest any group needs; padding heads zeroed as above).

The smaller config sets the head count (num_attention_heads, num_key_value_heads) and `head_dim`. Whether a
family honours `head_dim` is tested, not assumed: the model is built from the new config and every tensor's
shape must equal the sliced weights'. Families that derive the head size from hidden_size / heads (BERT,
RoBERTa, GPT-2, OPT, DistilBERT, ...) cannot store fewer heads; for them the heads are removed by zeroing
their weights in place (same shapes, same parameter count, outputs equal to the gated model's), and the
result says so. (DeBERTa-v2's `attention_head_size` does not help BERT either: its attention output projection
takes hidden_size inputs whatever the head count.)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interpret.capture.sites import model_device
from interpret.errors import ConfigError, InterpretError, UnsupportedModelError
from interpret.heads.parts import LayerParts, layer_parts, out_axis


@dataclass(frozen=True)
class Pruned:
    """The result of surgery.

    model: the pruned model (a new module; the input model is not changed), in eval mode.
    removed: whether weights were physically removed (False: zeroed in place, shapes unchanged).
    heads_per_layer / kv_heads_per_layer: heads every layer stores now.
    kept: per layer, the original query heads still stored (padding heads included).
    parameters_before / parameters_after: parameter counts. note: what was done and, if not removed, why.
    """

    model: nn.Module
    removed: bool
    heads_per_layer: int
    kv_heads_per_layer: int
    kept: tuple[tuple[int, ...], ...]
    parameters_before: int
    parameters_after: int
    note: str


def count_parameters(model: nn.Module) -> int:
    """Return the number of parameter elements of `model`."""
    return sum(param.numel() for param in model.parameters())


def keep_groups(mask: Float[Tensor, "layer head"], n_kv: int) -> list[list[int]]:
    """Return, per layer, the key/value groups to store: those with a query head still on, padded (lowest
    removed groups first) to the largest count of any layer, at least one."""
    layers, heads = mask.shape
    ratio = heads // n_kv
    live = [[g for g in range(n_kv) if bool(mask[l, g * ratio:(g + 1) * ratio].any())] for l in range(layers)]
    return _padded(live, [range(n_kv)] * layers)


def keep_query_heads(mask: Float[Tensor, "layer head"], groups: list[list[int]], ratio: int) -> list[list[int]]:
    """Return, per layer, the query heads to store, group by group: each stored group keeps its heads still on,
    padded with its removed ones to the largest such count of any group of any layer (so that every key/value
    head serves the same number of query heads, as grouped-query attention requires)."""
    pools = [(l, range(g * ratio, (g + 1) * ratio)) for l, layer_groups in enumerate(groups) for g in layer_groups]
    live = [[h for h in pool if mask[l, h] != 0] for l, pool in pools]
    padded = iter(_padded(live, [pool for _, pool in pools]))
    return [[h for _ in layer_groups for h in next(padded)] for layer_groups in groups]


def _padded(live: list[list[int]], pools: list[Sequence[int]]) -> list[list[int]]:
    """Return each `live` list with the lowest members of its pool not in it added, up to the longest (at least 1)."""
    width = max(1, max((len(on) for on in live), default=1))
    return [
        sorted(on + [x for x in pool if x not in on][: width - len(on)]) for on, pool in zip(live, pools, strict=True)
    ]


def prune_heads(
    model: nn.Module, mask: Float[Tensor, "layer head"], *, prefix: str = "", in_memory: bool = False
) -> Pruned:
    """Return the model with the heads whose mask is 0 removed (see the module docstring); `model` is unchanged.

    in_memory: where the family's config cannot store fewer heads (or one count for every layer removes none,
        because a layer keeps all its heads), still remove them from the modules of a copy (each layer's own
        heads: smaller projections swapped in; families whose attention infers the head count from the
        projection's width, as BERT, RoBERTa and DistilBERT do in transformers 5; checked by a probe pass):
        faster, but save_pretrained would write weights its config cannot load. Without it, and where the
        probe fails (GPT-2, OPT read the head count from the config), such families get the zeroed copy.
    """
    from interpret.capture.api import capturable_for

    capturable = capturable_for(model)
    n_layers, n_heads = capturable.n_layers, capturable.n_heads
    if tuple(mask.shape) != (n_layers, n_heads):
        raise ConfigError(f"the mask has shape {tuple(mask.shape)}; this model has {n_layers} layers of {n_heads} heads.")
    mask = (mask != 0).to(torch.float32).cpu()
    outs = _out_projections(model, capturable, prefix)
    before = count_parameters(model)
    try:
        parts = layer_parts(model, outs)
    except UnsupportedModelError as err:
        return _zeroed(model, mask, outs, n_heads, before, f"{err}")
    modules = dict(model.named_modules())
    d_head = _in_width(modules[parts[0].out]) // n_heads
    n_kv = _kv_heads(modules, parts[0], n_heads, d_head)
    groups = keep_groups(mask, n_kv)
    ratio = n_heads // n_kv
    kept = keep_query_heads(mask, groups, ratio)
    state = _sliced_state(model, modules, parts, kept, groups, mask, d_head, n_heads, n_kv)
    width_q, width_kv = len(kept[0]), len(groups[0])
    try:
        smaller: nn.Module | None = _build(model, width_q, width_kv, d_head)
        mismatch = _mismatch(smaller, state)
    except (InterpretError, ValueError, TypeError) as err:
        smaller, mismatch = None, f"its config cannot be rebuilt with {width_q} heads ({' '.join(str(err).split())[:160]})"
    # A layer that keeps every head pads every other layer to the full count: the config path removes nothing.
    full = width_q == n_heads
    if (mismatch or full) and in_memory and n_kv == n_heads:
        # in memory every layer keeps only its own heads (at least one, zeroed when none is on)
        own = [[h for h in range(n_heads) if mask[l, h] != 0] or [0] for l in range(n_layers)]
        own_state = _sliced_state(model, modules, parts, own, own, mask, d_head, n_heads, n_kv)
        why = mismatch or "a layer keeps every head, so one head count for all layers removes none"
        swapped = _swapped(model, own_state, parts, before, why, own)
        problem = _differs_from_gated(model, swapped.model, mask, prefix)
        if not problem:
            return swapped
        if mismatch:
            mismatch = f"{mismatch}; swapped in memory, {problem}"
    if mismatch or smaller is None:
        name = type(model.config).__name__ if hasattr(model, "config") else type(model).__name__
        return _zeroed(
            model, mask, outs, n_heads, before,
            f"{name} cannot store {width_q} heads of width {d_head} ({mismatch}): the family derives the head"
            " size from the model width",
        )
    smaller.load_state_dict(state, strict=True)
    smaller = smaller.to(model_device(model)).eval()
    return Pruned(
        smaller, True, width_q, width_kv, tuple(tuple(k) for k in kept), before, count_parameters(smaller),
        f"removed: {width_q} of {n_heads} query heads and {width_kv} of {n_kv} key/value heads stored per layer"
        " (layers with fewer heads on keep zeroed padding heads)",
    )


def _out_projections(model: nn.Module, capturable, prefix: str) -> list[str]:
    """Return the path of each layer's output projection: the module whose input the head gates scale."""
    by_name = {site.name: site for site in capturable.sites}
    paths = {id(module): path for path, module in model.named_modules()}
    outs = []
    for layer in range(capturable.n_layers):
        site = by_name.get(f"{prefix}blocks.{layer}.attn.hook_z")
        if site is None or site.module is None:
            raise UnsupportedModelError(f"layer {layer} has no hook_z to gate; its heads cannot be pruned.")
        if site.calls > 1:
            raise UnsupportedModelError(
                f"layer {layer}'s output projection also runs for {site.calls - 1} other layer(s) (one module shared"
                " by several layers, as ALBERT's), so its heads cannot be removed for one layer alone; gate them"
                " instead (head_gates)."
            )
        # a reference model's hook_z is a HookPoint: the output projection is its sibling `out_proj`
        outs.append(paths[id(site.module)] if site.pre else f"{paths[id(site.module)].rsplit('.', 1)[0]}.out_proj")
    return outs


def _in_width(module: nn.Module) -> int:
    return int(module.weight.shape[1 - out_axis(module)])


def _out_width(module: nn.Module) -> int:
    return int(module.weight.shape[out_axis(module)])


def _kv_heads(modules: dict[str, nn.Module], parts: LayerParts, n_heads: int, d_head: int) -> int:
    if parts.fused is not None:
        total = _out_width(modules[parts.fused])
        return (total - n_heads * d_head) // (2 * d_head)
    assert parts.key is not None
    return _out_width(modules[parts.key]) // d_head


def head_rows(heads: Sequence[int], d_head: int) -> Tensor:
    """Return the rows [len(heads) * d_head] of `heads` in a projection's output of heads of width d_head."""
    return torch.cat([torch.arange(h * d_head, (h + 1) * d_head) for h in heads])


def _sliced_state(
    model: nn.Module, modules: dict[str, nn.Module], parts: list[LayerParts], kept: list[list[int]],
    groups: list[list[int]], mask: Tensor, d_head: int, n_heads: int, n_kv: int,
) -> dict[str, Tensor]:
    """Return the state dict with every layer's projections sliced to its stored heads (zeroed padding)."""
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    for layer, layer_parts_ in enumerate(parts):
        q_rows, kv_rows = head_rows(kept[layer], d_head), head_rows(groups[layer], d_head)
        if layer_parts_.fused is not None:
            kv_base = n_heads * d_head
            index = torch.cat([q_rows, kv_base + kv_rows, kv_base + n_kv * d_head + kv_rows])
            _take(state, modules, layer_parts_.fused, index, output=True)
        else:
            for path, rows in ((layer_parts_.query, q_rows), (layer_parts_.key, kv_rows), (layer_parts_.value, kv_rows)):
                assert path is not None
                _take(state, modules, path, rows, output=True)
        off = [i for i, h in enumerate(kept[layer]) if mask[layer, h] == 0]
        _take(state, modules, layer_parts_.out, q_rows, output=False, zero=[(i * d_head, (i + 1) * d_head) for i in off])
    return state


def _take(
    state: dict[str, Tensor], modules: dict[str, nn.Module], path: str, index: Tensor, *, output: bool,
    zero: Sequence[tuple[int, int]] = (),
) -> None:
    module = modules[path]
    axis = out_axis(module) if output else 1 - out_axis(module)
    index = index.to(state[f"{path}.weight"].device)  # the weights may live on a GPU, the kept rows on the CPU
    weight = state[f"{path}.weight"].index_select(axis, index).clone()
    for start, end in zero:
        weight.narrow(axis, start, end - start).zero_()
    state[f"{path}.weight"] = weight.contiguous()
    bias_name = f"{path}.bias"
    if output and bias_name in state and state[bias_name] is not None:
        state[bias_name] = state[bias_name].index_select(0, index).contiguous()


def _build(model: nn.Module, width_q: int, width_kv: int, d_head: int) -> nn.Module:
    """Return a fresh model of `model`'s class from a config with the new head counts and head_dim."""
    from interpret.reference.models import ReferenceModel

    if isinstance(model, ReferenceModel):
        if model.kind == "encoder-decoder":
            raise UnsupportedModelError("an encoder-decoder's stacks share one head count")
        config = replace(model.config, n_heads=width_q, head_dim=d_head)
    else:
        config = copy.deepcopy(model.config)
        config.num_attention_heads = width_q
        if getattr(config, "num_key_value_heads", None) is not None:
            config.num_key_value_heads = width_kv
        config.head_dim = d_head
        config.attention_head_size = d_head  # DeBERTa-v2's name for it
    return built_like(type(model), config, model)


def built_like(cls: type[nn.Module], config: object, model: nn.Module) -> nn.Module:
    """Return `cls(config)`, built without drawing from the global RNG, where `model` lives (a GPU stays a GPU)
    and in its dtype."""
    with torch.random.fork_rng(devices=[]):
        built = cls(config)
    first = next(model.parameters())
    return built.to(device=first.device, dtype=first.dtype)


def _mismatch(built: nn.Module, state: dict[str, Tensor]) -> str:
    """Return '' when `built` has exactly the tensors of `state` with the same shapes, else the first difference."""
    target = built.state_dict()
    if set(target) != set(state):
        missing = sorted(set(state) ^ set(target))
        return f"building it gives different tensors ({missing[0]})"
    for name, tensor in state.items():
        if tuple(target[name].shape) != tuple(tensor.shape):
            return f"building it gives {name} of shape {tuple(target[name].shape)}, the sliced weight has {tuple(tensor.shape)}"
    return ""


def _swapped(
    model: nn.Module, state: dict[str, Tensor], parts: list[LayerParts], before: int, why: str, kept: list[list[int]],
) -> Pruned:
    """Return a copy of `model` whose projections are replaced by smaller ones holding the sliced weights."""
    copied = copy.deepcopy(model)
    inside = dict(copied.named_modules())
    for layer_parts_ in parts:
        for path in (layer_parts_.query, layer_parts_.key, layer_parts_.value, layer_parts_.fused, layer_parts_.out):
            if path is None:
                continue
            old = inside[path]
            weight = state[f"{path}.weight"]
            bias = state.get(f"{path}.bias")
            if isinstance(old, nn.Linear):
                new = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype)
            else:  # GPT-2's Conv1D: weight [in, out]
                new = type(old)(weight.shape[1], weight.shape[0]).to(device=weight.device, dtype=weight.dtype)
            with torch.no_grad():
                new.weight.copy_(weight)
                if bias is not None:
                    new.bias.copy_(bias)
            parent, _, name = path.rpartition(".")
            setattr(inside[parent] if parent else copied, name, new)
    copied = copied.eval()
    return Pruned(
        copied, True, max(map(len, kept)), max(map(len, kept)), tuple(tuple(k) for k in kept), before,
        count_parameters(copied),
        f"removed in memory only ({', '.join(str(len(k)) for k in kept)} heads per layer): the config cannot"
        f" describe it ({why}), so save_pretrained would write a model that does not load; layers of different"
        " widths are not captured by the collector",
    )


def _differs_from_gated(model: nn.Module, swapped: nn.Module, mask: Tensor, prefix: str) -> str:
    """Return '' when `swapped` gives the gated model's output on the model's dummy inputs (1e-4), else why not.

    A family whose attention reads its head count from the config fails here (a shape error or other numbers)."""
    from interpret.capture.gates import head_gates

    inputs = getattr(model, "dummy_inputs", None)
    if not inputs:
        return "no dummy inputs to check it on"
    device = model_device(model)
    inputs = {name: value.to(device) for name, value in inputs.items()}
    try:
        with torch.no_grad():
            with head_gates(model, mask.to(device), prefix=prefix):
                expected = model(**inputs)[0]
            got = swapped(**inputs)[0]
    except Exception as err:  # noqa: BLE001 - any failure of the swapped model means: do not use it
        return f"its forward pass fails ({type(err).__name__})"
    if expected.shape != got.shape or not torch.allclose(expected, got, rtol=0, atol=1e-4):
        return "its outputs differ from the gated model's"
    return ""


def _zeroed(model: nn.Module, mask: Tensor, out_paths: list[str], n_heads: int, before: int, why: str) -> Pruned:
    """Return a copy of `model` whose pruned heads have zeroed output-projection columns (shapes unchanged)."""
    copied = copy.deepcopy(model)
    modules = dict(copied.named_modules())
    with torch.no_grad():
        for layer, path in enumerate(out_paths):
            module = modules[path]
            d_head = _in_width(module) // n_heads
            axis = 1 - out_axis(module)
            for head in range(n_heads):
                if mask[layer, head] == 0:
                    module.weight.narrow(axis, head * d_head, d_head).zero_()
    kept = tuple(tuple(range(n_heads)) for _ in out_paths)
    return Pruned(
        copied.eval(), False, n_heads, n_heads, kept, before, count_parameters(copied),
        f"zeroed in place, not removed: {why}; the pruned heads' output-projection columns are 0 (outputs equal"
        " the gated model's, parameter count unchanged)",
    )
