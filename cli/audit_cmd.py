"""`interpret audit`: run analyzers over a dataset in resumable batches and summarise.

This module owns the command's options and their checks, all made before the model loads (the input file,
the output directory, analyzers and their parameters, the model's kind, gold labels against the model's
classes by `interpret.decision.labels`' rule, every example's length); `interpret.audit.run_audit` does the audit. A
SIGTERM stops it as Ctrl-C does: the finished batches are stored, the command exits 130 with one line, and
running it again resumes.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from interpret.cli import preflight, prerun
from interpret.cli.budget import estimated_lengths, exact_lengths
from interpret.cli.options import (
    analyzer_options, built, checked_streamed, model_options, parse_size, progress_option, streaming_names,
    verbosity_options,
)
from interpret.cli.output import say, usage_error
from interpret.cli.preflight import ModelPlan, Source
from interpret.cli.ray_options import actor_gpus, check_engine, engine_options, ray_engine
from interpret.estimate.audit import AuditWork, BatchEstimate, estimate_audit, largest_batch_size
from interpret.estimate.memory import CAPTURE_BUDGET, default_memory, human_bytes, pattern_bytes
from interpret.estimate.report import GradientPass
from interpret.reading.datasets import pair_texts
from interpret.request import DEFAULT_DRIVER_ROWS, AuditOptions, EvidenceOptions


@click.command()
@model_options
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A .jsonl or .csv file with a text column (optional label and id).")
@analyzer_options
@click.option("--batch-size", type=click.IntRange(min=1, max=4096), default=8, show_default=True,
              help="Examples per batch; each finished batch is saved, so a rerun resumes after the last one.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="Seed for any randomness.")
@click.option("--fresh", is_flag=True, help="Discard finished batches in the output directory and start over.")
@click.option("--skip-invalid", is_flag=True,
              help="Skip rows whose text is missing, empty or whitespace only (counted, and their lines listed in"
                   " skipped.csv) instead of refusing the file.")
@click.option("--target", type=click.Choice(["prediction", "gold"]), default="prediction", show_default=True,
              help="Explain each example's prediction, or its gold label (needs a label column).")
@click.option("-o", "--output", default=None, metavar="DIR",
              help="Output directory (default: reports/<input-stem>-audit/).")
@click.option("--evidence", is_flag=True,
              help="Also measure each method's faithfulness (evidence.csv: bootstrap intervals, methods ranked).")
@click.option("--removal", type=click.Choice(["delete", "mask", "zero"]), default=None,
              help="How evidence and drivers remove a token: delete it, replace it with the mask (or pad) token, or"
                   " zero its embedding (default: delete).")
@click.option("--drivers", "n_drivers", type=click.IntRange(min=0), default=20, show_default=True, metavar="K",
              help="Re-run the model without each of the K tokens (and K words) of highest mean |score| under the"
                   " lead method in the rows holding it (see --driver-rows): flip rates in drivers.csv, flipped"
                   " rows in counterfactuals.csv; costs 2 forward passes per row re-run (K up to 32). 0: off.")
@click.option("--driver-rows", "driver_rows", type=click.IntRange(min=0), default=DEFAULT_DRIVER_ROWS, show_default=True,
              metavar="N", help="Re-run each driver in at most N of the rows holding it, a sample seeded by --seed"
                                " (its flip rate and interval are the sample's). 0: every row holding it.")
@click.option("--slice-by", default=None, metavar="COLUMN",
              help="A column of the input: accuracy and evidence per value of it (slices.csv).")
@click.option("--max-memory", default=None, metavar="SIZE",
              help="Largest estimated peak memory of one batch, e.g. 8GB (default: 80% of this machine's memory, or"
                   " of the GPU's); a larger batch is refused before the model loads, naming a batch size that fits.")
@click.option("--streaming", type=click.Choice(["on", "off"]), default="off", show_default=True,
              help="Run each analyzer's streamed computation, no attention pattern captured (long examples).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              help="How to print the outcome (stdout).")
@engine_options
@verbosity_options
@progress_option
def audit(
    model: str | None, device: str, dtype: str | None, max_length: int | None, allow_pickle: bool,
    allow_missing_weights: bool, input_file: Path, analyzer_names: tuple[str, ...], sets: tuple[str, ...],
    batch_size: int, seed: int, fresh: bool, skip_invalid: bool, target: str, output: str | None, evidence: bool,
    removal: str | None, n_drivers: int, driver_rows: int, slice_by: str | None, max_memory: str | None, streaming: str,
    fmt: str, engine: str, address: str | None, num_gpus_per_worker: float | None, workers: int | None, quiet: bool,
    verbose: bool,
) -> None:
    """Audit every example of a dataset; re-running resumes where an interrupted run stopped."""
    from interpret.cli.common import json_text, load_model, log, setup_logging

    setup_logging(quiet, verbose)
    check_engine(engine, address, num_gpus_per_worker, workers)
    dataset = preflight.check_dataset(input_file, skip_empty=skip_invalid,
                                      empty_hint=" (or skip such rows: --skip-invalid)")
    examples = dataset.examples
    if dataset.skipped:
        more = ", ..." if len(dataset.skipped) > 10 else ""
        lines = ", ".join(str(entry.line) for entry in dataset.skipped[:10]) + more
        log.warning(f"skipped {len(dataset.skipped)} rows of {input_file.name} with an empty text (lines {lines});"
                    " the output's skipped.csv lists every one")
    if slice_by is not None:
        _check_column(input_file, slice_by)
    evidence_options = built(EvidenceOptions, evidence, removal)
    memory_limit = parse_size(max_memory, "--max-memory")
    given = analyzer_names or preflight.default_analyzers()
    names, streamed = streaming_names(given)  # an old streaming analyzer's name: its twin, streamed
    names = preflight.check_analyzer_names(names)
    params = preflight.parse_sets(sets, names)
    out_dir = output or str(Path("reports") / f"{input_file.stem}-audit")
    if out_dir == "-":
        raise usage_error("-o -: an audit writes a directory of tables; give a directory path.")
    preflight.check_output_dir(out_dir)
    _check_not_locked(out_dir)
    if target == "gold":
        unlabelled = next((example for example in examples if example.label is None), None)
        if unlabelled is not None:
            raise usage_error(f"--target gold: {unlabelled.place(input_file.name)} has no label; give every"
                              " example a label, or explain predictions (--target prediction).")
    plan = preflight.plan_model(model, allow_pickle)
    options = built(AuditOptions, target=target, max_length=max_length, streaming=streaming, evidence=evidence_options,
                    drivers=n_drivers, driver_rows=driver_rows, slice_by=slice_by, seed=seed, fresh=fresh, model_dir=plan.checkpoint.directory,
                    input_file=input_file, skipped=dataset.skipped if skip_invalid else None)
    texts = [example.text for example in examples]
    pairs = pair_texts(examples)
    source = Source(input_file.name, tuple(example.row for example in examples))
    preflight.check_text_sizes(texts, plan, source, pairs)  # before anything reads a text in full
    _check_model(plan, target)
    if plan.facts.decision == "class" and not plan.facts.one_output:  # a score's labels name no class: kept as given
        preflight.check_labels(examples, plan.labels(), input_file)
    lengths = estimated_lengths(plan, texts, max_length, source, pairs)
    classes = prerun.check_analyzers_load(names, params)
    if streaming == "on":
        streamed = checked_streamed(names, "--streaming on", leave_out=not analyzer_names)
    patterns = _captures_patterns(names, streamed)
    if lengths is not None:
        _check_capture(plan, lengths, patterns)
    silent = [cls.name for cls in classes if not cls.provides]
    if silent:
        raise usage_error(f"-a {silent[0]}: the analyzer declares neither a readout nor a head map, so the audit has"
                          " nothing to tabulate; run it with `interpret report`, or audit with another analyzer.")
    exact = exact_lengths(plan, texts, max_length, source, device, pairs)
    _check_capture(plan, exact, patterns)
    from interpret.audit.overlap import core_free

    cuda = prerun.on_cuda(device)
    gradients = tuple(GradientPass.of(cls.name in streamed, params.get(cls.name, {})) for cls in classes if cls.needs_model)
    # as interpret.audit.overlap runs, in the local engine only
    overlaps = engine == "local" and not gradients and not evidence_options.enabled and core_free(cuda)
    # CPU actors of a Ray cluster started here each run batches on this machine
    local_actors = engine == "ray" and address is None and actor_gpus(num_gpus_per_worker, address) == 0
    work = AuditWork(analyzers=len(names), patterns=patterns, evidence=evidence_options.enabled, gradients=gradients,
                     dtype=dtype, cuda=cuda, weight_bytes=plan.checkpoint.weight_bytes(), traces=2 if overlaps else 1,
                     host_workers=(workers or 1) if local_actors else 0)
    limit = memory_limit or default_memory(cuda)
    estimate = _check_memory(plan, exact, batch_size, work, limit)
    log.info("estimate: the largest batch, %d examples of %d tokens, peak memory about %s%s", estimate.rows,
             estimate.tokens, human_bytes(estimate.memory_bytes), f" (limit {human_bytes(limit)})" if limit else "")

    from interpret.audit import run_audit
    from interpret.cli.common import stages

    loaded = load_model(model, device, dtype, allow_pickle, allow_missing_weights)
    with stages(quiet) as stage, _terminate_as_interrupt():
        outcome = run_audit(
            loaded.model, loaded.tokenizer, examples, out_dir, analyzers=list(dict.fromkeys(given)), params=params,
            batch_size=batch_size, head=loaded.head, progress=stage, options=replace(
                options, model_id=loaded.model_id, engine=None if engine == "local" else ray_engine(
                    model, device, dtype, allow_pickle, address, num_gpus_per_worker, workers, allow_missing_weights)),
        )
    if fmt == "json":
        say(json_text({
            "output": str(outcome.out_dir), "examples": outcome.n_examples, "computed": outcome.n_computed,
            "resumed": outcome.n_resumed, "skipped": outcome.n_skipped, "accuracy": outcome.accuracy,
            "drivers_seconds": outcome.drivers_seconds, "files": [str(path) for path in outcome.paths],
        }))
        return
    for line in audit_table(outcome, input_file.name):
        say(line)


def audit_table(outcome: Any, input_name: str) -> list[str]:
    """Return an `interpret.audit.AuditResult` as aligned, rounded lines (no Python lists or long floats)."""
    accuracy = outcome.accuracy
    driven = any(Path(path).name == "drivers.csv" for path in outcome.findings)
    rows = [
        ("examples", f"{outcome.n_examples} ({outcome.n_computed} computed, {outcome.n_resumed} resumed)"),
        *((("skipped", f"{outcome.n_skipped} rows with an empty text (skipped.csv)"),) if outcome.n_skipped else ()),
        ("accuracy", "no gold labels" if accuracy is None else f"{100 * accuracy:.1f}% of labelled examples"),
        ("time", f"{outcome.wall_seconds:.1f} s" + (f" (drivers {outcome.drivers_seconds:.1f} s)" if driven else "")),
        ("output", str(outcome.out_dir)),
        ("summary", str(outcome.summary)),
        ("tables", ", ".join(Path(path).name for path in outcome.paths if Path(path).suffix in (".parquet", ".csv"))),
    ]
    width = max(len(label) for label, _ in rows)
    return [f"audit of {input_name}"] + [f"  {label:<{width}}  {value}" for label, value in rows]


def _check_column(input_file: Path, column: str) -> None:
    """Refuse (exit 2) a --slice-by column no row of the input has, naming the columns it has."""
    from interpret.reading.datasets import read_column
    from interpret.errors import InterpretError

    try:
        read_column(input_file, column)
    except InterpretError as err:
        raise usage_error(f"--slice-by: {err}") from None


def _check_not_locked(out_dir: str) -> None:
    """Refuse (exit 1) at once, before the model loads, when another audit holds the output directory; run_audit
    takes the lock itself for the run, so a holder that appears in between is still refused there."""
    directory = Path(out_dir).expanduser()
    if (directory / ".audit.lock").is_file():
        from interpret.audit.lock import AuditLock  # imports the audit package, torch included: only when needed

        AuditLock(directory).probe()


def _check_model(plan: ModelPlan, target: str) -> None:
    facts = plan.facts
    if facts.kind not in ("encoder", "decoder"):
        raise usage_error(f"{plan.described()}; the audit reads one text per example, so audit an encoder or"
                          " decoder model.")
    if target == "gold" and facts.one_output:
        raise usage_error(f"--target gold needs classes; --model {plan.display_name} has one output (a score), so explain"
                          " its predictions instead.")
    if target == "gold" and facts.decision not in ("class", None):
        raise usage_error(f"--target gold needs a classifier; --model {plan.display_name} is a"
                          f" {facts.architecture or 'model without a task head'}, so explain predictions instead.")


def _captures_patterns(names: list[str], streamed: list[str]) -> bool:
    """Return whether the audit of these analyzers (those in `streamed` run streamed) captures every [layer, head,
    n, n] pattern: when one reads them, or when none reads anything (the audit then captures the patterns, as
    `run_audit` does)."""
    from interpret.analysis import required_names
    from interpret.analysis.strategy import needs_patterns

    requires = required_names({name: "streamed" if name in streamed else "full" for name in names})
    return not requires or needs_patterns(requires)


def _check_capture(plan: ModelPlan, lengths: list[int], patterns: bool) -> None:
    """Refuse (exit 2) examples whose [layer, head, n, n] patterns pass the per-example budget, naming
    --streaming on, whose analyzers hold O(n·d) instead; nothing to refuse when no analyzer reads patterns."""
    if not patterns:
        return
    facts = plan.facts
    per_example = pattern_bytes(facts.n_layers * facts.n_heads, max(lengths))
    if per_example > CAPTURE_BUDGET:
        raise usage_error(
            f"the longest example would capture {human_bytes(per_example)} of attention, over the"
            f" {human_bytes(CAPTURE_BUDGET)} per-example budget; truncate the examples (--max-length), or audit"
            " with --streaming on, which holds no pattern (rollout, attention_x_gradient, gradient_weighted_rollout and"
            " attention_entropy stream)."
        )


def _check_memory(plan: ModelPlan, lengths: list[int], batch_size: int, work: AuditWork, limit: int | None
                  ) -> BatchEstimate:
    """Return the estimate of the audit's largest batch (`interpret.estimate.audit`); refuse (exit 2) one over
    `limit` bytes, naming the batch size that fits and the other ways out."""
    estimate = estimate_audit(plan.facts, lengths, batch_size, work)
    if limit is None or estimate.memory_bytes <= limit:
        return estimate
    fits = largest_batch_size(plan.facts, lengths, batch_size, work, limit)
    parts = ", ".join(f"{name} {human_bytes(size)}" for name, size in estimate.parts.items() if size)
    ways = [f"lower --batch-size to {fits}"] if fits else []
    ways.append("truncate the examples (--max-length)")
    if work.patterns:
        ways.append("audit with --streaming on (no [head, n, n] pattern held)")
    raise usage_error(
        f"a batch of {estimate.rows} examples of {estimate.tokens} tokens would need about"
        f" {human_bytes(estimate.memory_bytes)} of memory ({parts}), over --max-memory {human_bytes(limit)};"
        f" {', '.join(ways)}, or raise --max-memory."
    )


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM (a scheduler's or `kill`'s stop) raises KeyboardInterrupt as Ctrl-C does, so the
    audit stores its finished batches and exits 130 with one line instead of dying without a word."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
