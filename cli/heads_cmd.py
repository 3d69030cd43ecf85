"""`interpret heads`: head importance (Michel et al. 2019) over a dataset, both pruning curves, an HTML report,
and optionally the pruned model written with save_pretrained.

Every check the command line and the input file allow runs before the model loads: the input (empty, unreadable,
labels partly missing, labels the model does not know; no labels with the default model's sentiment probe), -o,
--prune-to (a path that is, contains or lies inside the model's directory or the input file is refused; an
existing non-empty directory only with --force, and only one this command wrote: it holds `MARKER`), the
model's kind and its decision, every example's length, and the pruning loop's estimated cost (--max-flops,
--max-memory).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from interpret.cli import preflight
from interpret.cli.budget import check_cost, estimated_lengths, exact_lengths, parse_flops as _parse_flops
from interpret.cli.options import model_options, parse_size, progress_option, verbosity_options
from interpret.cli.output import say, usage_error
from interpret.cli.preflight import ModelPlan, Source

# the model types interpret.heads.store writes with per-layer head counts (pruned_bert.PRUNED_CONFIGS; a test
# keeps the two equal: this module must not import transformers before the model loads)
STORABLE_TYPES = ("bert", "roberta")
STORABLE_CLASSES = tuple(f"{family}{head}" for family in ("Bert", "Roberta") for head in
                         ("Model", "ForSequenceClassification", "ForTokenClassification", "ForMaskedLM"))

SHORT_HELP = "Rank attention heads by importance (Michel et al. 2019), draw pruning curves, optionally prune."
MARKER = ".interpret-pruned-model"  # written into every directory --prune-to writes; --force replaces only those
_MARKER_TEXT = "written by interpret heads --prune-to; --force may replace this directory\n"


@click.command(short_help=SHORT_HELP)
@model_options
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A .jsonl or .csv file with a text column and optional labels.")
@click.option("--label-column", default="label", show_default=True, metavar="NAME",
              help="The column holding each example's label; without one the run is label-free (the loss and the"
                   " metric are against the unpruned model's own predictions).")
@click.option("--batch-size", type=click.IntRange(min=1, max=4096), default=32, show_default=True,
              help="Examples per forward pass.")
@click.option("--fraction", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.1, show_default=True,
              help="Share of the remaining heads pruned per step.")
@click.option("--threshold", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.9, show_default=True,
              help="Stop when the metric falls below this share of the unpruned model's.")
@click.option("--prune-to", default=None, metavar="DIR",
              help="Write the model with the last passing mask's heads removed (save_pretrained) and its tokenizer.")
@click.option("--force", is_flag=True,
              help="Let --prune-to replace an existing non-empty directory that an earlier --prune-to wrote.")
@click.option("--store", type=click.Choice(["removed", "zeroed"]), default=None,
              help="How --prune-to stores a BERT or RoBERTa model, whose config cannot hold fewer heads per layer:"
                   " removed (default: fewer parameters, model type bert_pruned / roberta_pruned with its modeling"
                   " file; loads with AutoModel.from_pretrained(DIR, trust_remote_code=True)) or zeroed (same size,"
                   " the pruned heads' output columns zeroed; loads without remote code). Other families store"
                   " their pruned heads natively.")
@click.option("--max-flops", default=None, metavar="FLOPS",
              help="Largest estimated cost of the run, e.g. 2e14 (default 5e13 on a CPU, 5e15 on a GPU); the"
                   " pruning loop's worst case is estimated before the model loads and refused above it.")
@click.option("--max-memory", default=None, metavar="SIZE",
              help="Largest estimated memory of one importance batch with the weights, e.g. 8GB (default: 80% of"
                   " this machine's memory, or of the GPU's).")
@click.option("-o", "--output", default=None, metavar="FILE",
              help="The HTML report (default: reports/<input-stem>-heads.html).")
@verbosity_options
@progress_option
def heads(
    model: str | None, device: str, dtype: str | None, max_length: int | None, allow_pickle: bool,
    allow_missing_weights: bool, input_file: Path, label_column: str, batch_size: int, fraction: float,
    threshold: float, prune_to: str | None, force: bool, store: str | None, max_flops: str | None, max_memory: str | None, output: str | None, quiet: bool, verbose: bool,
) -> None:
    """Rank attention heads by importance (Michel et al. 2019), draw pruning curves, optionally prune."""
    from interpret.cli.common import setup_logging

    setup_logging(quiet, verbose)
    flops_limit = _parse_flops(max_flops)
    memory_limit = parse_size(max_memory, "--max-memory")
    dataset = preflight.check_dataset(input_file, label_column=label_column)
    if dataset.paired:
        raise usage_error(f"--input: {input_file.name} holds text pairs (a text_pair column), and head importance runs on"
                          " single texts; give a file without text_pair.")
    examples = dataset.examples
    raw_labels = _labels(input_file, examples, label_column)
    report_path = output or str(Path("reports") / f"{input_file.stem}-heads.html")
    preflight.check_output_file(report_path)
    plan = preflight.plan_model(model, allow_pickle)
    texts = [example.text for example in examples]
    source = Source(input_file.name, tuple(example.row for example in examples))
    preflight.check_text_sizes(texts, plan, source)  # before anything reads a text in full
    if prune_to is not None:
        _check_prune_to(prune_to, force, plan, input_file)
    default_head = _check_model(plan)
    if default_head and raw_labels is None:
        raise usage_error(
            f"--input: {input_file.name} has no labels, and {plan.display_name} has no classification head of its own:"
            " its decision is the toolkit's sentiment probe on the sentence embedding, whose agreement with itself says"
            " little about the embedding the model exists for. Give gold labels (--label-column NAME; the metric is"
            " then the probe's accuracy), or a --model with a classification head, or a language model."
        )
    if store is not None:
        _check_store(plan, prune_to, store)
    labels = _label_indices(plan, examples, input_file, default_head) if raw_labels is not None else None
    estimated_lengths(plan, texts, max_length, source)
    lengths = exact_lengths(plan, texts, max_length, source, device)
    cost = check_cost(plan, lengths, batch_size=batch_size, fraction=fraction, label_free=labels is None,
                      default_head=default_head, dtype=dtype, device=device, max_flops=flops_limit,
                      max_memory=memory_limit)

    from interpret.cli.common import load_model, stages
    from interpret.heads.run import study_heads

    # The default model's own files given as --model load as the default model: with its sentiment head.
    loaded = load_model(None if default_head else model, device, dtype, allow_pickle, allow_missing_weights)
    with stages(quiet) as stage:
        study = study_heads(loaded.model, loaded.tokenizer, texts, labels, head=loaded.head, batch_size=batch_size,
                            max_length=max_length, fraction=fraction, threshold=threshold, stage=stage)
    pruned_text = None
    if prune_to is not None:
        pruned_text = _prune(loaded, study.least.last_passing, prune_to, force, store)
    from interpret.heads.report import render_heads, write_heads

    name = plan.display_name
    written = write_heads(report_path, render_heads(study, model=name, input_name=input_file.name, pruned=pruned_text))
    for line in summary_lines(study, input_file.name, written, pruned_text, cost):
        say(line)


def _labels(path: Path, examples: list, column: str) -> list[str] | None:
    """Return each example's label text from `column`, None when no example has one; usage error when only some do."""
    values = [example.label for example in examples]
    if all(value is None for value in values):
        return None
    missing = next((example for example in examples if example.label is None), None)
    if missing is not None:
        raise usage_error(f"--input: {missing.place(path.name)} has no {column!r}; label every example or none"
                          " (label-free).")
    return [str(value) for value in values]


