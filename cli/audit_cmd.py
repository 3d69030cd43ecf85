"""`interpret audit`: run analyzers over a dataset in resumable batches and summarise."""

from __future__ import annotations

from pathlib import Path

import click

from interpret.analyze.defaults import DEFAULT_ANALYZERS
from interpret.cli.common import check_analyzers, json_text, load_model, parse_sets, setup_logging
from interpret.cli.options import analyzer_options, model_options, verbosity_options
from interpret.datasets import read_examples


@click.command()
@model_options
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A .jsonl or .csv file with a text column (optional label).")
@analyzer_options
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--fresh", is_flag=True, help="Discard finished batches in the output directory and start over.")
@click.option("--target", type=click.Choice(["prediction", "gold"]), default="prediction", show_default=True,
              help="Explain each example's prediction, or its gold label (needs a label column).")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output directory (default: reports/<input-stem>-audit/).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              help="How to print the outcome (stdout).")
@verbosity_options
@click.pass_context
def audit(
    ctx: click.Context, model: str | None, device: str, dtype: str | None, max_length: int | None,
    input_file: Path, analyzer_names: tuple[str, ...], sets: tuple[str, ...], batch_size: int, seed: int,
    fresh: bool, target: str, output: Path | None, fmt: str, quiet: bool, verbose: bool,
) -> None:
    """Audit every example of a dataset; re-running resumes where an interrupted run stopped."""
    ctx.obj["verbose"] = verbose
    setup_logging(quiet, verbose)
    names = check_analyzers(analyzer_names or DEFAULT_ANALYZERS)
    params = parse_sets(sets, names)
    examples = read_examples(input_file)
    out_dir = output or Path("reports") / f"{input_file.stem}-audit"
    from interpret.audit import run_audit

    loaded = load_model(model, device, dtype)
    outcome = run_audit(
        loaded.model, loaded.tokenizer, examples, out_dir, analyzers=names, params=params, batch_size=batch_size,
        max_length=max_length, head=loaded.head, model_id=loaded.model_id, seed=seed, progress=not quiet,
        fresh=fresh, target=target,
    )
    summary = {
        "output": str(out_dir), "examples": len(examples), "accuracy": outcome.accuracy,
        "files": [str(path) for path in outcome.paths],
    }
    click.echo(json_text(summary) if fmt == "json" else "\n".join(f"{k}: {v}" for k, v in summary.items()))
