"""Attention computed in a module's own code (MPNet, Falcon, BLOOM, FSMT, ...), found from the torch calls it makes.

transformers' attention interface hands a kernel query, key and value (`attention`); a module that computes its
attention itself never calls it. While such a module runs, an `OwnAttention` (a TorchFunctionMode: scoped to
the thread, and it sees every spelling of a call: `torch.matmul` and `@`, `F.softmax`, `Tensor.softmax`,
`nn.Softmax`) finds the attention in what the module calls, in one of two forms:

- a `scaled_dot_product_attention` call: query, key, value, mask, scale and causality as the call received them;
- the eager statement: a product (`matmul`, `@`, `bmm`, `baddbmm`) from which the input of a softmax over the
  last axis derives (scaling, position bias, alibi and mask added on the way), that softmax, then a product of
  the softmax's output, its values unchanged on the way (views, casts, eval-mode dropout; a `masked_fill` with
  0, which zeroes masked keys the softmax already gave 0), with the values. Query and key are the first
  product's operands (key transposed back), value the second product's other operand, the scores the
  softmax's input and the pattern the probabilities that multiply the values: what the module computed, bias
  and all. Tensors of [batch · head, ...] (BLOOM's `baddbmm`, BART-style `bmm`) are viewed as [batch, head,
  ...], the batch and query positions read from the module's input, which they must match.

Probabilities changed otherwise after the softmax (re-normalised, written in place) do not match, nor does a
softmax over another axis or over windows of the input, and nothing is reported (only why, to `missed`, which
`interpret models` shows): the capture of such a module fails by name rather than record a pattern the module
did not apply. Intermediate tensors are told apart by identity and held weakly
(nothing [query, key]-sized is kept alive beyond what the module itself keeps).
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor
from torch.overrides import TorchFunctionMode

SDPA = "scaled_dot_product_attention"
SDPA_ARGUMENTS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_PRODUCTS = {"matmul", "__matmul__", "bmm", "baddbmm"}
_SOFTMAX = {"softmax", "_softmax"}
# Calls that pass a tensor's values on unchanged (a view, a copy, a cast): the softmax's output may go through
# these on its way to the values' product (eval-mode dropout returns the very tensor it is given).
_SAME_VALUES = {"view", "reshape", "contiguous", "to", "type_as", "float", "flatten", "unflatten", "view_as",
                "reshape_as", "clone"}
_ZEROING = {"masked_fill", "masked_fill_"}
# torch functions written in Python that compute attention themselves (nn.MultiheadAttention's, which WavLM calls
# with its gated position bias as the mask): a mode sees only the outer call, so its body is run, with the mode
# on, from a copy whose torch-function check is off (`_opened`), and the eager statement or SDPA call inside it
# is found as in any module's code.
_OPENED = {"multi_head_attention_forward"}
_SOFTMAX_OUTPUT = -1  # the source of what derives from a softmax's output (others: their product's index)
_OPERATORS = {"add", "sub", "mul", "truediv", "floordiv", "div", "mod", "pow", "and", "or", "xor", "lshift", "rshift"}


@dataclass
class _Call:
    """What one module call has computed so far: its input's (batch, positions), the products, which tensors
    derive from them, and after a softmax what holds its probabilities."""

    rows: tuple[int, int]
    products: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    derived: dict[int, tuple[weakref.ref[Tensor], int]] = field(default_factory=dict)  # id -> (ref, product index)
    same: dict[int, weakref.ref[Tensor]] = field(default_factory=dict)  # tensors holding the softmax's probabilities
    pending: Any = None  # what `softmax` returned, until the values' product
    heads: int = 0


class OwnAttention(TorchFunctionMode):
    """Finds the attention each watched module call computes (module docstring); subclasses say which module
    call is running (`owner`) and what to do with what is found (`softmax`, `values`, `sdpa`)."""

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[int, _Call] = {}
        self.opened = 0  # > 0 inside an `_OPENED` function, which applies the output projection itself

    def owner(self) -> Any | None:
        """Return the watched module call now running (as passed to `begin`), or None."""
        raise NotImplementedError

    def softmax(self, owner: Any, query: Tensor, key: Tensor, scores: Tensor) -> Any:
        """Take the eager statement up to its softmax: query [batch, head, query, d_head], key [batch, kv_head, key,
        d_head], scores [batch, head, query, key]; return what `values` will need."""
        raise NotImplementedError

    def values(self, owner: Any, pending: Any, value: Tensor, pattern: Tensor) -> None:
        """Complete the eager statement: value [batch, kv_head, key, d_value] and the probabilities that multiply
        it, pattern [batch, head, query, key]."""
        raise NotImplementedError

    def sdpa(self, owner: Any, func: Callable[..., Tensor], arguments: Mapping[str, Any]) -> Tensor:
        """Return `func(**arguments)`, the SDPA call the module made (its arguments named as `SDPA_ARGUMENTS`)."""
        return func(**arguments)

    def missed(self, owner: Any, why: str) -> None:
        """Note why a softmax of the module call is not taken for its attention (for the probe's reasons)."""

    def begin(self, owner: Any, rows: tuple[int, int]) -> None:
        """Start watching a module call whose input is [batch, positions, ...] (rows = (batch, positions))."""
        self._calls[id(owner)] = _Call(rows)

    def end(self, owner: Any) -> None:
        """Stop watching a module call; a softmax whose values' product never came is dropped."""
        self._calls.pop(id(owner), None)

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        owner = self.owner()
        state = None if owner is None else self._calls.get(id(owner))
        if state is None:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name == SDPA:
            return self.sdpa(owner, func, {**dict(zip(SDPA_ARGUMENTS, args)), **kwargs})
        if name in _OPENED and getattr(func, "__module__", "") == "torch.nn.functional":
            self.opened += 1
            try:
                with self:  # its body's calls are followed as the module's own (the mode is off in this handler)
                    return _opened(func)(*args, **kwargs)
            finally:
                self.opened -= 1
        if name in _PRODUCTS:
            return self._product(owner, state, func, name, args, kwargs)
        result = func(*args, **kwargs)
        if name in _SOFTMAX and isinstance(result, Tensor):
            self._softmax(owner, state, args, kwargs, result)
        else:
            self._follow(owner, state, name, args, kwargs, result)
        return result

    def _product(self, owner: Any, state: _Call, func: Any, name: str, args: tuple[Any, ...],
                 kwargs: Mapping[str, Any]) -> Any:
        a, b = _operands(name, args, kwargs)
        if a is not None and b is not None and state.pending is not None and _held(state.same, a):
            pending, state.pending = state.pending, None
            state.same.clear()
            batch = state.rows[0]
            value, pattern = _heads(b, batch), _heads(a, batch)
            if value is None or pattern is None or pattern.shape[1] != state.heads:
                return func(*args, **kwargs)
            # The product reads the pattern through this very view, so that it is in the autograd graph.
            args, kwargs = _first_operand(name, args, kwargs, pattern.view(a.shape))
            result = func(*args, **kwargs)
            self.values(owner, pending, value, pattern)
            return result
        result = func(*args, **kwargs)
        if a is None or b is None or not isinstance(result, Tensor):
            return result
        if state.pending is not None and _source(state.derived, a) == _SOFTMAX_OUTPUT:
            self.missed(owner, "its probabilities are changed after the softmax before they weight the values")
        state.products.append((a, b))
        state.derived[id(result)] = (weakref.ref(result), len(state.products) - 1)
        return result

    def _softmax(self, owner: Any, state: _Call, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 result: Tensor) -> None:
        scores = args[0] if args else kwargs.get("input", kwargs.get("self"))
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if not isinstance(scores, Tensor):
            return
        source = _source(state.derived, scores)
        batch, positions = state.rows
        square = _heads(scores, batch) if scores.dim() in (3, 4) else None
        why = None
        if source is None or source == _SOFTMAX_OUTPUT:
            why = "its softmax does not normalise scores from a product (matmul, bmm, baddbmm) of queries and keys"
        elif scores.dim() not in (3, 4) or dim not in (-1, scores.dim() - 1):
            why = "its softmax normalises over another axis than the keys, or over windows or groups"
        elif square is None:
            why = "its scores are not [batch · head, query, key] or [batch, head, query, key] of its input's batch"
        elif square.shape[2] != positions:
            why = "its queries are not the positions of its input (windows, pooling or a grid)"
        if why is not None:
            self.missed(owner, why)
            return
        a, b = state.products[source]
        query, key = _heads(a, batch), _heads(b, batch)
        if query is None or key is None or query.shape[:3] != square.shape[:3] or key.shape[-1] != square.shape[-1]:
            self.missed(owner, "its queries and keys are not laid out as [batch, head, position, d_head]")
            return
        state.pending = self.softmax(owner, query, key.transpose(-1, -2), square)
        state.same, state.heads = {id(result): weakref.ref(result)}, square.shape[1]
        state.derived[id(result)] = (weakref.ref(result), _SOFTMAX_OUTPUT)

    def _follow(self, owner: Any, state: _Call, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                result: Any) -> None:
        """Mark what derives from a product, and what still holds the softmax's probabilities."""
        tensors = list(_tensors(args, kwargs))
        if state.pending is not None and tensors and _held(state.same, tensors[0]):
            zeroing = name in _ZEROING and _fill(args, kwargs) == 0
            if zeroing or (not _in_place(name) and (name in _SAME_VALUES or result is tensors[0])):
                for out in _outputs(result):
                    state.same[id(out)] = weakref.ref(out)
            elif _in_place(name):  # written in place: what the values meet is no longer the softmax's
                state.pending = None
                state.same.clear()
                self.missed(owner, "its probabilities are changed in place after the softmax")
        source = next((found for found in (_source(state.derived, t) for t in tensors) if found is not None), None)
        if source is not None:
            for out in _outputs(result):
                if _source(state.derived, out) is None:  # (an id may be left by a tensor since freed)
                    state.derived[id(out)] = (weakref.ref(out), source)


@functools.cache
def _opened(func: Any) -> Callable[..., Any]:
    """Return a copy of the Python function `func` whose `has_torch_function` check is off, so that under a mode
    it runs its own body (whose torch calls the mode then sees) instead of handing the whole call to the mode."""
    namespace = {**func.__globals__, "has_torch_function": lambda *_: False}
    copy = types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    return copy


def _in_place(name: str) -> bool:
    """Whether a call of this name writes into its first tensor (`mul_`, `+=`, `x[...] = ...`)."""
    if name.startswith("__"):
        return name == "__setitem__" or name.removeprefix("__i").removesuffix("__") in _OPERATORS
    return name.endswith("_")


def _fill(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    value = args[2] if len(args) > 2 else kwargs.get("value")
    if isinstance(value, Tensor):  # (a meta tensor has no value to read: unknown)
        return value.item() if value.numel() == 1 and not value.is_meta else None
    return value


def _operands(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Tensor | None, Tensor | None]:
    """Return the two multiplied operands of a product call (`baddbmm`'s batch1 and batch2, not its bias)."""
    if name == "baddbmm":
        a = args[1] if len(args) > 1 else kwargs.get("batch1")
        b = args[2] if len(args) > 2 else kwargs.get("batch2")
    else:
        a = args[0] if args else kwargs.get("input")
        b = args[1] if len(args) > 1 else kwargs.get("other", kwargs.get("mat2"))
    ok = isinstance(a, Tensor) and isinstance(b, Tensor) and a.dim() >= 3 and b.dim() >= 3
    return (a, b) if ok else (None, None)


def _first_operand(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], operand: Tensor) -> tuple[
        tuple[Any, ...], dict[str, Any]]:
    """Return a product call's arguments with its first multiplied operand replaced by `operand`."""
    index, key = (1, "batch1") if name == "baddbmm" else (0, "input")
    if len(args) > index:
        return (*args[:index], operand, *args[index + 1:]), dict(kwargs)
    return args, {**kwargs, key: operand}


def _heads(tensor: Tensor, batch: int) -> Tensor | None:
    """Return a tensor as [batch, head, rows, cols] (one of [batch · head, rows, cols] viewed so), or None."""
    if tensor.dim() == 4:
        return tensor if tensor.shape[0] == batch else None
    if tensor.dim() != 3 or tensor.shape[0] % batch:
        return None
    return tensor.view(batch, tensor.shape[0] // batch, *tensor.shape[1:])


def _source(derived: dict[int, tuple[weakref.ref[Tensor], int]], tensor: Tensor) -> int | None:
    found = derived.get(id(tensor))
    return found[1] if found is not None and found[0]() is tensor else None


def _held(same: dict[int, weakref.ref[Tensor]], tensor: Any) -> bool:
    ref = same.get(id(tensor))
    return ref is not None and ref() is tensor


def _tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Iterator[Tensor]:
    for value in (*args, *kwargs.values()):
        if isinstance(value, Tensor):
            yield value
        elif isinstance(value, (tuple, list)):
            yield from (item for item in value if isinstance(item, Tensor))


def _outputs(result: Any) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [item for item in result if isinstance(item, Tensor)]
    return []