def _check_prune_to(prune_to: str, force: bool, plan: ModelPlan, input_file: Path) -> None:
    path = Path(prune_to).expanduser()
    preflight.check_apart(prune_to, "--prune-to", [("the model's directory", plan.checkpoint.root),
                                                    ("the input file", input_file)])
    if path.exists() and not path.is_dir():
        raise usage_error(f"--prune-to {prune_to!r} is a file; give a directory for the pruned model.")
    if path.is_dir() and any(path.iterdir()):
        if not force:
            raise usage_error(f"--prune-to {prune_to!r} exists and is not empty; give a new directory, or add --force"
                              " to replace a directory an earlier --prune-to wrote.")
        if not _written_here(path):
            raise usage_error(f"--prune-to {prune_to!r} was not written by `interpret heads --prune-to` (it has no"
                              f" {MARKER}); --force replaces only such a directory: give a new one.")
    preflight.check_output_dir(prune_to, "--prune-to")


def _written_here(directory: Path) -> bool:
    """Return whether `directory` holds the marker --prune-to writes (a regular file, not a link, with its text)."""
    marker = directory / MARKER
    try:
        return not marker.is_symlink() and marker.is_file() and marker.read_text(encoding="utf-8") == _MARKER_TEXT
    except (OSError, UnicodeDecodeError):
        return False


def _check_store(plan: ModelPlan, prune_to: str | None, store: str) -> None:
    """Usage error unless --store comes with --prune-to and a BERT or RoBERTa model (of a class stored removed)."""
    if prune_to is None:
        raise usage_error(f"--store {store} needs --prune-to DIR.")
    if plan.facts.model_type not in STORABLE_TYPES:
        raise usage_error(f"--store: {plan.described()} is of model type {plan.facts.model_type!r}, which stores its"
                          " pruned heads one way only; --store applies to BERT and RoBERTa. Drop --store.")
    architecture = plan.facts.architecture
    if store == "removed" and architecture and architecture not in STORABLE_CLASSES:
        raise usage_error(f"--store removed: {plan.described()} is a {architecture}; only"
                          f" {', '.join(STORABLE_CLASSES)} are stored with per-layer head counts. Use --store zeroed.")


