"""Shared pieces of the CLI that run once checks have passed: logging, progress, model loading, writing output."""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from interpret.cli.options import PROGRESS_KEY
from interpret.cli.output import safe
from interpret.runtime.progress import Advance, Stage

log = logging.getLogger("interpret")
_WARNINGS = logging.getLogger("py.warnings")


@dataclass
class Loaded:
    """A model ready for the CLI: the module, its tokenizer, an optional decision head and its id."""

    model: Any
    tokenizer: Any
    head: Any
    model_id: str


class _SafeFormatter(logging.Formatter):
    """Log lines as one line each, with what a terminal would act on escaped (label names come from configs)."""

    def format(self, record: logging.LogRecord) -> str:
        return safe(" ".join(super().format(record).split()))


class _LargestCapture(logging.Filter):
    """Pass the collector's "capture will hold ..." line (a record with `capture_bytes`) only when it names a
    larger capture than every one passed before: a run collects once per batch, chunk or evidence pass, and the
    same line 5-9 times told nothing new. Dropping only captures no larger than one already shown keeps the last
    line shown the run's largest capture (a run whose batches grow shows each new peak); a capture holding
    nothing (0 B: a forward pass for the decision alone) is never shown."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def filter(self, record: logging.LogRecord) -> bool:
        size = getattr(record, "capture_bytes", None)
        if size is None:
            return True
        if size <= self.largest:
            return False
        self.largest = size
        return True


def setup_logging(quiet: bool, verbose: bool) -> None:
    """Send the toolkit's log and Python warnings to stderr: INFO by default, WARNING with -q, DEBUG with -v.

    The capture line appears once per new peak of the run (`_LargestCapture`), every time with -v."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_SafeFormatter("%(message)s"))
    if not verbose:
        handler.addFilter(_LargestCapture())
    for logger in (log, _WARNINGS):
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
    logging.captureWarnings(True)


@contextmanager
def stages(quiet: bool) -> Iterator[Stage]:
    """Yield the library's progress hook (`interpret.runtime.progress.Stage`): each stage draws a bar of its own on
    stderr (total 0: a count without a total) and closes the one before, so one line shows where a long run is.
    Log lines and warnings are written through tqdm (`tqdm.write`) while inside, so no bar and line interleave.

    Bars are drawn never with -q; with --progress/--no-progress as forced; else only when stderr is a terminal
    (a log file or a test's captured stderr would fill with redrawn bars)."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    context = click.get_current_context(silent=True)
    forced = context.meta.get(PROGRESS_KEY) if context is not None else None
    drawn = not quiet and (sys.stderr.isatty() if forced is None else forced)
    shown: list[Any] = []

    def stage(description: str, total: int, unit: str) -> Advance:
        while shown:
            shown.pop().close()
        shown.append(tqdm(total=total or None, desc=description, unit=unit, disable=not drawn, file=sys.stderr,
                          leave=False))
        return shown[-1].update

    with logging_redirect_tqdm(loggers=[log, _WARNINGS]):
        try:
            yield stage
        finally:
            while shown:
                shown.pop().close()


def load_model(
    name: str | None, device: str, dtype: str | None, allow_pickle: bool = False, allow_missing_weights: bool = False
) -> Loaded:
    """Return the model named on the command line, or the built-in default model when `name` is None."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # our own bar covers loading; two bars on stderr interleave badly
    if name is None:
        from interpret.models.default_model import DEFAULT_MODEL_ID, load_default

        model, tokenizer, head = load_default(device)
        return Loaded(model, tokenizer, head, DEFAULT_MODEL_ID)
    from interpret.models.loading import load

    model, tokenizer = load(name, device=device, dtype=dtype, allow_pickle=allow_pickle,
                            allow_missing_weights=allow_missing_weights)
    return Loaded(model, tokenizer, None, name)


def slug(text: str, limit: int = 48) -> str:
    """Return a file-name-safe slug of the first words of `text` (e.g. 'the-movie-was-great')."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    joined = "-".join(words)[:limit].strip("-")
    return joined or "report"


def default_output(stem: str, suffix: str) -> Path:
    """Return reports/<stem><suffix> under the current directory."""
    return Path("reports") / f"{stem}{suffix}"


def json_text(data: Any) -> str:
    """Return `data` as indented JSON (NaN refused, so stdout always parses)."""
    return json.dumps(data, indent=2, allow_nan=False, default=str)


def write_json_stream(data: Any, destination: str, max_bytes: int) -> None:
    """Write `data` as compact JSON to the file `destination` atomically, or to stdout for '-'.

    The text is encoded in chunks into a temporary file, so that no second copy of a large report is held in
    memory, and refused (ReportError, nothing written) as soon as it passes `max_bytes`.
    """
    from interpret.files.atomic import atomic_path

    if destination != "-":
        with atomic_path(Path(destination)) as temporary:
            _write_capped(data, temporary, max_bytes)
        return
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "report.json"
        _write_capped(data, path, max_bytes)
        stdout = _stdout_bytes()
        with open(path, "rb") as handle:
            shutil.copyfileobj(handle, stdout)
        stdout.write(b"\n")
        stdout.flush()


def _write_capped(data: Any, path: Path, max_bytes: int) -> None:
    from interpret.errors import ReportError

    size = 0
    with open(path, "w", encoding="utf-8") as handle:
        for chunk in json.JSONEncoder(allow_nan=False, separators=(",", ":"), default=str).iterencode(data):
            size += len(chunk.encode("utf-8")) if not chunk.isascii() else len(chunk)
            if size > max_bytes:
                raise ReportError(
                    f"the JSON report passes --max-bytes {max_bytes:,} bytes while being written; nothing was written."
                    " Embed fewer layers or heads (--layers, --heads), run fewer analyzers (-a), truncate the input"
                    " (--max-length), or raise --max-bytes."
                )
            handle.write(chunk)


def write_page(report: Any, destination: str) -> None:
    """Write the report's HTML page to the file `destination` atomically, or its bytes to stdout for '-'."""
    if destination == "-":
        stdout = _stdout_bytes()
        stdout.write(report.page())
        stdout.flush()
        return
    report.render(destination, max_bytes=None)  # the size was checked against --max-bytes already


def _stdout_bytes() -> Any:
    """Return stdout's byte stream, after flushing the text written so far (so the two stay in order)."""
    sys.stdout.flush()
    return sys.stdout.buffer
