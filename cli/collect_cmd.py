"""`interpret collect`: capture named intermediates of a model and save them as a Trace (safetensors)."""

from __future__ import annotations

import click

from interpret.cli.common import default_output, json_text, load_model, parse_layers, setup_logging, slug
from interpret.cli.options import model_options, verbosity_options


@click.command()
@model_options
@click.option("--text", "texts", multiple=True, required=True, help="Text to run (repeatable: a batch).")
@click.option("--decoder-text", "decoder_texts", multiple=True,
              help="Decoder input of an encoder-decoder model (one per text).")
@click.option("--names", "names", multiple=True, metavar="GLOB",
              help="Hook-name globs to capture (repeatable; default every attention pattern).")
@click.option("--layers", default=None, metavar="0,2,-1", help="Layers to capture (default: all).")
@click.option("--heads", default=None, metavar="0,3", help="Heads to keep (default: all).")
@click.option("--reduce", type=click.Choice(["none", "mean", "max"]), default="none", show_default=True,
              help="Reduce over heads inside the hook.")
@click.option("-o", "--output", default=None, metavar="PATH",
              help="Trace file (default: reports/<first-words>.trace.safetensors).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              help="How to print the summary of what was captured (stdout).")
@verbosity_options
@click.pass_context
def collect(
    ctx: click.Context, model: str | None, device: str, dtype: str | None, max_length: int | None,
    texts: tuple[str, ...], decoder_texts: tuple[str, ...], names: tuple[str, ...], layers: str | None, heads: str | None, reduce: str,
    output: str | None, fmt: str, quiet: bool, verbose: bool,
) -> None:
    """Run the model once and save the captured tensors with their metadata."""
    ctx.obj["verbose"] = verbose
    setup_logging(quiet, verbose)
    if any(not text.strip() for text in texts):
        raise click.UsageError("--text is empty; give at least one word.")
    from interpret.collect import collect as run_collect
    from interpret.trace_io import save_trace

    loaded = load_model(model, device, dtype)
    trace = run_collect(
        loaded.model, loaded.tokenizer, list(texts), names=list(names) or None, layers=parse_layers(layers),
        heads=parse_layers(heads), reduce=None if reduce == "none" else reduce, max_length=max_length,
        decoder_inputs=list(decoder_texts) or None,
    )
    path = save_trace(trace, output or default_output(slug(texts[0]), ".trace.safetensors"))
    shapes = {name: list(tensor.shape) for name, tensor in trace.tensors.items()}
    if fmt == "json":
        click.echo(json_text({"path": str(path), "attention": trace.meta.attention, "tensors": shapes}))
        return
    for name, shape in shapes.items():
        click.echo(f"{name}  {shape}")
    if not quiet:
        click.echo(f"wrote {path} ({len(shapes)} tensors, attention: {trace.meta.attention})", err=True)
