"""The `interpret` command: reports, analyzers, traces and dataset audits from the shell.

Exit codes: 0 success, 1 runtime failure (one line on stderr; the traceback too with -v), 2 usage error.
"""

from __future__ import annotations

import traceback
from typing import Any

import click

from interpret.errors import InterpretError


class _Group(click.Group):
    """A click group that turns toolkit errors into one line on stderr and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except InterpretError as err:
            if (ctx.obj or {}).get("verbose"):
                traceback.print_exc()
            click.echo(f"error: {err}", err=True)
            ctx.exit(1)


def _version_text() -> str:
    from interpret.versions import library_versions

    versions = library_versions()
    return " ".join(
        f"{name} {versions[name]}" for name in ("transformer-audit", "torch", "transformers") if name in versions
    )


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(_version_text())
        ctx.exit(0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the toolkit, torch and transformers versions.")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Explain Transformer decisions: capture true attention, analyze it, write offline HTML reports."""
    ctx.ensure_object(dict)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="interpret")


def _add_commands() -> None:
    from interpret.cli.analyzers_cmd import analyzers
    from interpret.cli.audit_cmd import audit
    from interpret.cli.collect_cmd import collect
    from interpret.cli.models_cmd import models
    from interpret.cli.report_cmd import report

    for command in (report, analyzers, collect, audit, models):
        cli.add_command(command)


_add_commands()
