"""`interpret analyzers list | show NAME`: what analyzers exist, where they come from, their parameters.

`list` reads names and summaries from entry-point metadata and the plugins' sources, without importing them
(`interpret.cli.analyzer_index`); `list --check` loads and validates every plugin; `show` loads the one named.
"""

from __future__ import annotations

import click

from interpret.cli.output import say, usage_error


@click.group()
def analyzers() -> None:
    """List the registered analyzers or show one's parameters."""


@analyzers.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
@click.option("--check", is_flag=True,
              help="Import and validate every plugin (slower: loads torch), instead of reading their sources.")
def list_analyzers(fmt: str, check: bool) -> None:
    """List every registered analyzer (broken plugins are marked, not run)."""
    from interpret.cli.analyzer_index import listings
    from interpret.cli.common import json_text

    entries = sorted(listings(check), key=lambda e: (e.broken, e.name))
    if fmt == "json":
        say(json_text([
            {"name": e.name, "distribution": e.distribution, "version": e.dist_version, "broken": e.broken,
             "summary": e.summary, "checked": e.checked}
            for e in entries
        ]))
        return
    width = max((len(e.name) for e in entries), default=4)
    for entry in entries:
        origin = "built-in" if entry.builtin else f"{entry.distribution} {entry.dist_version}"
        say(f"{entry.name:<{width}}  {entry.summary}  [{origin}]")
    if not entries:
        say("no analyzers are registered; reinstall the toolkit (pip install transformer-audit).")


@analyzers.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
def show(name: str, fmt: str) -> None:
    """Show one analyzer: summary, what it reads from the trace, and its parameters."""
    from interpret.analysis import describe, registry
    from interpret.cli.common import json_text
    from interpret.errors import AnalyzerError

    try:
        cls = registry.get(name)
    except AnalyzerError as err:
        raise usage_error(str(err)) from None
    params = describe(cls.Params)
    if fmt == "json":
        say(json_text({
            "name": cls.name, "summary": cls.summary, "version": cls.version, "requires": list(cls.requires),
            "needs_model": cls.needs_model, "provides": list(cls.provides),
            "params": [{"name": p.name, "type": p.type, "default": p.default, "help": p.help} for p in params],
        }))
        return
    say(f"{cls.name} {cls.version}: {cls.summary}")
    say(f"reads: {', '.join(cls.requires) or 'nothing from the trace'}{'  (re-runs the model)' if cls.needs_model else ''}")
    say(f"provides: {', '.join(cls.provides) or 'nothing the audit tabulates'}")
    say("parameters (--set " + cls.name + ".KEY=VALUE):")
    for p in params:
        say(f"  {p.name} ({p.type}, default {p.default!r}): {p.help}")
