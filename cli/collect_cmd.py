"""`interpret collect`: capture named intermediates of a model and save them as a Trace (safetensors).

Checked before the model loads: the texts, the output path, the hook-name globs against the canonical
grammar for the model's kind and layers, --layers and --heads against its config, the token counts against
its limits and the capture's size against the per-example budget.
"""

from __future__ import annotations

import fnmatch

import click

from interpret.cli import preflight
from interpret.cli.budget import estimated_lengths, exact_lengths
from interpret.cli.options import check_index_range, check_texts, model_options, parse_indices, verbosity_options
from interpret.cli.output import say, usage_error
from interpret.cli.preflight import ModelPlan, Source
from interpret.errors import suggest
from interpret.estimate.memory import CAPTURE_BUDGET, human_bytes, longest_within, pattern_bytes

# Hook names per layer (TransformerLens grammar, docs/architecture.md), and the side they sit on.
_BLOCK_HOOKS = (
    "hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores", "attn.hook_pattern",
    "attn.hook_z", "hook_attn_out", "mlp.hook_post", "hook_mlp_out", "hook_resid_post",
)
_CROSS_HOOKS = (
    "cross_attn.hook_q", "cross_attn.hook_k", "cross_attn.hook_v", "cross_attn.hook_attn_scores",
    "cross_attn.hook_pattern", "cross_attn.hook_z", "hook_cross_attn_out",
)
_SQUARE = ("hook_attn_scores", "hook_pattern")  # [batch, head, query, key]: the tensors that grow with tokens²


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
def collect(
    model: str | None, device: str, dtype: str | None, max_length: int | None, allow_pickle: bool,
    allow_missing_weights: bool, texts: tuple[str, ...], decoder_texts: tuple[str, ...], names: tuple[str, ...], layers: str | None,
    heads: str | None, reduce: str, output: str | None, fmt: str, quiet: bool, verbose: bool,
) -> None:
    """Run the model once and save the captured tensors with their metadata."""
    from interpret.cli.common import default_output, json_text, load_model, setup_logging, slug

    setup_logging(quiet, verbose)
    checked = check_texts(texts, "--text")
    check_texts(decoder_texts, "--decoder-text")
    for glob in names:
        if not glob.strip():
            raise usage_error("--names is empty; give a hook-name glob such as 'blocks.*.attn.hook_pattern'.")
    layer_list = parse_indices(layers, "--layers", "layer")
    head_list = parse_indices(heads, "--heads", "head")
    destination = output or str(default_output(slug(checked[0]), ".trace.safetensors"))
    if destination == "-":
        raise usage_error("-o -: a trace is a binary safetensors file; give a file path.")
    preflight.check_output_file(destination, example="trace.safetensors")
    plan = preflight.plan_model(model, allow_pickle)
    facts = plan.facts
    if facts.kind == "vision":
        raise usage_error(f"--model {plan.display_name} is a vision model; the command line collects from texts.")
    if facts.kind == "encoder-decoder" and len(decoder_texts) != len(checked):
        raise usage_error(f"--model {plan.display_name} is an encoder-decoder model; give one --decoder-text per --text"
                          f" ({len(checked)}).")
    if facts.kind != "encoder-decoder" and decoder_texts:
        raise usage_error(f"--decoder-text is for encoder-decoder models; {plan.described()}, so drop it.")
    layer_list = check_index_range(layer_list, facts.n_layers, "--layers", "layer")
    head_list = check_index_range(head_list, facts.n_heads, "--heads", "head")
    globs = list(names) or ["*hook_pattern"]
    _check_names(globs, plan)
    source = Source("--text")
    preflight.check_text_sizes(checked, plan, source)
    lengths = estimated_lengths(plan, checked, max_length, source)
    if lengths is not None:
        _check_capture(plan, lengths, globs, layer_list, head_list, reduce)
    _check_capture(plan, exact_lengths(plan, checked, max_length, source, device), globs, layer_list, head_list, reduce)

    from interpret.capture import collect as run_collect
    from interpret.files.trace_io import save_trace

    loaded = load_model(model, device, dtype, allow_pickle, allow_missing_weights)
    trace = run_collect(
        loaded.model, loaded.tokenizer, checked, names=globs, layers=layer_list, heads=head_list,
        reduce=None if reduce == "none" else reduce, max_length=max_length,
        decoder_inputs=list(decoder_texts) or None, budget_bytes=CAPTURE_BUDGET,
    )
    path = save_trace(trace, destination)
    shapes = {name: list(tensor.shape) for name, tensor in trace.tensors.items()}
    if fmt == "json":
        say(json_text({"path": str(path), "attention": trace.meta.attention, "tensors": shapes}))
        return
    for name, shape in shapes.items():
        say(f"{name}  {shape}")
    say(f"wrote {path} ({len(shapes)} tensors, attention: {trace.meta.attention})")


