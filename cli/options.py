"""Click options shared by several commands, declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]


def model_options(fn: F) -> F:
    """Add --model, --device, --dtype and --max-length."""
    fn = click.option("--max-length", type=click.IntRange(min=1), default=None,
                      help="Truncate inputs to this many tokens (default: refuse longer inputs).")(fn)
    fn = click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "auto"]), default=None,
                      help="Weights' dtype (default float32).")(fn)
    fn = click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                      help="Where the model runs.")(fn)
    fn = click.option("--model", default=None, metavar="PATH_OR_NAME",
                      help="A Hugging Face model directory or name (default: the built-in MiniLM sentiment model).")(fn)
    return fn


def analyzer_options(fn: F) -> F:
    """Add -a/--analyzer (repeatable) and --set NAME.KEY=VALUE (repeatable)."""
    fn = click.option("--set", "sets", multiple=True, metavar="NAME.KEY=VALUE",
                      help="An analyzer parameter, e.g. rollout.head_fusion=max (repeatable).")(fn)
    fn = click.option("-a", "--analyzer", "analyzer_names", multiple=True, metavar="NAME",
                      help="Analyzer to run (repeatable; default: rollout and flow).")(fn)
    return fn


def verbosity_options(fn: F) -> F:
    """Add -q/--quiet and -v/--verbose."""
    fn = click.option("-v", "--verbose", is_flag=True, help="More log lines; tracebacks on errors.")(fn)
    fn = click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr; no progress bars.")(fn)
    return fn
