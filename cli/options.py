"""Click options shared by several commands, declared once, and the parsers of their values.

Every parser raises a usage error (exit 2) that names the option and the bad value and says what to write.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from interpret.cli.output import VERBOSE_KEY, usage_error
from interpret.errors import InterpretError
from interpret.estimate.memory import CAPTURE_BUDGET
from interpret.request import EvidenceOptions, Limits

F = Callable[..., Any]
T = TypeVar("T")

_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?i?b?)\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
_SURROGATE = re.compile("[\ud800-\udfff]")
PROGRESS_KEY = "interpret.progress"  # ctx.meta: --progress (True), --no-progress (False), neither (None)


def model_options(fn: F) -> F:
    """Add --model, --device, --dtype, --max-length, --allow-pickle and --allow-missing-weights."""
    fn = click.option("--allow-missing-weights", is_flag=True,
                      help="Run a checkpoint that lacks weights of its class with them initialised at random (seed 0;"
                           " the report's header names them) instead of refusing it.")(fn)
    fn = click.option("--allow-pickle", is_flag=True,
                      help="Accept a checkpoint saved only as pickle (.bin): pickle can run code, so only for files you trust.")(fn)
    fn = click.option("--max-length", type=click.IntRange(min=1), default=None, metavar="TOKENS",
                      help="Truncate inputs to this many tokens (default: refuse longer inputs).")(fn)
    fn = click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "auto"]), default=None,
                      help="Weights' dtype (default float32).")(fn)
    fn = click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                      help="Where the model runs.")(fn)
    fn = click.option("--model", default=None, metavar="PATH_OR_NAME",
                      help="A model directory saved with save_pretrained, or a hub name in the local Hugging Face"
                           " cache (default: the built-in MiniLM sentiment model).")(fn)
    return fn


def analyzer_options(fn: F) -> F:
    """Add -a/--analyzer (repeatable) and --set NAME.KEY=VALUE (repeatable)."""
    fn = click.option("--set", "sets", multiple=True, metavar="NAME.KEY=VALUE",
                      help="An analyzer parameter, e.g. rollout.head_fusion=max (repeatable; see"
                           " `interpret analyzers show NAME`).")(fn)
    fn = click.option("-a", "--analyzer", "analyzer_names", multiple=True, metavar="NAME",
                      help="Analyzer to run (repeatable; default: the toolkit's default set; see"
                           " `interpret analyzers list`).")(fn)
    return fn


def request_parts(
    max_length: int | None, streaming: str, evidence: bool, removal: str | None
) -> tuple[Limits, EvidenceOptions]:
    """Return the request's limits and evidence options from --max-length, --streaming, --evidence and --removal
    (report and audit); a usage error (exit 2) for what a part refuses."""
    return built(Limits, max_length, CAPTURE_BUDGET, streaming), built(EvidenceOptions, evidence, removal)


def built(part: Callable[..., T], *args: Any, **fields: Any) -> T:
    """Return the request part `part(*args, **fields)` (`interpret.request`), checked as the library checks it;
    a usage error (exit 2, the part's one line) when it refuses them."""
    try:
        return part(*args, **fields)
    except InterpretError as err:
        raise usage_error(str(err)) from None


def streaming_names(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Return (`names` with each old streaming analyzer's name replaced by its twin's, the twins so named: they
    run streamed), logging a warning line for each old name (it goes in the next release)."""
    from interpret.cli.common import log
    from interpret.cli.preflight import default_analyzers

    old = default_analyzers("DEPRECATED_STREAMING")
    for name in dict.fromkeys(name for name in names if name in old):
        log.warning(f"-a {name} is now -a {old[name]} streamed; the old name goes in the next release")
    return [old.get(name, name) for name in names], [old[name] for name in names if name in old]


def checked_streamed(names: Sequence[str], why: str, *, leave_out: bool) -> list[str]:
    """Return the analyzers a streamed run (`why` says why it streams) runs streamed, or refuse (usage error, one
    line) one that needs every pattern and has no streamed computation, unless `leave_out` (the default set:
    `explain` and the audit leave it out with a note)."""
    from interpret.errors import AnalyzerError
    from interpret.analysis.strategy import streamed_strategies

    try:
        chosen, _ = streamed_strategies(names, why, leave_out=leave_out)
    except AnalyzerError as err:
        raise usage_error(f"-a {err}") from None
    return [name for name, strategy in chosen.items() if strategy == "streamed"]


def _record_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    ctx.meta[VERBOSE_KEY] = bool(value)
    return value


def verbosity_options(fn: F) -> F:
    """Add -q/--quiet and -v/--verbose."""
    fn = click.option("-v", "--verbose", is_flag=True, is_eager=True, callback=_record_verbose,
                      help="More log lines; tracebacks on errors.")(fn)
    fn = click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr; no progress bars.")(fn)
    return fn


def progress_option(fn: F) -> F:
    """Add --progress/--no-progress, kept in the context (`interpret.cli.common.stages` reads it), not passed on."""
    return click.option("--progress/--no-progress", default=None, expose_value=False,
                        callback=lambda ctx, _param, value: ctx.meta.__setitem__(PROGRESS_KEY, value),
                        help="Draw progress bars on stderr even when it is not a terminal (a log file, CI), or never"
                             " (default: on a terminal only; -q: never).")(fn)


def parse_indices(value: str | None, option: str, what: str) -> list[int] | None:
    """Return the indices of `--layers 0,2,-1` (None when the option was not given).

    Refuses an empty list, an empty item ("0,,1", ","), anything not an integer, and a repeated index.
    """
    if value is None:
        return None
    parts = value.split(",")
    if not value.strip() or any(not part.strip() for part in parts):
        raise usage_error(f"{option} {value!r} has an empty item; give comma-separated {what} indices, e.g. {option} 0,2,-1.")
    indices = []
    for part in parts:
        text = part.strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            raise usage_error(f"{option} {value!r}: {text!r} is not a {what} index; give integers, e.g. {option} 0,2,-1.")
        index = int(text)
        if index in indices:
            raise usage_error(f"{option} {value!r} names {what} {index} twice; give each {what} once.")
        indices.append(index)
    return indices


def check_index_range(indices: Sequence[int] | None, count: int, option: str, what: str) -> list[int] | None:
    """Return the indices as given, or raise a usage error for one outside -count..count-1 (`count` from the config)
    or named twice. A negative index counts back from the loaded model's last layer, not the config's: a model may
    capture fewer layers than its config holds (Llama 3.2 Vision skips its cross-attention blocks on text)."""
    if indices is None or count <= 0:
        return None if indices is None else list(indices)
    resolved = []
    for index in indices:
        if not -count <= index < count:
            raise usage_error(
                f"{option}: {what} {index} does not exist; this model has {count} {what}s (0..{count - 1},"
                f" or -{count}..-1 from the end)."
            )
        resolved.append(index % count)
    if len(set(resolved)) != len(resolved):
        raise usage_error(f"{option} names the same {what} twice (a negative index counts from the end); give each once.")
    return list(indices)


def parse_size(value: str | None, option: str) -> int | None:
    """Return a byte count from `20000000`, `20MB`, `1.5GB`, `512MiB`, `300kB` (None when not given)."""
    if value is None:
        return None
    match = _SIZE.fullmatch(value)
    unit = match.group(2).lower().rstrip("b") if match else ""
    if match is None or unit not in _UNITS:
        raise usage_error(f"{option} {value!r} is not a size; give bytes with an optional unit, e.g. {option} 50MB or 2GiB.")
    size = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(size) or size < 1:
        raise usage_error(f"{option} {value!r} is less than one byte; give a positive size, e.g. {option} 50MB.")
    return int(size)


def check_texts(values: Sequence[str], option: str) -> list[str]:
    """Return the texts, or raise a usage error for an empty one or one holding bytes that are not UTF-8."""
    for i, text in enumerate(values):
        if not text.strip():
            raise usage_error(f"{option} is empty{which(i, len(values))}; give at least one word.")
        found = _SURROGATE.search(text)
        if found:
            raise usage_error(
                f"{option}{which(i, len(values))} holds a byte that is not UTF-8 (\\u{ord(found.group()):04x} at character"
                f" {found.start()}); pass the text as UTF-8."
            )
    return list(values)


def which(index: int, count: int) -> str:
    """Return " (the 2nd one)" naming value `index` of the `count` an option was given, "" when given once."""
    n = index + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f" (the {n}{suffix} one)" if count > 1 else ""