def canonical_names(plan: ModelPlan) -> list[str]:
    """Return the hook names the model's kind and layer counts allow (docs/architecture.md's grammar)."""
    facts = plan.facts
    if facts.kind != "encoder-decoder":
        return ["hook_embed"] + [f"blocks.{i}.{hook}" for i in range(facts.n_layers) for hook in _BLOCK_HOOKS]
    names = ["encoder.hook_embed", "decoder.hook_embed"]
    names += [f"encoder.blocks.{i}.{hook}" for i in range(facts.n_layers) for hook in _BLOCK_HOOKS]
    names += [f"decoder.blocks.{i}.{hook}" for i in range(facts.decoder_layers) for hook in _BLOCK_HOOKS + _CROSS_HOOKS]
    return names


def _check_names(globs: list[str], plan: ModelPlan) -> None:
    """Refuse a glob that matches no hook name the model can have (a typo found before the model loads)."""
    if plan.facts.n_layers <= 0:
        return  # the config does not say how many layers: the collector checks the names itself
    available = canonical_names(plan)
    for glob in globs:
        if not any(fnmatch.fnmatchcase(name, glob) for name in available):
            prefix = "encoder." if plan.facts.kind == "encoder-decoder" else ""
            raise usage_error(
                f"--names {glob!r} matches no hook of this model;{suggest(glob, available)} names look like"
                f" '{prefix}blocks.0.attn.hook_pattern' or '{prefix}blocks.*.hook_resid_post' (layers 0..{plan.facts.n_layers - 1})."
            )


def _check_capture(
    plan: ModelPlan, lengths: list[int], globs: list[str], layers: list[int] | None, heads: list[int] | None, reduce: str
) -> None:
    """Refuse a capture whose [batch, head, query, key] tensors pass the per-example budget (the tensors that
    grow with tokens² dominate; the others grow with tokens and are left out)."""
    wanted = None if layers is None else set(layers)
    square = [
        name for name in canonical_names(plan)
        if name.rsplit(".", 1)[-1] in _SQUARE and any(fnmatch.fnmatchcase(name, glob) for glob in globs)
        and (wanted is None or _layer_of(name) in wanted)
    ]
    head_count = 1 if reduce != "none" else len(heads) if heads else max(plan.facts.n_heads, plan.facts.decoder_heads)
    n = max(lengths)
    per_example = pattern_bytes(len(square) * head_count, n)
    if per_example > CAPTURE_BUDGET:
        fit = longest_within(CAPTURE_BUDGET, len(square) * head_count)
        raise usage_error(
            f"the capture would hold {human_bytes(per_example)} per example ({len(square)} attention tensors ×"
            f" {head_count} heads × {n}² tokens, float32), over the {human_bytes(CAPTURE_BUDGET)} budget; capture fewer"
            f" layers (--layers) or heads (--heads, --reduce mean), or truncate the input (--max-length {fit})."
        )


def _layer_of(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[parts.index("blocks") + 1]) if "blocks" in parts else None
