"""`interpret evaluate`: the checks chosen with `--checks` — `erasers`, each method's ERASER faithfulness
metrics against random rankings on the given texts; `sanity`, the model-parameter randomisation check (Adebayo
et al. 2018) on them, too costly for every report; `tasks`, the known-answer task suite on the reference
models — each with a verdict per method and the numbers. Every option is checked before any model loads."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from interpret.cli import preflight, prerun
from interpret.cli.options import check_texts, model_options, progress_option, verbosity_options
from interpret.cli.output import say, usage_error
from interpret.cli.preflight import Source
from interpret.errors import suggest
from interpret.reading.datasets import pair_texts, text_inputs

CHECKS = ("erasers", "sanity", "tasks")


@click.command()
@model_options
@click.option("--text", "texts", multiple=True, help="Text to evaluate on (repeatable).")
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A .jsonl or .csv file with a text column.")
@click.option("-a", "--analyzer", "analyzer_names", multiple=True, metavar="NAME",
              help="Analyzer to evaluate (repeatable; each must declare a readout; default: the default set's).")
@click.option("--checks", default="erasers", show_default=True, metavar="LIST",
              help="Comma-separated checks: erasers (faithfulness against random, on the texts), sanity (the"
                   " model-randomisation check, on the texts; costly), tasks (the known-answer suite on the"
                   " reference models).")
@click.option("--removal", type=click.Choice(["delete", "mask", "zero"]), default=None,
              help="How the erasers check removes tokens (default: delete).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="Seed for any randomness.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="How to write the outcome.")
@click.option("-o", "--output", default="-", metavar="PATH", help="Where to write the outcome ('-': stdout).")
@verbosity_options
@progress_option
def evaluate(
    model: str | None, device: str, dtype: str | None, max_length: int | None, allow_pickle: bool,
    allow_missing_weights: bool, texts: tuple[str, ...], input_file: Path | None, analyzer_names: tuple[str, ...], checks: str,
    removal: str | None, seed: int, fmt: str, output: str, quiet: bool, verbose: bool,
) -> None:
    """Check how faithful each method is: ERASER metrics, the randomisation sanity check, known-answer tasks."""
    from interpret.cli.common import json_text, load_model, setup_logging, stages

    setup_logging(quiet, verbose)
    chosen = parse_checks(checks)
    on_texts = [check for check in chosen if check != "tasks"]
    if not on_texts and (texts or input_file or model):
        raise usage_error("--checks tasks runs on the reference task models; drop --text/--input/--model, or add"
                          " erasers or sanity to --checks.")
    if on_texts and bool(texts) == bool(input_file):
        raise usage_error(f"--checks {','.join(on_texts)} runs on texts: give --text TEXT or --input FILE (exactly one"
                          " of them), or run --checks tasks.")
    if removal is not None and "erasers" not in chosen:
        raise usage_error("--removal applies to the erasers check; add erasers to --checks, or drop --removal.")
    if output != "-":
        preflight.check_output_file(output, example=f"evaluate.{'json' if fmt == 'json' else 'txt'}")
    names = preflight.check_analyzer_names(analyzer_names or preflight.default_analyzers())
    if on_texts:  # the texts against the model's config first, before the analyzers import torch
        examples = [] if texts else preflight.check_dataset(input_file).examples
        given = check_texts(texts, "--text") if texts else [example.text for example in examples]
        pairs = pair_texts(examples)
        if pairs is not None and "sanity" in chosen:
            raise usage_error(f"--checks sanity runs on single texts, and {input_file.name} holds text pairs (a text_pair"
                              " column); run --checks erasers on it, or give single texts.")
        inputs = text_inputs(given, pairs)
        plan = preflight.plan_model(model, allow_pickle)
        source = Source("--text") if texts else Source(input_file.name, tuple(example.row for example in examples))
        preflight.check_text_sizes(given, plan, source, pairs)
    classes = prerun.check_analyzers_load(names, {})
    names = [cls.name for cls in classes if "readout" in cls.provides]
    if not names:
        raise usage_error("none of the analyzers declares a readout, so there is no ranking to evaluate; name one with -a.")
    data: dict[str, Any] = {"checks": chosen}
    if on_texts:
        prerun.check_device(device)
        prerun.check_adapter(plan)
    with stages(quiet) as stage:
        if on_texts:
            stage("load model", 1, "model")
            loaded = load_model(model, device, dtype, allow_pickle, allow_missing_weights)
            data["model"] = loaded.model_id
        if "erasers" in chosen:
            from interpret.analysis.run import required_names
            from interpret.pipeline import Plan, run_plan
            from interpret.request import EvidenceOptions

            hooks = tuple(dict.fromkeys(["*attn.hook_pattern", *required_names(names)]))
            run = Plan(dict.fromkeys(names, "full"), {}, hooks, head=loaded.head, seed=seed, max_length=max_length,
                       evidence=EvidenceOptions(removal=removal))
            data["erasers"] = run_plan(run, loaded.model, loaded.tokenizer, inputs, progress=stage).measured.to_dict()
        if "sanity" in chosen:
            from interpret.evidence.sanity import cascading_randomisation

            sanity = cascading_randomisation(
                loaded.model, loaded.tokenizer, inputs, names, head=loaded.head, seed=seed, max_length=max_length,
                progress=stage,
            )
            data["sanity"] = sanity.to_dict()
        if "tasks" in chosen:
            from interpret.evidence.suite import run_suite

            rows = run_suite(names, seed=seed, progress=stage)
            data["tasks"] = [{k: _finite(v) for k, v in vars(row).items()} for row in rows]
    text = json_text(data) if fmt == "json" else "\n".join(_lines(data))
    if output == "-":
        say(text)
    else:
        from interpret.files.atomic import write_atomically

        write_atomically(Path(output), text + "\n")
        say(f"wrote {output}")


def parse_checks(value: str) -> list[str]:
    """Return the checks `--checks erasers,sanity` names, in CHECKS' order; a usage error for an empty item, an
    unknown name (with a close match) or a repeat."""
    names = [part.strip() for part in value.split(",")]
    for position, name in enumerate(names):
        if not name:
            raise usage_error(f"--checks {value!r} has an empty item; give comma-separated checks, e.g. --checks erasers,sanity.")
        if name not in CHECKS:
            raise usage_error(f"--checks: {name!r} is not a check;{suggest(name, CHECKS)} choose from {', '.join(CHECKS)}.")
        if name in names[:position]:
            raise usage_error(f"--checks {value!r} names {name} twice; give each check once.")
    return [check for check in CHECKS if check in names]


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _number(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}"


def _lines(data: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if "erasers" in data:
        lines += _eraser_lines(data["erasers"])
    if "sanity" in data:
        lines += _sanity_lines(data["sanity"])
    if "tasks" in data:
        lines.append(f"{'task':<11} {'method':<22} {'recovery':>8} {'comp':>7} {'suff':>7} {'area':>7} {'s/example':>9}")
        for row in data["tasks"]:
            lines.append(
                f"{row['task']:<11} {row['method']:<22} {_number(row['recovery']):>8} {_number(row['comprehensiveness']):>7}"
                f" {_number(row['sufficiency']):>7} {_number(row['area']):>7} {row['seconds_per_example']:>9.4f}"
                + (f"  (refused: {row['failed']})" if row.get("failed") else "")
            )
    return lines


def _eraser_lines(evidence: dict[str, Any]) -> list[str]:
    """The metrics per method and random, then a verdict per method: on how many texts it beat random
    (`Evidence.better_than_random`: comp − suff above random's mean by more than random's spread)."""
    lines = [f"faithfulness on {len(evidence['candidates'])} text(s), removal {evidence['removal']}:",
             f"{'method':<22} {'comp':>7} {'suff':>7} {'area':>7}"]
    for method in [*evidence["methods"], evidence["random"]]:
        means = [_mean(method[key]) for key in ("comprehensiveness", "sufficiency", "area")]
        lines.append(f"{method['method']:<22} " + " ".join(f"{_number(v):>7}" for v in means))
    random = {key: _number(_mean(evidence["random"][key])) for key in ("comprehensiveness", "sufficiency")}
    for method in evidence["methods"]:
        wins, total = sum(evidence["better_than_random"][method["method"]]), len(evidence["candidates"])
        verdict = ("better than random" if wins == total else "not better than random" if wins == 0
                   else "better than random on some texts")
        lines.append(f"erasers verdict: {method['method']}: {verdict} ({wins} of {total} texts; comp"
                     f" {_number(_mean(method['comprehensiveness']))} vs random {random['comprehensiveness']}, suff"
                     f" {_number(_mean(method['sufficiency']))} vs random {random['sufficiency']})")
    return lines


def _sanity_lines(sanity: dict[str, Any]) -> list[str]:
    """The ρ per method and step, then a verdict per method (`SanityResult.passed`)."""
    from interpret.evidence.sanity import PASS_BELOW, RANDOM

    lines = ["sanity check (Spearman ρ with the original explanation; blocks re-initialised top down):"]
    used: dict[str, int] = {}
    for scheme in sanity.get("schemes", []):
        for name, count in scheme.items():
            used[name] = used.get(name, 0) + count
    if used:
        lines.append("re-initialised with " + ", ".join(f"{name} ({count} tensors)" for name, count in used.items()))
    lines.append(f"{'method':<22} " + " ".join(f"{step:>12}" for step in sanity["steps"]))
    for name, values in sanity["methods"].items():
        lines.append(f"{name:<22} " + " ".join(f"{_number(v):>12}" for v in values["mean"]))
    for name, values in sanity["methods"].items():
        if name != RANDOM:
            verdict = {True: "passed", False: "failed", None: "no verdict"}[values["passed"]]
            lines.append(f"sanity verdict: {name}: {verdict} (ρ {_number(values['mean'][-1])} with every block"
                         f" re-initialised; passes below {PASS_BELOW})")
    return lines


def _mean(values: list[Any]) -> float | None:
    finite = [v for v in values if v is not None]
    return sum(finite) / len(finite) if finite else None
