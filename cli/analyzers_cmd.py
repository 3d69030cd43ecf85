"""`interpret analyzers list | show NAME`: what analyzers exist, where they come from, their parameters."""

from __future__ import annotations

import click

from interpret.analyze import describe, registry
from interpret.cli.common import json_text
from interpret.errors import AnalyzerError


@click.group()
def analyzers() -> None:
    """List the registered analyzers or show one's parameters."""


@analyzers.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
def list_analyzers(fmt: str) -> None:
    """List every registered analyzer (broken plugins are marked, not run)."""
    entries = sorted(registry.entries().values(), key=lambda e: (e.broken, e.name))
    if fmt == "json":
        rows = [
            {"name": e.name, "distribution": e.distribution, "version": e.dist_version, "broken": e.broken,
             "summary": e.summary}
            for e in entries
        ]
        click.echo(json_text(rows))
        return
    width = max((len(e.name) for e in entries), default=4)
    for entry in entries:
        origin = "built-in" if entry.builtin else f"{entry.distribution} {entry.dist_version}"
        click.echo(f"{entry.name:<{width}}  {entry.summary}  [{origin}]")


@analyzers.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
def show(name: str, fmt: str) -> None:
    """Show one analyzer: summary, what it reads from the trace, and its parameters."""
    try:
        cls = registry.get(name)
    except AnalyzerError as err:
        raise click.UsageError(str(err)) from None
    params = describe(cls.Params)
    if fmt == "json":
        click.echo(json_text({
            "name": cls.name, "summary": cls.summary, "version": cls.version, "requires": list(cls.requires),
            "needs_model": cls.needs_model,
            "params": [{"name": p.name, "type": p.type, "default": p.default, "help": p.help} for p in params],
        }))
        return
    click.echo(f"{cls.name} {cls.version}: {cls.summary}")
    click.echo(f"reads: {', '.join(cls.requires)}{'  (re-runs the model)' if cls.needs_model else ''}")
    click.echo("parameters (--set " + cls.name + ".KEY=VALUE):")
    for p in params:
        click.echo(f"  {p.name} ({p.type}, default {p.default!r}): {p.help}")
