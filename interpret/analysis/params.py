"""Analyzer parameters: frozen dataclasses, validated and coerced from mappings or `--set KEY=VALUE` strings."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union

from interpret.errors import AnalyzerError, suggest


@dataclass(frozen=True)
class ParamInfo:
    """One parameter as `analyzers show` lists it."""

    name: str
    type: str
    default: Any
    help: str
    choices: tuple[Any, ...] = ()


def describe(params_cls: type) -> list[ParamInfo]:
    """Return the parameters of a Params dataclass with their types, defaults, help and choices."""
    hints = typing.get_type_hints(params_cls)
    infos = []
    for f in dataclasses.fields(params_cls):
        hint = hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else None
        infos.append(
            ParamInfo(
                name=f.name,
                type=_type_name(hint),
                default=default,
                help=f.metadata.get("help", ""),
                choices=_choices(hint),
            )
        )
    return infos


def build(params_cls: type, values: Any, analyzer: str) -> Any:
    """Return a `params_cls` instance from None, an instance, or a mapping of (possibly string) values.

    Raises AnalyzerError for an unknown key (listing the valid ones) or a value of the wrong type or range.
    """
    if values is None:
        values = {}
    if isinstance(values, params_cls):
        return values
    if not isinstance(values, Mapping):
        raise AnalyzerError(
            f"params for {analyzer} must be a mapping or {params_cls.__name__}; got {type(values).__name__}."
        )
    hints = _hints(params_cls)
    names = [f.name for f in dataclasses.fields(params_cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in names:
            raise AnalyzerError(
                f"{analyzer} has no parameter {key!r};{suggest(key, names)} valid: {', '.join(names) or 'none'}."
            )
        try:
            kwargs[key] = coerce(value, hints[key])
        except (TypeError, ValueError) as err:
            raise AnalyzerError(f"{analyzer}.{key}={value!r}: {err}") from None
    try:
        return params_cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise AnalyzerError(f"{analyzer}: {err}") from None


@functools.lru_cache(maxsize=256)
def _hints(params_cls: type) -> dict[str, Any]:
    """Return the resolved field types of a parameters class (resolved once: evaluating the annotations
    compiles each one, about half a millisecond per analyzer call)."""
    return typing.get_type_hints(params_cls)


def as_dict(params: Any, strategy: str | None = None) -> dict[str, Any]:
    """Return the parameters as a plain dict (JSON-ready); with `strategy`, only those it reads (`for_strategy`)."""
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params) if for_strategy(f, strategy)}


def for_strategy(f: dataclasses.Field, strategy: str | None) -> bool:
    """Return whether Params field `f` is read by `strategy` ("full" or "streamed"; None: any): a field whose
    metadata names a strategy (`metadata["strategy"]`) is read by that one alone (docs/architecture.md,
    "Streaming is a strategy")."""
    return strategy is None or f.metadata.get("strategy", strategy) == strategy


def check_strategy(params_cls: type, values: Mapping[str, Any] | None, strategy: str, analyzer: str) -> None:
    """Raise AnalyzerError for a parameter given in `values` that `strategy` does not read: it would be ignored."""
    # A field of the full computation with metadata["streamed_as"] may be given that value when streamed: the
    # streamed computation is that setting (rollout's rows="readout").
    other = {f.name: f.metadata.get("streamed_as") if strategy == "streamed" else None
             for f in dataclasses.fields(params_cls) if not for_strategy(f, strategy)}
    given = [key for key, value in (values if isinstance(values, Mapping) else {}).items()
             if key in other and (other[key] is None or value != other[key])]
    if given:
        how = "streams (no pattern is captured)" if strategy == "streamed" else "captures every pattern (full)"
        raise AnalyzerError(
            f"{analyzer}.{given[0]} is read only when {analyzer} {'does not stream' if strategy == 'streamed' else 'streams'},"
            f" and this run {how}; drop {given[0]}, or choose the streaming (on/off) it needs."
        )


def coerce(value: Any, hint: Any) -> Any:
    """Return `value` converted to the type `hint` (strings from the command line are parsed)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        for choice in choices:
            if value == choice or (isinstance(value, str) and str(choice) == value):
                return choice
        raise ValueError(f"must be one of {', '.join(map(str, choices))}")
    if origin in (Union, types.UnionType):
        errors = []
        for option in typing.get_args(hint):
            try:
                return coerce(value, option)
            except (TypeError, ValueError) as err:
                errors.append(str(err))
        raise ValueError(" or ".join(errors))
    if hint is type(None):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
            return None
        raise ValueError("must be none")
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if isinstance(value, (int, float, str)) and not isinstance(value, bool) and not isinstance(value, str):
            value = [value]  # a single number stands for a one-element list
        parts = value.split(",") if isinstance(value, str) else list(value)
        return tuple(coerce(part.strip() if isinstance(part, str) else part, item) for part in parts if part != "")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ValueError("must be true or false")
    if hint is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("must be an integer")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError("must be an integer") from None
    if hint is float:
        if isinstance(value, bool):
            raise ValueError("must be a number")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError("must be a number") from None
    if hint is str:
        if not isinstance(value, str):
            raise ValueError("must be a string")
        return value
    return value


def _choices(hint: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return tuple(c for option in typing.get_args(hint) for c in _choices(option))
    return ()


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "|".join(map(str, typing.get_args(hint)))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(option) for option in typing.get_args(hint))
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(hint)[0])}"
    return "none" if hint is type(None) else getattr(hint, "__name__", str(hint))