def _check_model(plan: ModelPlan) -> bool:
    """Return whether the run uses the default model's sentiment head; usage error for a model without a decision."""
    facts = plan.facts
    if facts.kind not in ("encoder", "decoder"):
        raise usage_error(f"{plan.described()}; `interpret heads` reads one text per example: give an encoder or decoder.")
    if plan.default:
        return True
    if facts.one_output:
        raise usage_error(f"{plan.described()} with one output (a score), and head importance measures a class or"
                          " next-token loss; give a classifier with classes or a language model.")
    if facts.decision in ("class", "token"):
        return False
    if _is_default_directory(plan):
        return True
    raise usage_error(f"{plan.described()} without a task head, so there is no loss to differentiate; give a"
                      " classifier or a language model.")


def _is_default_directory(plan: ModelPlan) -> bool:
    try:
        return plan.checkpoint.directory.resolve() == preflight._default_model_directory().resolve()
    except Exception:  # noqa: BLE001 - the default model's package may be missing: then it is not the default
        return False


def _label_indices(plan: ModelPlan, examples: list, path: Path, default_head: bool) -> list[int]:
    if plan.facts.decision == "token" and not default_head:
        raise usage_error(f"--input: {path.name} has labels but {plan.described()} (a language model); drop the"
                          " labels: its loss is the next-token loss.")
    known = plan.labels() if not default_head else preflight.default_labels()
    return [int(index) for index in preflight.check_labels(examples, known, path) if index is not None]


def _prune(loaded: Any, mask: Any, prune_to: str, force: bool, store: str | None = None) -> str:
    """Write the pruned model and its tokenizer into `prune_to` (staged beside it, then renamed); return what was
    done. A BERT or RoBERTa of a class `store.py` maps is stored with its heads removed plus its modeling file,
    unless store is "zeroed"; every other model as `prune_heads` leaves it (removed natively, or zeroed)."""
    from interpret.heads.store import removed_model, save_removed, storable
    from interpret.heads.surgery import prune_heads

    if loaded.head is not None and not hasattr(loaded.model, "save_pretrained"):
        raise usage_error("--prune-to: this model cannot be saved with save_pretrained.")
    store_removed = store == "removed" or (store is None and storable(loaded.model))
    pruned = removed_model(loaded.model, mask) if store_removed else prune_heads(loaded.model, mask)
    target = Path(prune_to).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        if store_removed:
            save_removed(pruned, staging)
        else:
            pruned.model.save_pretrained(staging)
        if loaded.tokenizer is not None and hasattr(loaded.tokenizer, "save_pretrained"):
            loaded.tokenizer.save_pretrained(staging)
        (staging / MARKER).write_text(_MARKER_TEXT, encoding="utf-8")
        if target.exists() and force:
            shutil.rmtree(target)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    off = int((mask == 0).sum())
    hint = ""
    if not pruned.removed and storable(loaded.model):
        hint = "; --store removed stores them removed (per-layer head counts, loads with trust_remote_code=True)"
    return (f"{prune_to}: {off} of {mask.numel()} heads pruned; parameters {pruned.parameters_before:,} →"
            f" {pruned.parameters_after:,}; {pruned.note}{hint}")


def summary_lines(study: Any, input_name: str, report: Path, pruned: str | None, cost: Any = None) -> list[str]:
    """Return the summary printed on stdout."""
    from interpret.heads.importance import ranked

    top = ", ".join(f"L{layer}H{head}" for layer, head, _ in ranked(study.scores)[:5])
    rows = [
        ("mode", study.mode),
        ("examples", f"{study.examples} ({study.tokens} tokens)"),
        (f"unpruned {study.metric}", f"{study.least.original:.4g}"),
        ("prunable", f"{study.least.pruned_passing} of {study.least.heads} heads, least important first"
                     f" (most important first: {study.most.pruned_passing})"),
        ("most important", top),
        ("report", str(report)),
    ]
    if cost is not None:
        ran = f"{len(study.least.points) - 1} + {len(study.most.points) - 1} steps run"
        rows.insert(4, ("estimated cost", f"{cost.describe()}; {ran}"))
    if pruned is not None:
        rows.append(("pruned model", pruned))
    width = max(len(label) for label, _ in rows)
    return [f"heads of {input_name}"] + [f"  {label:<{width}}  {value}" for label, value in rows]
