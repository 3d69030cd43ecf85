"""`interpret report`: explain a model's decision on a text (or the texts of a file) as an HTML or JSON report.

Order of work: every check the command line and its files allow runs first, in two steps — without torch
(options, input and output paths, analyzer names, the model's config, token counts from tokenizer.json, the
report's size and memory estimate) and then with it, still before the weights load (analyzer parameters,
the target against the model's labels or vocabulary, exact token counts). Only then does the model load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from interpret.cli import preflight, prerun
from interpret.cli.budget import check_budget, check_lengths, check_report_size
from interpret.cli.options import (
    analyzer_options, built, check_index_range, check_texts, checked_streamed, model_options, parse_indices, parse_size,
    progress_option, request_parts, streaming_names, verbosity_options,
)
from interpret.cli.output import say, usage_error
from interpret.cli.preflight import ModelPlan, Source
from interpret.estimate.facts import count_tokens
from interpret.estimate.memory import default_memory, human_bytes
from interpret.estimate.report import (
    DEFAULT_MAX_BYTES, GradientPass, ReportEstimate, estimate_report, streamed_estimate,
)
from interpret.reading.datasets import pair_texts, text_inputs
from interpret.request import Subject, View


@dataclass(frozen=True)
class _Inputs:
    """The texts to explain with what came with them: file ids and gold labels, where each text came from."""

    texts: list[str]
    ids: list[str | None] | None
    gold: list[str | None] | None
    stem: str
    source: Source
    examples: list | None = None  # as read from --input (interpret.reading.datasets.Example)
    pairs: list[str] | None = None  # each text's pair (--text-pair, or the file's text_pair column)



@click.command()
@model_options
@click.option("--text", "texts", multiple=True, help="Text to explain (repeatable: one report over all texts).")
@click.option("--text-pair", "text_pairs", multiple=True,
              help="The second text of a text pair, one per --text (an NLI hypothesis, a cross-encoder's passage):"
                   " each pair is read as the model's tokenizer reads it.")
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A .jsonl or .csv file with a text column (optional text_pair, label and id).")
@click.option("--decoder-text", "decoder_texts", multiple=True,
              help="Decoder input of an encoder-decoder model (one per text), e.g. the output being explained.")
@analyzer_options
@click.option("--target", "targets", multiple=True,
              help="Class label or index (classifiers) or token or token id (language models); default: the prediction."
                   " Repeatable: the first is explained throughout, and every gradient or perturbation method also shows"
                   " each given class beside the prediction, side by side.")
@click.option("--contrast", default=None,
              help="Explain the target rather than this class or token (score = target − contrast).")
@click.option("--continuation", "continuations", multiple=True,
              help="A continuation of the text whose tokens a language model's explanation targets (one per text).")
@click.option("--generate", type=click.IntRange(min=1), default=None, metavar="N",
              help="Generate N tokens greedily after the text, then explain them (language models).")
@click.option("--layers", default=None, metavar="0,2,-1", help="Layers the attention views embed (default: all).")
@click.option("--heads", default=None, metavar="0,3", help="Heads the attention views embed (default: all).")
@click.option("--max-bytes", default=None, metavar="SIZE",
              help="Largest report to write, e.g. 50MB (default 20MB); larger reports are refused before the model runs.")
@click.option("--max-memory", default=None, metavar="SIZE",
              help="Largest estimated peak memory, e.g. 8GB (default: 80% of this machine's memory).")
@click.option("--streaming", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Streamed analyzers, no attention captured: auto when the capture would be over budget.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="Seed for any randomness.")
@click.option("-o", "--output", default=None, metavar="PATH",
              help="Output file, '-' for stdout (default: reports/<first-words>.html or .json).")
@click.option("--format", "fmt", type=click.Choice(["html", "json"]), default="html", show_default=True,
              help="Write the self-contained HTML page, or the report's data as JSON.")
@click.option("--evidence/--no-evidence", default=True, show_default=True,
              help="Re-run the model with tokens removed to show how faithful each method is, against random rankings.")
@click.option("--removal", type=click.Choice(["delete", "mask", "zero"]), default=None,
              help="How the evidence removes a token (default: delete, as ERASER does).")
@verbosity_options
@progress_option
def report(
    model: str | None, device: str, dtype: str | None, max_length: int | None, allow_pickle: bool,
    allow_missing_weights: bool, texts: tuple[str, ...], text_pairs: tuple[str, ...], input_file: Path | None, decoder_texts: tuple[str, ...], analyzer_names: tuple[str, ...],
    sets: tuple[str, ...], targets: tuple[str, ...], contrast: str | None, continuations: tuple[str, ...],
    generate: int | None, layers: str | None, heads: str | None, max_bytes: str | None, max_memory: str | None,
    streaming: str, seed: int, output: str | None, fmt: str, evidence: bool, removal: str | None, quiet: bool,
    verbose: bool,
) -> None:
    """Write a self-contained report explaining the model's decision on the input."""
    from interpret.cli.common import default_output, log, setup_logging

    setup_logging(quiet, verbose)
    # ---- the command line alone ----
    inputs = _inputs(texts, input_file, text_pairs)
    targets = tuple(dict.fromkeys(targets))
    target = targets[0] if targets else None
    _check_pairings(inputs, decoder_texts, continuations, targets, contrast, generate)
    if removal is not None and not evidence:
        raise usage_error("--removal says how the evidence removes tokens; drop --no-evidence, or drop --removal.")
    limits, evidence_options = request_parts(max_length, streaming, evidence, removal)
    compare = targets if (targets or contrast is not None) and not continuations and generate is None else None
    subject = built(Subject, target, contrast, inputs.gold, ids=inputs.ids, continuation=list(continuations) or None,
                    generate=generate, decoder_inputs=list(decoder_texts) or None, compare=compare)
    names, streamed = streaming_names(analyzer_names or preflight.default_analyzers())  # an old name: its twin's
    names = preflight.check_analyzer_names(names)
    params = preflight.parse_sets(sets, names)
    layer_list = parse_indices(layers, "--layers", "layer")
    head_list = parse_indices(heads, "--heads", "head")
    byte_limit = parse_size(max_bytes, "--max-bytes") or DEFAULT_MAX_BYTES
    memory_limit = parse_size(max_memory, "--max-memory") or default_memory()
    destination = output or str(default_output(inputs.stem, "." + fmt))
    preflight.check_output_file(destination, example=f"report.{fmt}")
    # ---- the model's config and the token counts, still without torch ----
    plan = preflight.plan_model(model, allow_pickle)
    preflight.check_text_sizes(inputs.texts, plan, inputs.source, inputs.pairs)  # before anything reads a text in full
    facts = plan.facts
    _check_model_kind(plan, decoder_texts, continuations, generate, target, contrast)
    if input_file is not None and inputs.examples and facts.decision == "class" and not facts.one_output:
        preflight.check_labels(inputs.examples, plan.labels(), input_file)
    layer_list = check_index_range(layer_list, facts.n_layers, "--layers", "layer")
    head_list = check_index_range(head_list, facts.n_heads, "--heads", "head")
    directory = plan.checkpoint.directory
    limit = plan.length_limit()
    counts = count_tokens(directory, inputs.texts, pairs=inputs.pairs)
    follow = count_tokens(directory, list(continuations), special=False) if continuations else None
    if generate is not None and facts.kind == "decoder":  # the generated tokens follow the text as a continuation
        follow = [generate] * len(inputs.texts)
    follow_option = "--continuation" if generate is None else f"--generate {generate}"

    def estimate_for(token_counts: list[int], continuation_counts: list[int] | None, cuda: bool,
                     gradient_passes: Sequence[GradientPass] = (), runs_model: bool = False) -> ReportEstimate:
        """gradient_passes: the streamed pass of each analyzer whose streamed computation runs the model;
        runs_model: an analyzer runs the model (its full computation's backward pass); both known once the
        analyzers load (the estimate before torch leaves them out)."""
        lengths = check_lengths(token_counts, limit, max_length, inputs.source, continuation_counts or (), follow_option)
        decoder = (count_tokens(directory, list(decoder_texts)) or []) if decoder_texts else []
        if generate is not None and facts.kind == "encoder-decoder":  # its start token and the generated tokens
            decoder = [1 + generate] * len(token_counts)
        estimate = estimate_report(
            facts, lengths, decoder_lengths=decoder, layers=len(layer_list) if layer_list else None,
            heads=len(head_list) if head_list else None, fmt=fmt, analyzers=len(names),
            weight_bytes=plan.checkpoint.weight_bytes(), dtype=dtype, cuda=cuda, evidence=evidence, gradients=runs_model,
        )
        if streaming == "on" or (streaming == "auto" and estimate.capture_bytes > limits.capture_bytes):
            gradients = max((each.bytes(facts, estimate.tokens, estimate.examples, facts.loaded_itemsize(dtype), cuda)
                             for each in gradient_passes), default=0)
            estimate = streamed_estimate(estimate, facts, len(names), fmt, gradients)
        check_budget(estimate, facts, fmt=fmt, max_bytes=byte_limit, max_memory=memory_limit)
        return estimate

    if counts is not None and (follow is not None or not continuations):  # no torch yet: the CUDA runtime comes next
        estimate_for(counts, follow, cuda=False)
    # ---- with torch, before the weights: analyzers' parameters, the target, exact token counts ----
    classes = prerun.check_analyzers_load(names, params)
    tokenizer = prerun.load_tokenizer(plan, device)
    prerun.check_targets(plan, tokenizer, target=target, contrast=contrast)
    for value in targets[1:]:  # shown side by side only: each against the model's labels, with no contrast
        prerun.check_targets(plan, tokenizer, target=value, contrast=None)
    exact = prerun.exact_counts(tokenizer, inputs.texts, pairs=inputs.pairs)
    exact_follow = prerun.exact_counts(tokenizer, list(continuations), special=False) if continuations else follow
    gradient_passes = [GradientPass.of(True, params.get(cls.name, {}))
                       for cls in classes if cls.needs_model and hasattr(cls, "streamed_requires")]
    estimate = estimate_for(exact, exact_follow, cuda=prerun.on_cuda(device), gradient_passes=gradient_passes,
                            runs_model=any(cls.needs_model for cls in classes))
    if estimate.view_values == 0 and estimate.layers == 0:  # streamed: a named analyzer needs a streamed computation
        why = "--streaming on" if streaming == "on" else "the capture would be over the budget"
        checked_streamed(names, why, leave_out=not analyzer_names)
    bound = f" (limit {human_bytes(memory_limit)})" if memory_limit else ""
    log.info(
        "estimate: report at least %s (limit %s), capture %s per example, peak memory about %s%s",
        human_bytes(estimate.output_bytes), human_bytes(byte_limit), human_bytes(estimate.capture_bytes),
        human_bytes(estimate.memory_bytes), bound,
    )
    given = list(dict.fromkeys(analyzer_names)) if streamed else names  # explain runs an old name's twin streamed
    # ---- every check passed: load the model, explain, print the decisions, check the real size, write ----
    from interpret.api import explain
    from interpret.cli.common import load_model, stages, write_json_stream, write_page
    from interpret.cli.decisions import decision_lines

    with stages(quiet) as stage:
        stage("load model", 1, "model")
        loaded = load_model(model, device, dtype, allow_pickle, allow_missing_weights)
        stage(f"capture ({len(inputs.texts)} examples)", 1, "pass")  # explain opens the stages after it
        result = explain(
            loaded.model, loaded.tokenizer, text_inputs(inputs.texts, inputs.pairs), given, params=params, target=subject, head=loaded.head,
            evidence=evidence_options, limits=limits, view=View(layer_list, head_list, model_id=loaded.model_id),
            seed=seed, progress=stage,
        )
    # The report itself may go to stdout ('-'): then stdout carries nothing else and these lines go to stderr.
    to_stdout = destination == "-"
    if not (to_stdout and quiet):
        for line in decision_lines(result.run.decisions, inputs.ids, loaded.tokenizer):
            say(line, err=to_stdout)
    check_report_size(result, fmt, byte_limit)
    if fmt == "json":
        write_json_stream(result.to_dict(), destination, byte_limit)
    else:
        write_page(result, destination)
    if not to_stdout:
        say(f"wrote {destination}")


