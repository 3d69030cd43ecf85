"""`interpret report`: explain a model's decision on a text (or the texts of a file) as an HTML or JSON report."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click
from tqdm import tqdm

from interpret.analyze.defaults import DEFAULT_ANALYZERS
from interpret.cli.common import (
    check_analyzers, default_output, json_text, load_model, parse_layers, parse_sets, parse_target, setup_logging,
    slug, write_text,
)
from interpret.cli.options import analyzer_options, model_options, verbosity_options
from interpret.datasets import read_examples



@click.command()
@model_options
@click.option("--text", "texts", multiple=True, help="Text to explain (repeatable: one report over all texts).")
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A .jsonl or .csv file with a text column (optional label).")
@click.option("--decoder-text", "decoder_texts", multiple=True,
              help="Decoder input of an encoder-decoder model (one per text), e.g. the output being explained.")
@analyzer_options
@click.option("--target", default=None,
              help="Class label or index (classifiers) or token (language models); default: the prediction.")
@click.option("--layers", default=None, metavar="0,2,-1", help="Layers the attention views embed (default: all).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for any randomness.")
@click.option("-o", "--output", default=None, metavar="PATH",
              help="Output file, '-' for stdout (default: reports/<first-words>.html or .json).")
@click.option("--format", "fmt", type=click.Choice(["html", "json"]), default="html", show_default=True)
@verbosity_options
@click.pass_context
def report(
    ctx: click.Context, model: str | None, device: str, dtype: str | None, max_length: int | None,
    texts: tuple[str, ...], input_file: Path | None, decoder_texts: tuple[str, ...], analyzer_names: tuple[str, ...],
    sets: tuple[str, ...],
    target: str | None, layers: str | None, seed: int, output: str | None, fmt: str, quiet: bool, verbose: bool,
) -> None:
    """Write a self-contained report explaining the model's decision on the input."""
    ctx.obj["verbose"] = verbose
    setup_logging(quiet, verbose)
    if bool(texts) == bool(input_file):
        raise click.UsageError("give the input as --text TEXT or --input FILE (exactly one of them).")
    if any(not text.strip() for text in texts):
        raise click.UsageError("--text is empty; give at least one word.")
    names = check_analyzers(analyzer_names or DEFAULT_ANALYZERS)
    params = parse_sets(sets, names)
    layer_list = parse_layers(layers)
    examples = read_examples(input_file) if input_file else []
    inputs = list(texts) if texts else [example.text for example in examples]
    stem = input_file.stem if input_file else slug(inputs[0])
    destination = output or str(default_output(stem, "." + fmt))

    from interpret.api import explain

    with tqdm(total=3, desc="load model", disable=quiet, file=sys.stderr, leave=False) as bar:
        loaded = load_model(model, device, dtype)
        bar.update()
        bar.set_description("collect + analyze")
        result = explain(
            loaded.model, loaded.tokenizer, inputs, names, params=params, target=parse_target(target),
            layers=layer_list, max_length=max_length, head=loaded.head, seed=seed, model_id=loaded.model_id,
            decoder_inputs=list(decoder_texts) or None,
            gold=[example.label for example in examples] if examples else None,
            ids=[example.id for example in examples] if examples else None,
        )
        bar.update()
        bar.set_description("write")
        if fmt == "json":
            write_text(destination, json_text(result.to_dict()))
        elif destination == "-":
            with tempfile.TemporaryDirectory() as scratch:
                page = result.render(Path(scratch) / "report.html")
                write_text("-", page.read_text(encoding="utf-8"))
        else:
            result.render(destination)
        bar.update()
    if destination != "-" and not quiet:
        click.echo(f"wrote {destination}", err=True)
