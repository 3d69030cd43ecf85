"""Watch one tiny forward pass of a model to learn its structure from what it does.

`observe(model, inputs)` runs the model once (inputs of a few positions, no gradients, random-number state
restored) with a hook on every module and with transformers' attention-function lookup wrapped, and returns
a `Probe`: every module call in order (which tensors went in, which came out, their shapes) and every call
of the attention kernel, with the module that made it (transformers 5 calls the kernel as
`kernel(module, query, key, value, attention_mask, ...)`, so the caller is its first argument) and the
shapes of query [batch, head, query, d_head], key and value [batch, kv_head, key, d_head]. The torch calls of
every module are followed too (`own_code`), so an attention a module computes in its own code is seen as the
kernel call it stands for, and a softmax not taken for attention is noted with why.

Tensors are told apart by identity (`id`), which holds on the `meta` device too: a norm whose output
object is the input object of a projection feeds that projection. The probe keeps every tensor it sees
alive until it returns, so no id is reused. Everything it adds (module hooks, the lookup wrapper, the torch
function mode, the meta-device nonzero switch) is removed when it returns, also when the forward pass raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf.kernels import Kernel, wrapped_kernels
from interpret.capture.hf.own_code import OwnAttention
from interpret.errors import UnsupportedModelError
from interpret.hooks import hook_session

Slot = tuple[str, int | str]  # ("arg", index) or ("kwarg", name): where a module received a tensor


PROJECTED = "projected"  # a KernelCall mark: the call applies the output projection itself (F.multi_head_attention_forward)


@dataclass(frozen=True)
class KernelCall:
    """One call of the attention kernel: the calling module's path, when, and the tensor shapes; `kwargs` names
    what the call does not pass as transformers' kernels do (or `PROJECTED`)."""

    path: str
    order: int
    query: tuple[int, ...]
    key: tuple[int, ...]
    value: tuple[int, ...]
    kwargs: frozenset[str] = frozenset()

    @property
    def n_heads(self) -> int:
        """Query heads."""
        return self.query[1]

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads (fewer than query heads under grouped-query attention)."""
        return self.key[1]

    @property
    def d_head(self) -> int:
        """Size of one query/key head."""
        return self.query[-1]

    @property
    def d_value(self) -> int:
        """Size of one value head (the size of each head where the heads are joined)."""
        return self.value[-1]

    @property
    def query_length(self) -> int:
        """Query positions of the call."""
        return self.query[2]

    @property
    def key_length(self) -> int:
        """Key positions of the call."""
        return self.key[2]


@dataclass
class ModuleCall:
    """One call of a module: its path, when it started and ended, and its tensors.

    inputs: ids of the tensors among its arguments (top level and inside tuples or lists).
    hidden: where its first floating tensor of 3 or more dimensions was passed ([batch, pos, ...]).
    """

    path: str
    start: int
    end: int = -1
    inputs: frozenset[int] = frozenset()
    hidden: Slot | None = None
    in_shape: tuple[int, ...] | None = None
    output: int | None = None
    out_shape: tuple[int, ...] | None = None


@dataclass
class Probe:
    """What one forward pass showed: module calls in start order, attention-kernel calls in order, the
    attentions modules computed in their own code (`own_code`: an SDPA call, or the eager statement), each as
    the KernelCall it stands for, with the module that computed it, and why a module's softmax was not taken
    for its attention (`missed`)."""

    calls: list[ModuleCall] = field(default_factory=list)
    kernels: list[KernelCall] = field(default_factory=list)
    modules: dict[str, nn.Module] = field(default_factory=dict)
    own: list[KernelCall] = field(default_factory=list)
    missed: dict[str, str] = field(default_factory=dict)  # module path -> why its softmax is not its attention

    def calls_of(self, path: str) -> list[ModuleCall]:
        """Return the calls of the module at `path`, in order."""
        return [call for call in self.calls if call.path == path]


def observe(model: nn.Module, inputs: Mapping[str, Any], packed: bool = False) -> Probe:
    """Return the Probe of one forward pass of `model` on `inputs` (no gradients, RNG state restored).

    packed: the model passes its hidden states as [pos, ...] with no batch axis (a vision tower that packs a
    batch's patches into one sequence); a floating tensor of 2 or more dimensions is then a hidden one, and its
    shape is recorded as that of a batch of one, [1, pos, ...].
    """
    probe = Probe(modules=dict(model.named_modules()))
    paths = {id(module): path for path, module in probe.modules.items()}
    alive: list[Any] = []
    clock = [0]
    open_calls: dict[int, list[ModuleCall]] = {}
    own = _OwnCalls(probe, lambda: tick())

    def tick() -> int:
        clock[0] += 1
        return clock[0]

    def before(path: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        call = ModuleCall(path=path, start=tick())
        tensors = list(_tensors(args)) + list(_tensors(kwargs.values()))
        alive.append(tensors)
        call.inputs = frozenset(id(tensor) for tensor in tensors)
        slot = hidden_slot(args, kwargs, packed)
        if slot is not None:
            call.hidden = slot
            call.in_shape = _batched(_at(slot, args, kwargs).shape, packed)
        probe.calls.append(call)
        open_calls.setdefault(id(module), []).append(call)
        own.enter(call, module)

    def after(module: nn.Module, output: Any) -> None:
        call = open_calls[id(module)].pop()
        own.leave(call)
        call.end = tick()
        first = _first_tensor(output)
        if first is not None:
            alive.append(first)
            call.output, call.out_shape = id(first), _batched(first.shape, packed)

    def on_kernel(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, kwargs: Mapping[str, Any]) -> None:
        path = paths.get(id(module))
        if path is not None:
            probe.kernels.append(
                KernelCall(path, tick(), tuple(query.shape), tuple(key.shape), tuple(value.shape), frozenset(kwargs))
            )

    replaced: list[str] = []
    with hook_session() as session, wrapped_kernels(_watching(on_kernel)), _meta_nonzero(), _rng_kept(model), \
            _modules_kept(probe.modules, replaced), torch.no_grad(), own:
        for path, module in probe.modules.items():
            session.add(module, _pre_hook(before, path), pre=True, with_kwargs=True)
            session.add(module, _post_hook(after))
        model(**inputs)
    if replaced:
        raise UnsupportedModelError(
            f"{type(model).__name__} replaced its own module{'s' if len(replaced) > 1 else ''} {replaced[0]!r}"
            f"{f' (and {len(replaced) - 1} more)' if len(replaced) > 1 else ''} during a short forward pass (BigBird"
            " swaps its block-sparse attention for full attention on inputs too short for blocks), so which attention"
            " runs depends on the input's length; load it with the attention it runs on every input (BigBird:"
            " attention_type='original_full', or model.set_attention_type('original_full')). The probe put the"
            " modules back."
        )
    return probe


@contextlib.contextmanager
def _modules_kept(modules: Mapping[str, nn.Module], replaced: list[str]) -> Iterator[None]:
    """Yield, then put back every submodule of `modules` (a model's `named_modules`) the forward pass replaced
    with another, appending its path to `replaced`, and then also every plain setting (str, number, bool, None)
    the pass changed on a module, so a model the probe refuses is left as it was found (BigBird sets
    `attention_type` on every level as it swaps its attention modules). Settings a model adjusts to its input
    without swapping modules are left as its own forward pass set them (Swin fits its window size to the
    image, and its adapter reads the fitted size)."""
    plain = (str, int, float, bool, type(None))
    before = [(f"{path}.{name}".lstrip("."), parent, name, child)
              for path, parent in modules.items() for name, child in parent.named_children()]
    settings = [(module, {key: value for key, value in vars(module).items()
                          if not key.startswith("_") and isinstance(value, plain)}) for module in modules.values()]
    try:
        yield
    finally:
        for path, parent, name, child in before:
            if parent._modules.get(name) is not child:
                replaced.append(path)
                parent._modules[name] = child
        for module, values in settings if replaced else ():
            for key, value in values.items():
                if vars(module).get(key, value) != value:
                    setattr(module, key, value)


class _OwnCalls(OwnAttention):
    """Records each attention a module computes in its own code as a KernelCall of that module (`own_code`);
    the module is the innermost one running that holds parameters (not a dropout, an `nn.Softmax`, or a
    parameterless wrapper such as I-BERT's `IntSoftmax`, which only applies the softmax of its caller's scores)."""

    def __init__(self, probe: Probe, tick: Any) -> None:
        super().__init__()
        self.probe, self.tick = probe, tick
        self.running: list[ModuleCall] = []

    def enter(self, call: ModuleCall, module: nn.Module) -> None:
        if any(True for _ in module.parameters()):
            self.running.append(call)
            if call.in_shape is not None:
                self.begin(call, call.in_shape[:2])

    def leave(self, call: ModuleCall) -> None:
        if self.running and self.running[-1] is call:
            self.running.pop()
            self.end(call)

    def owner(self) -> ModuleCall | None:
        return self.running[-1] if self.running else None

    def softmax(self, owner: Any, query: Tensor, key: Tensor, scores: Tensor) -> Any:
        return tuple(query.shape), tuple(key.shape)

    def values(self, owner: Any, pending: Any, value: Tensor, pattern: Tensor) -> None:
        self.probe.own.append(KernelCall(owner.path, self.tick(), *pending, tuple(value.shape), self._marks()))

    def _marks(self, *kwargs: str) -> frozenset[str]:
        """The call's marks: `PROJECTED` inside a torch function that applies the output projection itself."""
        return frozenset((*kwargs, PROJECTED) if self.opened else kwargs)

    def missed(self, owner: Any, why: str) -> None:
        self.probe.missed.setdefault(owner.path, why)

    def sdpa(self, owner: Any, func: Any, arguments: Mapping[str, Any]) -> Tensor:
        result = func(**arguments)
        shapes = (tuple(arguments[name].shape) for name in ("query", "key", "value"))
        self.probe.own.append(KernelCall(owner.path, self.tick(), *shapes, self._marks("scaling", "is_causal")))
        return result


def _pre_hook(before: Any, path: str) -> Any:
    return lambda module, args, kwargs: before(path, module, args, kwargs)


def _post_hook(after: Any) -> Any:
    return lambda module, args, output: after(module, output)


def _tensors(values: Any) -> Iterator[Tensor]:
    for value in values:
        if isinstance(value, Tensor):
            yield value
        elif isinstance(value, (tuple, list)):
            yield from (item for item in value if isinstance(item, Tensor))


def hidden_slot(args: tuple[Any, ...], kwargs: Mapping[str, Any], packed: bool = False) -> Slot | None:
    """Return where the first floating [batch, pos, ...] tensor ([pos, ...] when `packed`) was passed,
    positional arguments first."""
    least = 2 if packed else 3
    for index, value in enumerate(args):
        if isinstance(value, Tensor) and value.is_floating_point() and value.dim() >= least:
            return ("arg", index)
    for name, value in kwargs.items():
        if isinstance(value, Tensor) and value.is_floating_point() and value.dim() >= least:
            return ("kwarg", name)
    return None


def _batched(shape: torch.Size, packed: bool) -> tuple[int, ...]:
    """Return `shape` as a batch's: with `packed`, a [pos, ...] tensor is one example's, [1, pos, ...]."""
    return (1, *shape) if packed else tuple(shape)


def _at(slot: Slot, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Tensor:
    kind, where = slot
    return args[where] if kind == "arg" else kwargs[where]  # type: ignore[index]


def read_slot(slot: Slot, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Tensor:
    """Return the tensor a module received at `slot` (as recorded by the probe)."""
    kind, where = slot
    if kind == "arg" and isinstance(where, int) and where < len(args):
        return args[where]
    if kind == "kwarg" and where in kwargs:
        return kwargs[where]  # type: ignore[index]
    return args[0] if args else kwargs["hidden_states"]


def _first_tensor(output: Any) -> Tensor | None:
    if isinstance(output, Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], Tensor):
        return output[0]
    first = getattr(output, "last_hidden_state", None)
    return first if isinstance(first, Tensor) else None


def _watching(on_kernel: Any) -> Any:
    """Return a kernel wrapper that reports each call to `on_kernel` before calling the kernel unchanged."""

    def wrap(kernel: Kernel) -> Kernel:
        def watched(module, query, key, value, attention_mask, *args, **kwargs):  # noqa: ANN001, ANN202
            on_kernel(module, query, key, value, kwargs)
            return kernel(module, query, key, value, attention_mask, *args, **kwargs)

        return watched

    return wrap


@contextlib.contextmanager
def _meta_nonzero() -> Iterator[None]:
    """Yield while torch.nonzero on the meta device assumes every element is non-zero (Mixture-of-Experts
    routing calls it); the probe needs shapes, not values."""
    try:
        from torch.fx.experimental import _config as fx_config
    except ImportError:  # an older torch without the switch: routing simply fails on meta
        yield
        return
    before = getattr(fx_config, "meta_nonzero_assume_all_nonzero", None)
    if before is None:
        yield
        return
    fx_config.meta_nonzero_assume_all_nonzero = True
    try:
        yield
    finally:
        fx_config.meta_nonzero_assume_all_nonzero = before


@contextlib.contextmanager
def _rng_kept(model: nn.Module) -> Iterator[None]:
    """Yield with the random-number state of the CPU and the model's CUDA device restored afterwards, so a
    probe changes nothing a later seeded run would draw."""
    devices = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices):
        yield