def _inputs(texts: tuple[str, ...], input_file: Path | None, text_pairs: tuple[str, ...] = ()) -> _Inputs:
    from interpret.cli.common import slug

    if bool(texts) == bool(input_file):
        raise usage_error("give the input as --text TEXT or --input FILE (exactly one of them).")
    if text_pairs and not texts:
        raise usage_error(f"--text-pair pairs a --text; {input_file} gives its pairs in a text_pair column, so drop"
                          " --text-pair.")
    if texts:
        checked = check_texts(texts, "--text")
        if text_pairs and len(text_pairs) != len(checked):
            raise usage_error(f"{len(text_pairs)} --text-pair for {len(checked)} --text; give one --text-pair per --text.")
        pairs = check_texts(text_pairs, "--text-pair") if text_pairs else None
        return _Inputs(checked, None, None, slug(checked[0]), Source("--text"), pairs=pairs)
    assert input_file is not None
    examples = preflight.check_dataset(input_file).examples
    return _Inputs(
        [example.text for example in examples],
        [example.id for example in examples],
        [example.label for example in examples],
        input_file.stem,
        Source(input_file.name, tuple(example.row for example in examples)),
        examples,
        pair_texts(examples),
    )


def _check_pairings(
    inputs: _Inputs, decoder_texts: tuple[str, ...], continuations: tuple[str, ...], targets: tuple[str, ...],
    contrast: str | None, generate: int | None,
) -> None:
    """Refuse options that contradict each other or do not match the number of texts."""
    count = len(inputs.texts)
    for option, values in (("--decoder-text", decoder_texts), ("--continuation", continuations)):
        if values and len(values) != count:
            raise usage_error(f"{len(values)} {option} for {count} text{'s' if count != 1 else ''}; give one {option} per text.")
        check_texts(values, option)
    for option, value in (*(("--target", target) for target in targets), ("--contrast", contrast)):
        if value is not None:
            check_texts([value], option)
    if decoder_texts and generate is not None:
        raise usage_error("--generate writes the decoder's tokens itself; drop --decoder-text, or drop --generate.")
    if inputs.pairs is not None and (continuations or generate is not None):
        other = "--continuation" if continuations else "--generate"
        pairs = "--text-pair" if inputs.examples is None else "the text_pair column"
        raise usage_error(f"{other} continues a single text; drop {other}, or drop {pairs}.")
    if generate is not None and (continuations or targets):
        other = "--continuation" if continuations else "--target"
        raise usage_error(f"--generate explains the tokens it generates; drop {other}, or drop --generate.")
    if continuations and targets:
        raise usage_error("--continuation already names the tokens explained; drop --target, or drop --continuation.")
    if contrast is not None and targets and contrast == targets[0]:
        raise usage_error(f"--contrast {contrast!r} equals --target; contrast the target with another class or token.")


