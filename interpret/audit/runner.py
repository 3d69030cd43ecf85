"""`run_audit`: run analyzers over a dataset in fixed batches, storing each finished batch, resumable.

Batch i always holds examples[i·batch_size : (i+1)·batch_size], so a resumed audit computes every batch
exactly as an uninterrupted one would, and the final tables (concatenated from the parts, with fixed dtypes
and sorted rows) are equal.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import torch
from torch import nn
from tqdm import tqdm

from interpret.analyze import AnalyzerResult, analyze, registry, required_names
from interpret.analyze.defaults import DEFAULT_ANALYZERS
from interpret.analyze.params import as_dict, build
from interpret.atomic import atomic_path
from interpret.audit.parts import AuditDir, fingerprint_parts
from interpret.audit.stats import HeadSums, head_sums, head_table, merge
from interpret.audit.summary import render_summary
from interpret.audit.tables import TOKEN_DTYPES, conform, example_dtypes, example_table, token_table
from interpret.collect import collect
from interpret.collect.api import capturable_for
from interpret.csv_io import write_csv
from interpret.datasets import Example
from interpret.analyze.run import run_context
from interpret.evidence import evaluate_evidence
from interpret.evidence.aggregate import evidence_rows, read_batch_parts, write_batch_part, write_evidence_tables
from interpret.decision import TargetRequest, decide
from interpret.errors import AnalyzerError, ConfigError, InputError, suggest
from interpret.inputs import model_limit

log = logging.getLogger("interpret")

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
_PRECHECK_CHUNK = 512  # texts tokenized at once by the up-front length check


@dataclass(frozen=True)
class AuditResult:
    """What an audit wrote and how it went.

    tokens / tokens_csv: one row per example × analyzer × token (columns: interpret.audit.tables).
    examples / examples_csv: one row per example, with the prediction and per-analyzer summaries.
    heads: heads.csv, one row per (layer, head): mean attention entropy and attention on special tokens.
    summary: summary.html, the offline summary report. manifest: manifest.json (the audit's fingerprint).
    n_examples: examples audited; n_computed: computed by this call; n_resumed: found finished on disk.
    accuracy: fraction of labelled examples predicted correctly; None without labels or predictions.
    wall_seconds: this call's wall time.
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

    @property
    def paths(self) -> tuple[Path, ...]:
        """Return the files the audit wrote (tables, heads.csv, summary.html, manifest.json), parts excluded."""
        return (self.tokens, self.tokens_csv, self.examples, self.examples_csv, self.heads, self.summary, self.manifest)


def run_audit(
    model: nn.Module,
    tokenizer: Any,
    examples: Sequence[Example],
    out_dir: str | Path,
    *,
    analyzers: Sequence[str] = DEFAULT_ANALYZERS,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    batch_size: int = 8,
    max_length: int | None = None,
    head: nn.Module | None = None,
    model_id: str = "",
    seed: int = 0,
    progress: bool = True,
    fresh: bool = False,
    target: Literal["prediction", "gold"] = "prediction",
    evidence: bool = False,
) -> AuditResult:
    """Return the AuditResult of running `analyzers` on every example, resuming finished batches in `out_dir`.

    params: per analyzer, its parameters; analyzers offering rows="readout" compute only the readout rows
        unless `rows` is given, since the audit reads nothing else.
    max_length: truncate texts to this many tokens; without it a text over the model's limit stops the
        audit before any batch runs, naming its row.
    head: a module mapping hidden states and mask to class logits (for a bare encoder such as MiniLM).
    model_id: names the model in the fingerprint and the summary (default: what the collector reports).
    fresh: discard the parts of an earlier audit in `out_dir` instead of resuming or refusing.
    target: explain each example's prediction, or its gold label ("gold"; every example needs a label).
    evidence: also measure each readout's faithfulness (interpret.evidence) and write evidence.csv (per method,
        bootstrap 95% intervals, ranked) and evidence_examples.csv.
    """
    started = time.perf_counter()
    examples = _checked_examples(examples, batch_size)
    names = _checked_analyzers(analyzers, params)
    if target not in ("prediction", "gold"):
        raise ConfigError(f"target={target!r} is not known; the audit explains 'prediction' or 'gold'.")
    if target == "gold":
        unlabelled = next((example.row for example in examples if example.label is None), None)
        if unlabelled is not None:
            raise InputError(f"example row {unlabelled} has no label; explaining gold labels needs one per example.")
    effective = {name: _effective_params(name, (params or {}).get(name)) for name in names}
    _check_reproducible(model)
    capturable = capturable_for(model, tokenizer)
    if capturable.kind not in ("encoder", "decoder"):
        raise InputError(
            f"the audit reads one text per example, which a {capturable.kind} model cannot take alone;"
            " audit an encoder or decoder model, or explain single inputs with interpret.explain."
        )
    model_id = model_id or capturable.model_id
    limit = model_limit(tokenizer, capturable.max_positions)
    if max_length is not None and limit is not None and max_length > limit:
        raise InputError(f"max_length={max_length} exceeds the model's limit of {limit} tokens; use at most {limit}.")
    if max_length is None and capturable.prepare is None:
        _check_lengths(examples, tokenizer, limit)
    n_batches = -(-len(examples) // batch_size)
    components = fingerprint_parts(
        examples, names, effective, batch_size, max_length, model_id, _module_digest(head), seed, target
    )
    store = AuditDir(Path(out_dir))
    store.open(components, n_batches, fresh=fresh)
    finished = store.done() & set(range(n_batches))
    batches = [examples[i * batch_size:(i + 1) * batch_size] for i in range(n_batches)]
    n_resumed = sum(len(batches[i]) for i in finished)
    if finished:
        log.info(f"resuming the audit in {store.root}: {n_resumed} of {len(examples)} examples already done")
    hook_names = list(dict.fromkeys([*required_names(names), "*attn.hook_pattern"]))
    bar = tqdm(total=len(examples), initial=n_resumed, disable=not progress, file=sys.stderr, unit="example", desc="audit")
    try:
        for index, batch in enumerate(batches):
            if index in finished:
                continue
            evidence_part = store.parts / f"batch-{index:05d}-evidence.parquet" if evidence else None
            tokens, rows, stats = _run_batch(
                model, tokenizer, batch, names, effective, hook_names, max_length, head, seed, target == "gold",
                evidence_part,
            )
            store.write(index, tokens, rows, stats)
            bar.update(len(batch))
    finally:
        bar.close()
    facts = _facts(model_id, names, effective, batch_size, max_length, seed, components)
    accuracy = _finish(store, n_batches, names, facts)
    if evidence:
        parts = [store.parts / f"batch-{index:05d}-evidence.parquet" for index in range(n_batches)]
        write_evidence_tables(read_batch_parts(parts), store.root, seed=seed)
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
        n_computed=len(examples) - n_resumed,
        n_resumed=n_resumed,
        accuracy=accuracy,
        wall_seconds=time.perf_counter() - started,
    )


def _run_batch(
    model: nn.Module,
    tokenizer: Any,
    batch: Sequence[Example],
    analyzers: Sequence[str],
    params: Mapping[str, Mapping[str, Any]],
    hook_names: Sequence[str],
    max_length: int | None,
    head: nn.Module | None,
    seed: int,
    explain_gold: bool,
    evidence_part: Path | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, HeadSums]:
    """Return one batch's tokens rows, examples rows and head-map sums."""
    # Seeded per batch, so a batch's numbers never depend on which batches this process ran before it.
    torch.manual_seed(seed)
    try:
        trace = collect(model, tokenizer, [example.text for example in batch], names=hook_names, max_length=max_length)
    except InputError as err:
        raise InputError(f"example rows {batch[0].row}-{batch[-1].row}: {err}") from None
    gold = [example.label for example in batch]
    decided = decide(model, trace, tokenizer, TargetRequest(gold=explain_gold), head, gold)
    context = run_context(trace, model, tokenizer, head=head, targets=[d.target for d in decided], seed=seed)
    results: list[AnalyzerResult] = [analyze(trace, name, params=params[name], context=context) for name in analyzers]
    if evidence_part is not None:
        found = evaluate_evidence(trace, results, context)
        write_batch_part(evidence_rows(found, [example.row for example in batch]), evidence_part)
    return (
        token_table(batch, trace.encoded, results),
        example_table(batch, trace.encoded, decided, results),
        head_sums(results),
    )


def _finish(store: AuditDir, n_batches: int, analyzers: Sequence[str], facts: Mapping[str, str]) -> float | None:
    """Write the final tables, heads.csv and summary.html from the parts; return the accuracy."""
    token_parts, example_parts, stats = store.read(n_batches)
    tokens = conform(pd.concat(token_parts, ignore_index=True), TOKEN_DTYPES, ["row", "analyzer", "position"])
    examples = conform(pd.concat(example_parts, ignore_index=True), example_dtypes(readout_analyzers(analyzers)), ["row"])
    heads = head_table(merge(stats))
    for frame, stem in ((tokens, "tokens"), (examples, "examples")):
        with atomic_path(store.root / f"{stem}.parquet") as temporary:
            frame.to_parquet(temporary, index=False)
        write_csv(frame, store.root / f"{stem}.csv")
    write_csv(heads, store.root / "heads.csv")
    accuracy = accuracy_of(examples)
    _warn_on_foreign_labels(examples)
    render_summary(
        store.root / "summary.html", tokens=tokens, examples=examples, heads=heads,
        analyzers=readout_analyzers(analyzers), accuracy=accuracy, run=facts,
    )
    return accuracy


def _facts(
    model_id: str,
    analyzers: Sequence[str],
    params: Mapping[str, Mapping[str, Any]],
    batch_size: int,
    max_length: int | None,
    seed: int,
    components: Mapping[str, str],
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
    return facts


def accuracy_of(examples: pd.DataFrame) -> float | None:
    """Return the mean of the examples table's `correct` column over known values; None when there are none."""
    correct = examples["correct"].dropna()
    return float(correct.astype(bool).mean()) if len(correct) else None


def _warn_on_foreign_labels(examples: pd.DataFrame) -> None:
    """Log a warning when no gold label is ever predicted: label names that differ score zero silently."""
    labels = set(examples["label"].dropna())
    predictions = set(examples["prediction"].dropna())
    if labels and predictions and not labels & predictions:
        log.warning(
            f"none of the gold labels ({', '.join(sorted(labels)[:5])}) is ever predicted"
            f" (predictions: {', '.join(sorted(predictions)[:5])}); check that the label names match the model's."
        )


def _checked_examples(examples: Sequence[Example], batch_size: int) -> list[Example]:
    if isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be a positive number of examples; use e.g. 8.")
    examples = list(examples)
    if not examples:
        raise InputError("no examples to audit; give at least one (a .jsonl or .csv file with a text column).")
    seen: set[int] = set()
    for example in examples:
        if not isinstance(example.text, str) or not example.text.strip():
            raise InputError(f"example row {example.row} has no text; give every example a non-empty text.")
        if example.row in seen:
            raise InputError(f"example row {example.row} appears twice; give every example a unique row id.")
        seen.add(example.row)
    return examples


def readout_analyzers(names: Sequence[str]) -> list[str]:
    """Return the analyzers (of `names`, in order) that provide a readout: the tokens table's analyzers."""
    return [name for name in names if "readout" in registry.get(name).provides]


def _checked_analyzers(analyzers: Sequence[str], params: Mapping[str, Any] | None) -> list[str]:
    names = list(dict.fromkeys(analyzers))
    if not names:
        raise AnalyzerError(f"no analyzers to run; pick at least one of {', '.join(registry.names())}.")
    for name in names:
        cls = registry.get(name)  # raises for an unknown or broken analyzer, with a close match
        if not cls.provides:
            tabulated = [n for n in registry.names() if registry.get(n).provides]
            raise AnalyzerError(
                f"analyzer {name!r} declares neither a readout nor a head map, so the audit has nothing to tabulate;"
                f" run it with `interpret report`, or audit with one of {', '.join(tabulated)}."
            )
    for name in params or {}:
        if name not in names:
            raise AnalyzerError(
                f"params given for {name!r}, which is not among the analyzers run ({', '.join(names)});"
                f"{suggest(name, names)} add it to analyzers or drop its params."
            )
    return names


def _effective_params(name: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return the analyzer's full parameters as a JSON-ready dict, preferring readout-only computation."""
    cls = registry.get(name)
    given = dict(given or {})
    if "rows" not in given and "rows" in {field.name for field in dataclasses.fields(cls.Params)}:
        try:
            return as_dict(build(cls.Params, {**given, "rows": "readout"}, name))
        except AnalyzerError:
            pass  # readout-only is not possible with the given params (e.g. per_layer); keep the analyzer's own
    return as_dict(build(cls.Params, given, name))


def _check_reproducible(model: nn.Module) -> None:
    """Refuse a model with active dropout: its results would change between runs, and resuming relies on them."""
    for module in model.modules():
        if module.training and isinstance(module, _DROPOUTS) and module.p > 0:
            raise ConfigError(
                f"{type(model).__name__} is in training mode with dropout, so the audit would not be reproducible;"
                " call model.eval() first."
            )


def _check_lengths(examples: Sequence[Example], tokenizer: Any, limit: int | None) -> None:
    """Raise InputError naming the first example longer than `limit` tokens, before any batch runs."""
    if limit is None or not callable(tokenizer):
        return
    for start in range(0, len(examples), _PRECHECK_CHUNK):
        chunk = examples[start:start + _PRECHECK_CHUNK]
        for example, ids in zip(chunk, tokenizer([example.text for example in chunk])["input_ids"]):
            if len(ids) > limit:
                raise InputError(
                    f"example row {example.row} has {len(ids)} tokens but the model accepts at most {limit};"
                    f" shorten it or truncate with max_length={limit} (CLI: --max-length {limit})."
                )


def _module_digest(module: nn.Module | None) -> str:
    """Return a short hash of a module's class, labels and tensors (the head is part of what is audited)."""
    if module is None:
        return "none"
    digest = hashlib.sha256(f"{type(module).__qualname__} {getattr(module, 'labels', None)}".encode())
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]
