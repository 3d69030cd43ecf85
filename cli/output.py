"""What the command line prints: every line through `printable`, failures as one line with their exit code."""

from __future__ import annotations

import errno

import click

VERBOSE_KEY = "interpret.verbose"  # in the click context's shared `meta`: whether -v was given

EXIT_RUNTIME = 1
EXIT_INTERRUPTED = 130


def safe(text: str) -> str:
    """Return `text` with what a terminal would act on escaped (`interpret.reading.text.printable`), line by line."""
    lines = text.split("\n")
    if all(line.isprintable() for line in lines):
        # str.isprintable() is False for every control, surrogate, separator and format character (the bidi
        # controls are format characters), so such lines hold nothing to escape; only other text pays for
        # importing interpret.reading.text, which imports numpy.
        return text
    from interpret.reading.text import printable

    return "\n".join(printable(line) for line in lines)


def say(text: str, *, err: bool = False) -> None:
    """Print `text` (made safe) and a newline on stdout, or on stderr with `err`."""
    click.echo(safe(text), err=err)


def one_line(text: str) -> str:
    """Return `text` with every run of whitespace, newlines included, folded into one space."""
    return " ".join(text.split())


def failure_message(err: BaseException) -> tuple[str, int]:
    """Return the one-line message and the exit code for an exception that ended a command."""
    from interpret.errors import InterpretError

    if isinstance(err, click.UsageError):  # click's own (not the toolkit's checks): its --help is the pointer
        hint = f" (see '{err.ctx.command_path} --help')" if err.ctx is not None and not isinstance(err, CheckedUsageError) else ""
        return one_line(err.format_message()) + hint, err.exit_code
    if isinstance(err, click.ClickException):
        return one_line(err.format_message()), err.exit_code
    if isinstance(err, (click.Abort, KeyboardInterrupt)):
        return "interrupted; nothing more was written.", EXIT_INTERRUPTED
    if isinstance(err, InterpretError):
        return one_line(str(err)), EXIT_RUNTIME
    if isinstance(err, OSError):
        return _os_message(err), EXIT_RUNTIME
    if isinstance(err, UnicodeError):
        return one_line(f"text could not be converted ({err}); give UTF-8 text."), EXIT_RUNTIME
    if isinstance(err, MemoryError):
        return ("out of memory; use shorter inputs (--max-length), fewer examples or fewer analyzers (-a)."), EXIT_RUNTIME
    detail = one_line(str(err)) or "no message"
    return (
        f"internal error ({type(err).__name__}: {detail}); run again with -v for the traceback and report it.",
        EXIT_RUNTIME,
    )


class CheckedUsageError(click.UsageError):
    """A usage error found by the toolkit's own checks (its message already says what to do)."""


def usage_error(message: str) -> CheckedUsageError:
    """Return the usage error (exit code 2) to raise for `message`, made one line."""
    return CheckedUsageError(one_line(message))


def _os_message(err: OSError) -> str:
    where = f" ({err.filename})" if err.filename else ""
    if err.errno == errno.ENOSPC:
        return f"no space left on the device{where}; free some space, or write the output to another disk."
    if err.errno == errno.EPIPE:
        return "the output pipe was closed before everything was written."
    reason = err.strerror or one_line(str(err)) or type(err).__name__
    return one_line(f"{reason}{where}; check the path and its permissions.")