def _check_model_kind(
    plan: ModelPlan, decoder_texts: tuple[str, ...], continuations: tuple[str, ...], generate: int | None,
    target: str | None, contrast: str | None,
) -> None:
    """Refuse options the model's kind or decision (from its config) cannot take."""
    facts = plan.facts
    name = plan.display_name
    if facts.kind == "vision":
        raise usage_error(f"--model {name} is a vision model ({facts.model_type}); the command line explains texts,"
                          " so explain images with interpret.explain in Python.")
    if facts.kind == "encoder-decoder" and not decoder_texts and generate is None:
        raise usage_error(f"--model {name} is an encoder-decoder model; give its decoder input with --decoder-text"
                          " (one per text), e.g. the output being explained, or generate it with --generate N.")
    if facts.kind != "encoder-decoder" and decoder_texts:
        raise usage_error(f"--decoder-text is for encoder-decoder models; {plan.described()}, so drop it.")
    if contrast is not None and facts.one_output:
        raise usage_error(f"--contrast: --model {name} has one output (a score, e.g. a reranker's or a reward model's), so"
                          " there is no other class to contrast with; drop --contrast.")
    if (target is not None or contrast is not None) and facts.decision == "none":
        option = "--target" if target is not None else "--contrast"
        raise usage_error(
            f"{option}: --model {name} makes no decision to target (a bare {facts.architecture or 'model'} has no"
            f" classifier or language-model head); drop {option}, or give a model saved with a task head."
        )
    language = facts.decision == "token" and facts.kind in ("decoder", "encoder-decoder")
    if generate is not None and facts.decision is not None and not language:
        raise usage_error(f"--generate needs a language model that generates (a decoder); {plan.described()},"
                          " so drop --generate.")
    if continuations and facts.decision is not None and not (facts.decision == "token" and facts.kind == "decoder"):
        raise usage_error(f"--continuation needs a decoder language model; {plan.described()}, so drop --continuation.")
