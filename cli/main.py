"""The `interpret` command: reports, analyzers, traces and dataset audits from the shell.

Exit codes: 0 success; 2 usage error — a bad option value, an unknown analyzer or parameter, a missing or
unreadable input file, an output path that cannot be written, a target the model does not have, a report
that cannot fit its limits: everything the command line and the files it names show, found before any
model loads; 1 runtime failure (the model or the run failed, the disk filled up); 130 interrupted. Every
failure is one line on stderr (`error: ...`); -v adds the traceback.

Start-up imports only click and the toolkit's light modules: the commands import torch and transformers
when they run, so `--help`, `--version` and `analyzers list` answer at once.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from interpret.cli.output import VERBOSE_KEY, failure_message, say

# name → (module, attribute, the command's one-line help); a module is imported only when its command runs or
# shows its own help, so `interpret --help` lists the commands from here (a test ties each line to the command).
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "report": ("interpret.cli.report_cmd", "report",
               "Write a self-contained report explaining the model's decision on the input."),
    "analyzers": ("interpret.cli.analyzers_cmd", "analyzers", "List the registered analyzers or show one's parameters."),
    "collect": ("interpret.cli.collect_cmd", "collect",
                "Run the model once and save the captured tensors with their metadata."),
    "audit": ("interpret.cli.audit_cmd", "audit",
              "Audit every example of a dataset; re-running resumes where an interrupted run stopped."),
    "models": ("interpret.cli.models_cmd", "models",
               "List the model types transformers knows: supported or not, by which adapter, with which hook points."),
    "heads": ("interpret.cli.heads_cmd", "heads",
              "Rank attention heads by importance (Michel et al. 2019), draw pruning curves, optionally prune."),
    "evaluate": ("interpret.cli.evaluate_cmd", "evaluate",
                 "Check how faithful each method is: ERASER metrics, the randomisation sanity check, known-answer tasks."),
}


class _Group(click.Group):
    """The top-level group: commands imported on demand, and every failure turned into one line and an exit code."""

    _root: click.Context | None = None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _COMMANDS:
            return None
        module, attribute, _ = _COMMANDS[name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands with their one-line help, without importing them."""
        rows = [(name, help_line) for name, (_, _, help_line) in _COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any) -> click.Context:
        context = super().make_context(info_name, args, parent, **extra)
        self._root = context  # its `meta` is shared with the subcommand's context, which records -v there
        return context

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; in standalone mode exit with its code, never with a traceback unless -v."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        self._root = None
        try:
            result = super().main(args, prog_name or "interpret", complete_var, False, **extra)
        except SystemExit:
            raise
        except BaseException as err:  # noqa: BLE001 - the one place every failure becomes one line
            verbose = bool(self._root is not None and self._root.meta.get(VERBOSE_KEY))
            if verbose:
                traceback.print_exception(err)
            message, code = failure_message(err)
            say(f"error: {message}", err=True)
            _settle_stdout()
            sys.exit(code)
        sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)


def _settle_stdout() -> None:
    """Flush stdout; when that fails (a full disk, a closed pipe), point its descriptor at /dev/null, so the
    interpreter's own flush at exit does not print a second error with a traceback."""
    try:
        sys.stdout.flush()
    except OSError:
        try:
            descriptor = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):
            return  # not a real file (a test's capture): nothing will be flushed at exit
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, descriptor)
        os.close(null)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from interpret.runtime.versions import library_versions

        versions = library_versions()
        names = ("transformer-audit", "torch", "transformers")
        say(" ".join(f"{name} {versions[name]}" for name in names if name in versions))
        ctx.exit(0)


@click.group("interpret", cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the toolkit, torch and transformers versions.")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Explain Transformer decisions: capture true attention, analyze it, write offline HTML reports."""
    ctx.ensure_object(dict)


def main() -> None:
    """Console-script entry point (`interpret`, and `python -m interpret`)."""
    for stream in (sys.stdout, sys.stderr):
        # A terminal or pipe that cannot encode a character gets an escape instead of a UnicodeEncodeError.
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    cli.main(prog_name="interpret")
