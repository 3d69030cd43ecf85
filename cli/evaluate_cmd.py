"""`interpret evaluate`: the checks too costly for every report — the model-parameter randomisation sanity check
(Adebayo et al. 2018) on the given texts, with each method's faithfulness metrics, or the known-answer task
suite (`--tasks`) on the reference models. Every option is checked before any model loads."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from interpret.cli import preflight, prerun
from interpret.cli.budget import Source
from interpret.cli.options import check_texts, model_options, progress_option, verbosity_options
from interpret.cli.output import say, usage_error

SHORT_HELP = "Check how faithful each method is: the randomisation sanity check, or the known-answer task suite."


@click.command(short_help=SHORT_HELP)
@model_options
@click.option("--text", "texts", multiple=True, help="Text to evaluate on (repeatable).")
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A .jsonl or .csv file with a text column.")
@click.option("-a", "--analyzer", "analyzer_names", multiple=True, metavar="NAME",
              help="Analyzer to evaluate (repeatable; each must declare a readout; default: the default set's).")
@click.option("--tasks", is_flag=True, help="Run the known-answer task suite on the reference models instead.")
@click.option("--removal", type=click.Choice(["delete", "mask", "zero"]), default=None,
              help="How tokens are removed for the faithfulness metrics (default: delete).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="Seed for any randomness.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="How to write the outcome.")
@click.option("-o", "--output", default="-", metavar="PATH", help="Where to write the outcome ('-': stdout).")
@verbosity_options
@progress_option
def evaluate(
    model: str | None, device: str, dtype: str | None, max_length: int | None, allow_pickle: bool,
    allow_missing_weights: bool, texts: tuple[str, ...], input_file: Path | None, analyzer_names: tuple[str, ...], tasks: bool,
    removal: str | None, seed: int, fmt: str, output: str, quiet: bool, verbose: bool,
) -> None:
    """Check how faithful each method is: the randomisation sanity check, or the known-answer task suite."""
    from interpret.cli.common import json_text, setup_logging

    setup_logging(quiet, verbose)
    if tasks and (texts or input_file or model):
        raise usage_error("--tasks runs on the reference task models; drop --text/--input/--model, or drop --tasks.")
    if not tasks and bool(texts) == bool(input_file):
        raise usage_error("give the texts as --text TEXT or --input FILE (exactly one of them), or run --tasks.")
    if tasks and removal is not None:
        raise usage_error("--removal applies to --text/--input; the task suite deletes tokens. Drop --removal.")
    if output != "-":
        preflight.check_output_file(output, example=f"evaluate.{'json' if fmt == 'json' else 'txt'}")
    names = preflight.check_analyzer_names(analyzer_names or preflight.default_analyzers())
    if not tasks:  # the texts against the model's config first, before the analyzers import torch
        inputs = check_texts(texts, "--text") if texts else [e.text for e in preflight.check_input_file(input_file)]
        plan = preflight.plan_model(model, allow_pickle)
        preflight.check_text_sizes(inputs, plan, Source("--text") if texts else Source(input_file.name, tuple(range(len(inputs)))))
    classes = prerun.check_analyzers_load(names, {})
    names = [cls.name for cls in classes if "readout" in cls.provides]
    if not names:
        raise usage_error("none of the analyzers declares a readout, so there is no ranking to evaluate; name one with -a.")
    if tasks:
        data = _tasks(names, seed, quiet)
    else:
        prerun.check_device(device)
        prerun.check_adapter(plan)
        from interpret.cli.common import stages

        with stages(quiet) as stage:
            data = _sanity(model, device, dtype, allow_pickle, allow_missing_weights, inputs, names, removal, seed,
                           max_length, stage)
    text = json_text(data) if fmt == "json" else "\n".join(_lines(data))
    if output == "-":
        say(text)
    else:
        from interpret.atomic import write_atomically

        write_atomically(Path(output), text + "\n")
        say(f"wrote {output}")


def _tasks(names: list[str], seed: int, quiet: bool) -> dict[str, Any]:
    from interpret.cli.common import stages
    from interpret.evidence.suite import run_suite

    with stages(quiet) as stage:
        rows = run_suite(names, seed=seed, progress=stage)
    return {"kind": "tasks", "rows": [{k: _finite(v) for k, v in vars(row).items()} for row in rows]}


def _sanity(
    model: str | None, device: str, dtype: str | None, allow_pickle: bool, allow_missing_weights: bool, texts: list[str],
    names: list[str], removal: str | None, seed: int, max_length: int | None, stage: Any,
) -> dict[str, Any]:
    from interpret.analyze import analyze
    from interpret.analyze.run import required_names, run_context
    from interpret.cli.common import load_model
    from interpret.collect import collect
    from interpret.decision import TargetRequest, decide
    from interpret.evidence import evaluate_evidence
    from interpret.evidence.sanity import cascading_randomisation

    stage("load model", 1, "model")
    loaded = load_model(model, device, dtype, allow_pickle, allow_missing_weights)
    hooks = list(dict.fromkeys(["*attn.hook_pattern", *required_names(names)]))
    trace = collect(loaded.model, loaded.tokenizer, texts, names=hooks, max_length=max_length)
    targets = [d.target for d in decide(loaded.model, trace, loaded.tokenizer, TargetRequest(), loaded.head)]
    context = run_context(trace, loaded.model, loaded.tokenizer, head=loaded.head, targets=targets, seed=seed)
    advance, results = stage(f"analyze ({len(names)} analyzers × {len(texts)} examples)", len(names) * len(texts),
                             "example"), []
    for name in names:
        results.append(analyze(trace, name, context=context))
        advance(len(texts))
    evidence = evaluate_evidence(trace, results, context, removal=removal, progress=stage)
    sanity = cascading_randomisation(
        loaded.model, loaded.tokenizer, texts, names, head=loaded.head, seed=seed, max_length=max_length, progress=stage
    )
    return {"kind": "sanity", "model": loaded.model_id, "evidence": evidence.to_dict(), "sanity": sanity.to_dict()}


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _number(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}"


def _lines(data: dict[str, Any]) -> list[str]:
    if data["kind"] == "tasks":
        header = f"{'task':<11} {'method':<22} {'recovery':>8} {'comp':>7} {'suff':>7} {'area':>7} {'s/example':>9}"
        lines = [header]
        for row in data["rows"]:
            lines.append(
                f"{row['task']:<11} {row['method']:<22} {_number(row['recovery']):>8} {_number(row['comprehensiveness']):>7}"
                f" {_number(row['sufficiency']):>7} {_number(row['area']):>7} {row['seconds_per_example']:>9.4f}"
                + (f"  (refused: {row['failed']})" if row.get("failed") else "")
            )
        return lines
    evidence, sanity = data["evidence"], data["sanity"]
    lines = [f"faithfulness on {len(evidence['candidates'])} text(s), removal {evidence['removal']}:"]
    lines.append(f"{'method':<22} {'comp':>7} {'suff':>7} {'area':>7}")
    for method in [*evidence["methods"], evidence["random"]]:
        means = [_mean(method[key]) for key in ("comprehensiveness", "sufficiency", "area")]
        lines.append(f"{method['method']:<22} " + " ".join(f"{_number(v):>7}" for v in means))
    lines.append("sanity check (Spearman ρ with the original explanation; blocks re-initialised top down):")
    used: dict[str, int] = {}
    for scheme in sanity.get("schemes", []):
        for name, count in scheme.items():
            used[name] = used.get(name, 0) + count
    if used:
        lines.append("re-initialised with " + ", ".join(f"{name} ({count} tensors)" for name, count in used.items()))
    lines.append(f"{'method':<22} " + " ".join(f"{step:>12}" for step in sanity["steps"]))
    for name, values in sanity["methods"].items():
        lines.append(f"{name:<22} " + " ".join(f"{_number(v):>12}" for v in values["mean"]))
    return lines


def _mean(values: list[Any]) -> float | None:
    finite = [v for v in values if v is not None]
    return sum(finite) / len(finite) if finite else None
