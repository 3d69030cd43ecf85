"""Shared pieces of the CLI: option parsers, model loading, output naming, error reporting."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from interpret.analyze import describe, registry
from interpret.atomic import write_atomically
from interpret.errors import AnalyzerError, suggest

log = logging.getLogger("interpret")


@dataclass
class Loaded:
    """A model ready for the CLI: the module, its tokenizer, an optional decision head and its id."""

    model: Any
    tokenizer: Any
    head: Any
    model_id: str


def setup_logging(quiet: bool, verbose: bool) -> None:
    """Send the toolkit's log to stderr: INFO by default, WARNING with -q, DEBUG with -v."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # our own bar covers loading; two bars on stderr interleave badly


def load_model(name: str | None, device: str, dtype: str | None) -> Loaded:
    """Return the model named on the command line, or the built-in default model when `name` is None."""
    if name is None:
        from interpret.default_model import DEFAULT_MODEL_ID, load_default

        model, tokenizer, head = load_default(device)
        return Loaded(model, tokenizer, head, DEFAULT_MODEL_ID)
    from interpret.loading import load

    model, tokenizer = load(name, device=device, dtype=dtype)
    return Loaded(model, tokenizer, None, name)


def check_analyzers(names: Sequence[str]) -> list[str]:
    """Return the analyzer names, or raise a usage error with a close match for an unknown one."""
    known = registry.names()
    for name in names:
        if name not in known:
            entry = registry.entries().get(name)
            why = f"is broken ({entry.error})" if entry is not None else f"is unknown;{suggest(name, known)} registered: {', '.join(known)}"
            raise click.UsageError(f"analyzer {name!r} {why}.")
    return list(dict.fromkeys(names))


def parse_sets(values: Sequence[str], analyzers: Sequence[str]) -> dict[str, dict[str, str]]:
    """Return {analyzer: {key: value}} from `NAME.KEY=VALUE` strings, checked against each Params."""
    params: dict[str, dict[str, str]] = {}
    for item in values:
        match = re.fullmatch(r"([A-Za-z_][\w-]*)\.([A-Za-z_]\w*)=(.*)", item)
        if not match:
            raise click.UsageError(f"--set {item!r} is not NAME.KEY=VALUE (e.g. --set rollout.head_fusion=max).")
        name, key, value = match.groups()
        if name not in analyzers:
            raise click.UsageError(
                f"--set {item!r} names analyzer {name!r}, which is not run;{suggest(name, analyzers)} add -a {name}."
            )
        valid = [info.name for info in describe(registry.get(name).Params)]
        if key not in valid:
            raise click.UsageError(f"{name} has no parameter {key!r};{suggest(key, valid)} valid: {', '.join(valid)}.")
        params.setdefault(name, {})[key] = value
    for name, values_for in params.items():
        try:
            from interpret.analyze.params import build

            build(registry.get(name).Params, values_for, name)
        except AnalyzerError as err:
            raise click.UsageError(str(err)) from None
    return params


def parse_layers(value: str | None) -> list[int] | None:
    """Return the layer indices of `--layers 0,2,-1` (None when not given)."""
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of layer indices (e.g. 0,2,-1).") from None


def parse_target(value: str | None) -> int | str | None:
    """Return the target as an index when it is a number, else the label or token string."""
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


def slug(text: str, limit: int = 48) -> str:
    """Return a file-name-safe slug of the first words of `text` (e.g. 'the-movie-was-great')."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    joined = "-".join(words)[:limit].strip("-")
    return joined or "report"


def default_output(stem: str, suffix: str) -> Path:
    """Return reports/<stem><suffix> under the current directory."""
    return Path("reports") / f"{stem}{suffix}"


def write_text(output: str, text: str) -> None:
    """Write `text` to stdout for '-', else atomically to the file `output`."""
    if output == "-":
        click.echo(text.rstrip("\n"))
        return
    write_atomically(Path(output), text)


def json_text(data: Any) -> str:
    """Return `data` as indented JSON (NaN refused, so stdout always parses)."""
    return json.dumps(data, indent=2, allow_nan=False, default=str)
