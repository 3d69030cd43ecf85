"""`run_audit`: run analyzers over a dataset in fixed batches, storing finished batches in parts, resumable.

Batch i always holds examples[i·batch_size : (i+1)·batch_size], so a resumed audit computes every batch
exactly as an uninterrupted one would, and the final tables (concatenated from the parts, with fixed dtypes
and sorted rows) are byte-identical whatever parts the batches were stored in.

Every batch runs one `interpret.pipeline.Plan` through the engine's steps (`interpret.audit.engine`: `run_batch`,
`write_part`, for any engine). The directory is locked for the whole run (`interpret.audit.lock`); argument
checks are in `interpret.audit.checks`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn

from interpret.analysis import required_names
from interpret.analysis.defaults import AUDIT_LEADS, DEFAULT_ANALYZERS, DEPRECATED_STREAMING, LEADS
from interpret.analysis.lead import Note, streamed_defaults
from interpret.analysis.run import resolve_name
from interpret.audit.drivers import DriverSettings, driver_tables
from interpret.audit.failures import misclassified, slice_table
from interpret.audit.checks import (
    check_lengths, check_reproducible, checked_analyzers, checked_examples, effective_params, readout_analyzers,
)
from interpret.analysis.strategy import needs_patterns, streamed_strategies
from interpret.audit.engine import BatchOutput, run_batch, write_part
from interpret.audit.identity import fingerprint_parts
from interpret.audit.kernel import audit_implementation, audit_kernel
from interpret.audit.lock import AuditLock
from interpret.audit.overlap import computed
from interpret.audit.parts import EVIDENCE_TABLE, SKIPPED, AuditDir, Part, PartCheckError
from interpret.audit.stats import HeadSums, head_table, merge
from interpret.audit.summary import page_findings, render_summary
from interpret.audit.tables import SKIPPED_DTYPES, TOKEN_DTYPES, conform, example_dtypes
from interpret.capture import collect
from interpret.capture.api import capturable_for
from interpret.decision.decide import TargetRequest, decision_head, reader_for
from interpret.decision.labels import resolve_labels
from interpret.errors import InputError
from interpret.evidence.aggregate import lead_of, write_evidence_tables
from interpret.files.csv_io import write_csv
from interpret.inputs import model_limit
from interpret.pipeline import Plan, run_plan
from interpret.reading.datasets import Example, Skipped, model_inputs, read_column
from interpret.request import AuditOptions, EvidenceOptions
from interpret.runtime.progress import Stage, begin

__all__ = ["DEFAULT_ANALYZERS", "AuditResult", "BatchOutput", "Plan", "run_audit", "run_batch", "write_part"]

log = logging.getLogger("interpret")

PART_SECONDS = 60.0  # a part is stored once its batches took this long (or hold options.part_examples examples)
_READ_ROUNDS = 3  # parts found changed while the audit ran are recomputed at most this many times


@dataclass(frozen=True)
class AuditResult:
    """What an audit wrote and how it went.

    tokens / tokens_csv: one row per example × analyzer × token (columns: interpret.audit.tables).
    examples / examples_csv: one row per example, with the prediction and per-analyzer summaries.
    heads: heads.csv, one row per (layer, head): mean attention entropy and attention on special tokens.
    summary: summary.html, the offline summary report. manifest: manifest.json (the audit's fingerprint).
    n_examples: examples audited; n_computed: computed by this call; n_resumed: found finished on disk.
    n_skipped: input rows skipped for an empty text; skipped: skipped.csv listing their rows, ids and lines
        (None when the input was read without skipping).
    accuracy: fraction of labelled examples predicted correctly; None without labels or predictions.
    wall_seconds: this call's wall time.
    findings: drivers.parquet, drivers.csv and counterfactuals.csv (when drivers were checked) and slices.csv
        (when sliced), as written; drivers_seconds: the time the drivers' re-runs took.
    """

    out_dir: Path
    tokens: Path
    tokens_csv: Path
    examples: Path
    examples_csv: Path
    heads: Path
    summary: Path
    manifest: Path
    n_examples: int
    n_computed: int
    n_resumed: int
    accuracy: float | None
    wall_seconds: float
    n_skipped: int = 0
    skipped: Path | None = None
    findings: tuple[Path, ...] = ()
    drivers_seconds: float = 0.0

    @property
    def paths(self) -> tuple[Path, ...]:
        """Return the files the audit wrote (tables, heads.csv, summary.html, manifest.json, skipped.csv and the
        findings when written), parts excluded."""
        tables = (self.tokens, self.tokens_csv, self.examples, self.examples_csv, self.heads, self.summary, self.manifest)
        return tables + ((self.skipped,) if self.skipped is not None else ()) + self.findings


def run_audit(
    model: nn.Module,
    tokenizer: Any,
    examples: Sequence[Example],
    out_dir: str | Path,
    *,
    analyzers: Sequence[str] = DEFAULT_ANALYZERS,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    batch_size: int = 8,
    head: nn.Module | None = None,
    options: AuditOptions = AuditOptions(),
    progress: Stage | None = None,
) -> AuditResult:
    """Return the AuditResult of running `analyzers` on every example, resuming finished batches in `out_dir`.

    params: per analyzer, its parameters; analyzers offering rows="readout" compute only the readout rows
        unless `rows` is given, since the audit reads nothing else.
    head: a module mapping hidden states and mask to class logits (for a bare encoder such as MiniLM; default:
        the default model's head when `model` came from `interpret.load()`, `interpret.decision.decide.decision_head`).
    options: everything else (`interpret.request.AuditOptions`: the target, max_length, streaming, evidence,
        drivers, slices, seed, fresh, the fingerprint's model and input files, skipped rows, part size, engine).
        With streaming "on", an old streaming analyzer's name (`defaults.DEPRECATED_STREAMING`) runs its twin
        streamed. The fingerprint names a streamed analyzer "rollout (streamed)", so an audit never resumes parts
        computed the other way (or by the old names).
    The drivers and slices are computed from the finished parts on every call (they are not stored in parts),
    so a resumed or repeated audit with other `drivers` or `slice_by` recomputes no batch.
    Labels are read by `interpret.decision.labels` once, over the whole input, before any batch runs (`gold_classes`).
    The final tables appear together: written into a hidden folder, then renamed into place
    (`AuditDir.publish`), so a failure while writing them leaves the earlier ones whole.
    Raises DirectoryLocked (another audit holds `out_dir`) and InputError naming every fingerprint component
    that differs from the audit already in `out_dir`.
    """
    started = time.perf_counter()
    head = decision_head(model, head)  # issue 27: the head `interpret.load()` recorded for the default model
    examples = checked_examples(examples, batch_size)
    resolved = [resolve_name(name) for name in analyzers]  # an old streaming analyzer's name: its twin, streamed
    params = {DEPRECATED_STREAMING.get(name, name): value for name, value in (params or {}).items()}
    names = checked_analyzers([name for name, _ in resolved], params)
    defaults = tuple(analyzers) == DEFAULT_ANALYZERS
    target, max_length = options.target, options.max_length
    removal, evidence = options.evidence.removal, options.evidence.enabled
    slices = None if options.slice_by is None else read_column(options.input_file, options.slice_by)
    file_name = None if options.input_file is None else Path(options.input_file).name
    if target == "gold":
        unlabelled = next((example for example in examples if example.label is None), None)
        if unlabelled is not None:
            raise InputError(f"{unlabelled.place(file_name)} has no label; explaining gold labels needs one per example.")
    check_reproducible(model)
    capturable = capturable_for(model, tokenizer)
    if capturable.kind not in ("encoder", "decoder"):
        raise InputError(
            f"the audit reads one text per example, which a {capturable.kind} model cannot take alone;"
            " audit an encoder or decoder model, or explain single inputs with interpret.explain."
        )
    model_id = options.model_id or capturable.model_id
    limit = model_limit(tokenizer, capturable.max_positions)
    if max_length is not None and limit is not None and max_length > limit:
        raise InputError(f"max_length={max_length} exceeds the model's limit of {limit} tokens; use at most {limit}.")
    if max_length is None and capturable.prepare is None:
        check_lengths(examples, tokenizer, limit)
    strategies, refused = {name: forced or "full" for name, forced in resolved}, []
    if options.streaming == "on":  # no pattern captured: what needs every pattern is refused, or left out of the defaults
        strategies, refused = streamed_defaults("streaming='on'") if defaults else streamed_strategies(names, "streaming='on'")
    elif defaults:  # led by the first of defaults.LEADS that runs on the model
        chosen, refused = audit_defaults(model, tokenizer, examples[0].text, head, max_length)
        strategies = dict.fromkeys(chosen, "full")
    for label, why in refused:
        log.warning(f"{label}: {why}")
    names = list(strategies)
    streamed = tuple(name for name, strategy in strategies.items() if strategy == "streamed")
    effective = {name: effective_params(name, params.get(name), strategies[name]) for name in names}
    gold = gold_classes(model, tokenizer, examples, head=head, max_length=max_length, file_name=file_name)
    n_batches = -(-len(examples) // batch_size)
    batches = [examples[i * batch_size:(i + 1) * batch_size] for i in range(n_batches)]
    batch_rows = [tuple(example.row for example in batch) for batch in batches]
    hook_names = tuple(required_names(strategies)) or ("*attn.hook_pattern",)  # streamed: no [n, n] capture
    patterns = needs_patterns(hook_names)
    components = fingerprint_parts(
        examples=examples, gold=gold, analyzers=names, params=effective, batch_size=batch_size, max_length=max_length,
        model_id=model_id, model=model, tokenizer=tokenizer, head=head, seed=options.seed, target=target,
        model_dir=options.model_dir, input_file=options.input_file, evidence=evidence, patterns=patterns,
        skipped=options.skipped, removal=removal, streamed=streamed,
    )
    plan = Plan(
        strategies=strategies, params=effective, hook_names=hook_names, request=TargetRequest(gold=target == "gold"),
        head=head, seed=options.seed, max_length=max_length, evidence=EvidenceOptions(evidence, removal),
        attention=audit_implementation(model, patterns),
    )
    findings = Findings(
        model, tokenizer, examples, options.slice_by, slices,
        DriverSettings(options.drivers, options.driver_rows, removal, batch_size, max_length, head, plan.attention,
                       options.seed),
    )
    if options.drivers:  # a log line: the CLI shows it unless -q, whether or not a bar is drawn
        each = f"in at most {options.driver_rows} rows each" if options.driver_rows else "in every row holding one"
        bound = min(len(examples), 2 * options.drivers * options.driver_rows) if options.driver_rows else len(examples)
        log.info(f"after the batches, the top {options.drivers} drivers are checked {each}:"
                 f" 2 forward passes per row re-run, at most {bound} rows")
    store = AuditDir(Path(out_dir), evidence=evidence)
    with AuditLock(store.root):
        store.open(components, n_batches, fresh=options.fresh)
        computed: set[int] = set()  # batch indices computed by this call (a part found changed is computed again)
        for _ in range(_READ_ROUNDS):
            parts = store.checked_parts(batch_rows)
            with audit_kernel(model, plan.attention):  # switched once for every batch (kernel.py)
                computed |= (options.engine or _compute_missing)(
                    model, tokenizer, store, batches, parts, plan, options.part_examples, progress
                )
            try:
                tables = _read_parts(store, store.checked_parts(batch_rows), n_batches)
                break
            except PartCheckError as err:
                log.warning(f"an audit part changed while the audit ran ({err}); recomputing it")
        else:
            raise InputError(f"the parts in {store.parts} keep changing while the audit runs; is another program writing there?")
        facts = _facts(model_id, names, effective, batch_size, max_length, options.seed, components)
        accuracy, written, drivers_seconds = store.publish(
            lambda folder: _finish(folder, tables, names, facts, options.seed, options.skipped, findings)
        )
    root = store.root
    return AuditResult(
        out_dir=root,
        tokens=root / "tokens.parquet",
        tokens_csv=root / "tokens.csv",
        examples=root / "examples.parquet",
        examples_csv=root / "examples.csv",
        heads=root / "heads.csv",
        summary=root / "summary.html",
        manifest=store.manifest,
        n_examples=len(examples),
        n_computed=sum(len(batches[index]) for index in computed),
        n_resumed=len(examples) - sum(len(batches[index]) for index in computed),
        accuracy=accuracy,
        wall_seconds=time.perf_counter() - started,
        n_skipped=len(options.skipped or ()),
        skipped=None if options.skipped is None else root / SKIPPED,
        findings=tuple(root / name for name in written),
        drivers_seconds=drivers_seconds,
    )


def audit_defaults(
    model: nn.Module, tokenizer: Any, text: str, head: nn.Module | None, max_length: int | None
) -> tuple[tuple[str, ...], tuple[Note, ...]]:
    """Return the default analyzers led by the first of `AUDIT_LEADS` that runs on `model` (tried on one text: what
    a lead refuses is the model's, not the text's), or by none, and the notes of the leads that refused."""
    plan = Plan({LEADS[0]: "full"}, {}, (), head=head, max_length=max_length, leads=AUDIT_LEADS)
    ran = run_plan(plan, model, tokenizer, [text])
    return (*(result.analyzer for result in ran.results), *DEFAULT_ANALYZERS[1:]), ran.skipped


def gold_classes(
    model: nn.Module, tokenizer: Any, examples: Sequence[Example], *, head: nn.Module | None = None,
    max_length: int | None = None, file_name: str | None = None,
) -> tuple[tuple[int | None, ...], tuple[str, ...]]:
    """Return each example's gold class (`interpret.decision.labels.resolve_labels` over the whole file, which refuses a
    label naming no class with the line it is on) and the model's class names; Nones and () when no example has
    a label or the model makes no class decision (its labels are kept as given, and score nothing).

    The class names are the decision's (`interpret.decision.decide.reader_for`), read from one forward pass on the
    first example, so every batch's decisions read the labels exactly so.
    """
    unresolved: tuple[tuple[int | None, ...], tuple[str, ...]] = ((None,) * len(examples), ())
    if all(example.label is None for example in examples):
        return unresolved
    trace = collect(model, tokenizer, model_inputs(examples[:1]), names=[], max_length=max_length)
    reader = reader_for(model, trace.meta.kind, head, trace.output)
    if reader.kind != "class" or reader.one_logit:  # a score's labels (relevance, reward) name no class
        return unresolved
    labels = [example.label for example in examples]
    resolved = resolve_labels(labels, reader.labels, lambda i: examples[i].place(file_name))
    return tuple(resolved), reader.labels


def _compute_missing(
    model: nn.Module, tokenizer: Any, store: AuditDir, batches: Sequence[Sequence[Example]], parts: Sequence[Part],
    plan: Plan, part_examples: int, progress: Stage | None,
) -> set[int]:
    """Compute every batch no checked part holds, storing runs of consecutive batches as parts; return the
    indices of the batches computed. `progress` counts the examples, resumed ones first; once the first batch
    is done, one log line with the rows to compute, the analyzers and the time they should take at the first
    batch's pace."""
    done = {index for part in parts for index in part.batches}
    todo = [index for index in range(len(batches)) if index not in done]
    total = sum(len(batch) for batch in batches)
    n_done = total - sum(len(batches[index]) for index in todo)
    if todo and n_done:
        log.info(f"resuming the audit in {store.root}: {n_done} of {total} examples already done")
    advance = begin(progress, "audit", total)
    advance(n_done)
    pending: list[BatchOutput] = []
    part_started = started = time.perf_counter()
    try:
        for position, output in enumerate(computed(model, tokenizer, batches, todo, plan)):
            index = output.index
            if not pending:
                part_started = time.perf_counter()
            pending.append(output)
            advance(len(batches[index]))
            if position == 0:  # a log line, shown unless -q (not tied to the bar)
                _estimate(time.perf_counter() - started, len(batches[index]), total - n_done, plan.analyzers)
            following = todo[position + 1] if position + 1 < len(todo) else None
            full = sum(len(output.rows) for output in pending) >= part_examples
            if following != index + 1 or full or time.perf_counter() - part_started >= PART_SECONDS:
                write_part(store, pending)
                pending = []
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM in the CLI: keep the finished batches for the resume
        if pending:
            write_part(store, pending)
        raise
    return set(todo)


def _estimate(seconds: float, first_rows: int, rows: int, analyzers: Sequence[str]) -> None:
    """Log how long auditing `rows` rows should take at the pace of the first batch (`first_rows` in `seconds`;
    it includes the first pass's warm-up, so the estimate errs long)."""
    total = seconds * rows / first_rows
    about = f"{total:.0f} s" if total < 90 else f"{total / 60:.0f} min" if total < 5400 else f"{total / 3600:.1f} h"
    log.info(f"auditing {rows} rows with {', '.join(analyzers)}: about {about}"
             f" (first batch of {first_rows} took {seconds:.1f} s)")


def _read_parts(store: AuditDir, parts: Sequence[Part], n_batches: int) -> tuple[dict[str, list[pd.DataFrame]], list[HeadSums]]:
    """Return every part's tables (table name → frames) and per-batch statistics in batch order; PartCheckError
    (after discarding the part) when one fails its check on reading, or a batch has no part."""
    covered = [index for part in parts for index in part.batches]
    if covered != list(range(n_batches)):
        missing = sorted(set(range(n_batches)) - set(covered))
        raise PartCheckError(f"batch {missing[0] if missing else '?'} has no part")
    frames: dict[str, list[pd.DataFrame]] = {table: [] for table in store.tables}
    stats: list[HeadSums] = []
    for part in parts:
        try:
            part_frames, part_stats = store.read(part)
        except PartCheckError as err:
            store.discard(part)
            raise PartCheckError(f"part {part.first}-{part.last}: {err}") from None
        for table, frame in part_frames.items():
            frames[table].append(frame)
        stats.extend(part_stats)
    return frames, stats


@dataclass(frozen=True)
class Findings:
    """What the drivers and slices are computed with: the model, its examples, the column sliced by (with one
    value per input row) and the drivers' settings."""

    model: nn.Module
    tokenizer: Any
    examples: Sequence[Example]
    slice_by: str | None
    slices: Sequence[str | None] | None
    drivers: DriverSettings


def _finish(
    folder: Path, tables: tuple[dict[str, list[pd.DataFrame]], list[HeadSums]], analyzers: Sequence[str],
    facts: Mapping[str, str], seed: int, skipped: Sequence[Skipped] | None, findings: Findings,
) -> tuple[float | None, list[str], float]:
    """Write the final tables, heads.csv, the evidence tables (when measured), skipped.csv (when rows were
    skipped), the drivers and slices (when asked) and summary.html from the parts' contents into `folder`;
    return the accuracy, the findings' file names and the drivers' seconds."""
    frames, stats = tables
    token_parts, example_parts = frames["tokens"], frames["examples"]
    tokens = conform(pd.concat(token_parts, ignore_index=True), TOKEN_DTYPES, ["row", "analyzer", "position"])
    examples = conform(pd.concat(example_parts, ignore_index=True), example_dtypes(readout_analyzers(analyzers)), ["row"])
    evidence, ranked = None, []
    if EVIDENCE_TABLE in frames:
        evidence = pd.concat(frames[EVIDENCE_TABLE], ignore_index=True)
        evidence.insert(1, "id", evidence["row"].map(dict(zip(examples["row"], examples["id"]))).astype("string"))
        aggregate = write_evidence_tables(evidence, folder, seed=seed)
        ranked = [str(method) for method in aggregate.dropna(subset=["rank"])["method"]]
    lead = lead_of(ranked, readout_analyzers(analyzers))
    written: list[str] = []
    driven = counterfactuals = sliced = None
    started = time.perf_counter()
    if findings.drivers.k and lead is not None:
        driven, counterfactuals = driver_tables(
            findings.model, findings.tokenizer, findings.examples, tokens, lead, findings.drivers
        )
        driven.to_parquet(folder / "drivers.parquet", index=False)
        write_csv(driven, folder / "drivers.csv")
        write_csv(counterfactuals, folder / "counterfactuals.csv")
        written += ["drivers.parquet", "drivers.csv", "counterfactuals.csv"]
    drivers_seconds = time.perf_counter() - started
    if findings.slices is not None:
        sliced = slice_table(examples, [findings.slices[row] for row in examples["row"]], evidence, lead)
        write_csv(sliced, folder / "slices.csv")
        written.append("slices.csv")
        facts = {**facts, "sliced by": str(findings.slice_by)}
    if driven is not None:
        checked = int(driven["tested"].sum())
        rows = f"at most {findings.drivers.rows} rows each" if findings.drivers.rows else "every row holding one"
        facts = {**facts, "drivers": f"the top {findings.drivers.k} tokens and words of {lead} by mean |score| re-run"
                                     f" without them ({checked} checked in {rows},"
                                     f" removal {findings.drivers.removal or 'default'})"}
    heads = head_table(merge(stats))
    for frame, stem in ((tokens, "tokens"), (examples, "examples")):
        frame.to_parquet(folder / f"{stem}.parquet", index=False)
        write_csv(frame, folder / f"{stem}.csv")
    write_csv(heads, folder / "heads.csv")
    if skipped is not None:
        listed = {name: [getattr(entry, name) for entry in skipped] for name in SKIPPED_DTYPES}
        write_csv(pd.DataFrame(listed).astype(SKIPPED_DTYPES), folder / SKIPPED)
        facts = {**facts, "skipped rows": f"{len(skipped)} with an empty text (their lines: {SKIPPED})"}
    accuracy = accuracy_of(examples)
    render_summary(
        folder / "summary.html", tokens=tokens, examples=examples, heads=heads,
        analyzers=readout_analyzers(analyzers), accuracy=accuracy, run=facts,
        findings=page_findings(lead, driven, counterfactuals, misclassified(examples, tokens, lead), sliced),
    )
    return accuracy, written, drivers_seconds


def _facts(
    model_id: str, analyzers: Sequence[str], params: Mapping[str, Mapping[str, Any]], batch_size: int,
    max_length: int | None, seed: int, components: Mapping[str, str],
) -> dict[str, str]:
    """Return what the summary page lists about the run, as label → text."""
    facts = {"model": model_id, "analyzers": ", ".join(analyzers)}
    for name in analyzers:
        facts[f"{name} parameters"] = ", ".join(f"{key}={value}" for key, value in params[name].items())
    facts["batch size"] = str(batch_size)
    facts["max length"] = "none (longer texts are refused)" if max_length is None else f"{max_length} (longer texts cut)"
    facts["seed"] = str(seed)
    facts["input"] = components["examples"]
    if components["head"] != "none":
        facts["decision head"] = f"sha256 {components['head']}"
    for key in ("weights", "dtype", "device", "tokenizer"):
        facts[key] = components[key]
    facts["attention kernel"] = components["attention"]
    return facts


def accuracy_of(examples: pd.DataFrame) -> float | None:
    """Return the mean of the examples table's `correct` column over known values; None when there are none."""
    correct = examples["correct"].dropna()
    return float(correct.astype(bool).mean()) if len(correct) else None
