"""The analyzer contract's rules, stated once (docs/architecture.md, "The analyzer contract").

The registry applies them to an imported class (`validate`); `interpret analyzers list` applies them to the
literals it reads from a plugin's source without importing it (`problem`). Torch- and numpy-free.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

GROUP = "interpret.analyzers"
Provides = Literal["readout", "head_map"]
PROVIDES: tuple[str, ...] = get_args(Provides)
RUN_PARAMETERS = ("self", "trace", "params", "ctx")
# The class attributes the rules read, besides run; an optional one joins here and gets its rule in `problem`.
ATTRIBUTES = ("name", "summary", "version", "requires", "provides", "needs_model", "Params", "streamed_requires")
# A value the source names (`requires = STREAM`, `Params = SomeParams`) but only importing can evaluate: the
# rules let it pass, except for name, summary and version, which `interpret analyzers list` shows.
DEFERRED = object()


def validate(cls: Any, name: str) -> str | None:
    """Return why the imported `cls` does not meet the contract under entry-point `name`, or None if it does."""
    if not inspect.isclass(cls):
        return f"entry point must name a class, got {type(cls).__name__}"
    attributes = {attr: getattr(cls, attr) for attr in ATTRIBUTES if hasattr(cls, attr)}
    return problem({**attributes, "run": _run_signature(getattr(cls, "run", None))}, name)


def _run_signature(run: Any) -> tuple[str, ...] | None:
    """Return `signature` of an imported run method; None when there is none (or a builtin without a signature)."""
    try:
        params = inspect.signature(run).parameters.values()
    except (TypeError, ValueError):  # not callable, or no signature to read
        return None
    kind = inspect.Parameter
    named = [[p.name for p in params if p.kind in kinds] for kinds in (
        (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD), (kind.VAR_POSITIONAL,), (kind.KEYWORD_ONLY,), (kind.VAR_KEYWORD,))]
    return signature(named[0], next(iter(named[1]), None), named[2], next(iter(named[3]), None))


def signature(positional: Sequence[str], var: str | None, keyword_only: Sequence[str], var_keyword: str | None) -> tuple[str, ...]:
    """Return run's parameters as `problem` compares them, built alike from an imported function and from its source:
    the positional names, then `*var` (or a bare `*` before keyword-only names), keyword-only names, `**var_keyword`.
    """
    star = (f"*{var}",) if var else ("*",) if keyword_only else ()
    return (*positional, *star, *keyword_only, *((f"**{var_keyword}",) if var_keyword else ()))


def problem(attributes: Mapping[str, Any], name: str) -> str | None:
    """Return why a class with these attribute values breaks the contract under entry-point `name`, or None.

    attributes: the values of ATTRIBUTES by name (absent: missing), and "run": run's parameters as `signature`
    gives them (None: no run method). The registry and `interpret analyzers list` word a broken plugin alike.
    """
    value = attributes.get
    deferred = {attr for attr, given in attributes.items() if given is DEFERRED}
    for attr in ("name", "summary", "version"):
        if not isinstance(value(attr), str) or not value(attr):
            return f"class attribute {attr} missing or not a non-empty str"
    if value("name") != name:
        return f"class name attribute {value('name')!r} differs from the entry-point name {name!r}"
    if "\n" in value("summary"):
        return "summary must be one line"
    for attr in ("requires", "provides"):
        if attr not in deferred and not _strings(value(attr)):
            return f"class attribute {attr} missing or not a sequence of strings"
    # Optional: a streamed strategy's hook globs (`Analyzer.streamed_requires`), absent or as requires.
    if "streamed_requires" in attributes and "streamed_requires" not in deferred and not _strings(value("streamed_requires")):
        return "class attribute streamed_requires, when given, must be a sequence of strings"
    unknown = [item for item in value("provides") if item not in PROVIDES] if "provides" not in deferred else []
    if unknown:
        return f"provides names {unknown[0]!r}; an analyzer provides any of {', '.join(PROVIDES)}"
    if "needs_model" not in deferred and not isinstance(value("needs_model"), bool):
        return "class attribute needs_model missing or not a bool"
    params = value("Params")
    if "Params" not in deferred:
        if not isinstance(params, type) or not dataclasses.is_dataclass(params) or not params.__dataclass_params__.frozen:
            return "Params must be a frozen dataclass"
        try:
            params()
        except (TypeError, ValueError) as err:
            return f"Params must be constructible with defaults ({err})"
    run = value("run")
    if not isinstance(run, (tuple, list)):
        return "run(self, trace, params, ctx) is missing"
    if tuple(run) != RUN_PARAMETERS:
        return f"run must take (self, trace, params, ctx), not ({', '.join(run)})"
    return None


def _strings(value: Any) -> bool:
    """Whether `value` is a sequence of strings (not itself a string)."""
    return not isinstance(value, (str, bytes)) and isinstance(value, Sequence) and all(isinstance(v, str) for v in value)
