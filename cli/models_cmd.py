"""`interpret models [MODEL_TYPE]...`: which model types can be captured, by which adapter, with which hook points."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import click

from interpret.cli.common import json_text

if TYPE_CHECKING:
    from interpret.capture.hf.catalog import TypeSupport


@click.command(short_help="List the model types transformers knows: supported or not, by which adapter, with which hook points.")
@click.argument("model_types", nargs=-1, metavar="[MODEL_TYPE]...")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(["supported", "unsupported", "unknown", "unprobed"]),
              help="Show only model types with this status (repeatable; unprobed: not probed on this machine yet).")
@click.option("--probe", is_flag=True,
              help="Probe every listed model type not probed yet (all ~800: minutes; naming types probes just those).")
@click.option("--refresh", is_flag=True, help="Probe the listed model types again instead of reading the cached table.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
def models(model_types: tuple[str, ...], statuses: tuple[str, ...], probe: bool, refresh: bool, fmt: str) -> None:
    """List the model types the installed transformers knows: supported or not, by which adapter, and the hook
    points each offers (found by a probe pass on the meta device: no weights, no memory; on the CPU with random
    weights where the meta device lacks a value the model reads; cached per version).
    Without names it lists at once what is known without building a model: the cached outcome of each type
    probed before (by name, by --probe, or by a command that used it) and, for the rest, `unprobed` with the
    adapter that would serve it. Naming model types probes them and shows each one's hook points in full."""
    from interpret.capture.hf import catalog
    from interpret.errors import suggest

    known = catalog.model_types()
    unknown = [name for name in model_types if name not in known]
    if unknown:
        raise click.UsageError(
            f"model type {unknown[0]!r} is not known to the installed transformers;{suggest(unknown[0], known)}"
            " run `interpret models` for the list."
        )
    wanted = list(model_types) or known
    if model_types or probe or refresh:
        rows = catalog.catalog(wanted, refresh=refresh, progress=_bar if fmt == "text" else None)
    else:
        rows = catalog.listing(wanted)
    if statuses:
        hidden = sum(row.status == "unprobed" for row in rows) if "unprobed" not in statuses else 0
        rows = [row for row in rows if row.status in statuses]
        if hidden:
            click.echo(f"{hidden} model types not probed yet are left out (any may have this status); --probe probes"
                       " them", err=True)
    if fmt == "json":
        click.echo(json_text(catalog.as_dicts(rows)))
    elif model_types:
        for row in rows:
            _detail(row)
    else:
        _table(rows)


def _table(rows: list[TypeSupport]) -> None:
    """Print one line per model type, and the counts on stderr."""
    width = max((len(row.model_type) for row in rows), default=10)
    click.echo(f"{'model type':<{width}}  {'status':<11}  {'adapter':<8}  {'kind':<15}  hook points not offered / reason")
    for row in rows:
        note = "; ".join(filter(None, (row.shared, ", ".join(row.missing)))) if row.status == "supported" else row.reason
        click.echo(f"{row.model_type:<{width}}  {row.status:<11}  {row.adapter or '-':<8}  {row.kind or '-':<15}  {note or '-'}")
    counts = {status: sum(row.status == status for row in rows)
              for status in ("supported", "unsupported", "unknown", "unprobed")}
    click.echo(f"{len(rows)} model types: " + ", ".join(f"{count} {status}" for status, count in counts.items())
               + ("; `interpret models TYPE` probes one, --probe every one" if counts["unprobed"] else ""), err=True)


def _detail(row: TypeSupport) -> None:
    """Print one model type in full: status, adapter, kind, every hook point offered, and what is not, with why."""
    click.echo(f"{row.model_type} ({row.model_class or '?'}): {row.status}")
    if row.status != "supported":
        click.echo(f"  {row.reason}")
        return
    click.echo(f"  adapter: {row.adapter}   kind: {row.kind}")
    if row.probed_on == "cpu":
        click.echo("  probed on the CPU with random weights (the meta device lacks a value its forward pass reads)")
    if row.completed:
        click.echo("  transformers' default config leaves sizes unset; probed with " + ", ".join(row.completed))
    if row.shared:
        click.echo(f"  layers: {row.shared}")
    click.echo("  offers: " + ", ".join(row.offered))
    for hook, why in row.missing.items():
        click.echo(f"  not offered: {hook}: {why}")


def _bar(todo: Iterable[str]) -> Iterator[str]:
    """Yield the model types still to probe, with the CLI's progress bar on stderr when there are many."""
    from interpret.cli.common import stages

    items = list(todo)
    with stages(quiet=len(items) < 5) as stage:
        advance = stage("probing model types (meta device; CPU where meta lacks values)", len(items), "type")
        for item in items:
            yield item
            advance(1)
