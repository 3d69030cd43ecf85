"""The parts of a request, shared by `interpret.explain`, `interpret.audit.run_audit` and the command line.

Each part is frozen and checks its own fields when made, with one line naming the field and what to give
(ConfigError for an unknown choice, InputError for inputs that contradict each other), so the command line
and the library refuse the same request the same way before any model loads. Torch-free.

Subject: what to explain. EvidenceOptions: whether and how evidence removes tokens. Limits: how much a run
may hold. View: what the report shows besides the numbers. AuditOptions: how an audit runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from interpret.errors import ConfigError, InputError
from interpret.estimate.memory import CAPTURE_BUDGET

REMOVALS: tuple[str, ...] = ("delete", "mask", "zero")  # how evidence removes a token (interpret.evidence.removal)
DEFAULT_SEEDS = 5  # random rankings the evidence compares each method's ranking with
STREAMING_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class Subject:
    """What to explain about each input.

    target: a class index or label (classifiers) or a token (language models) explained for every example;
        None: each example's own prediction.
    contrast: explain "why target rather than contrast" (score = target − contrast).
    gold / explain_gold: each example's gold label (shown beside the prediction), and whether to explain
        that label instead of the prediction.
    ids: each example's id (from an input file), shown in the report.
    continuation: per text, a continuation of a language model's input whose tokens are explained, one
        target per token.
    generate: generate this many tokens greedily after each text (a decoder language model, or an
        encoder-decoder's decoder after its start token; `interpret.decision.generate`), then explain them as the
        continuation, one target per generated token; fewer when the model ends the sequence.
    decoder_inputs: an encoder-decoder model's decoder input, one per text.
    compare: classes (or tokens) whose attributions the report shows side by side with the prediction's (and,
        with `contrast`, the contrast class's and the contrast's), for every analyzer that runs the model and
        declares a readout (`interpret.report.classes`); None: no such rows. Targets of several tokens
        (continuations, generation) get none.
    """

    target: int | str | None = None
    contrast: int | str | None = None
    gold: Sequence[str | None] | None = None
    explain_gold: bool = False
    ids: Sequence[str | None] | None = None
    continuation: str | Sequence[str] | None = None
    generate: int | None = None
    decoder_inputs: Any = None  # str | Sequence[str] | Tensor | Encoded
    compare: Sequence[int | str] | None = None

    def __post_init__(self) -> None:
        if self.generate is not None:
            given = [name for name in ("continuation", "decoder_inputs", "target") if getattr(self, name) is not None]
            if given:
                raise InputError(f"generate explains the tokens the model generates; drop {given[0]}, or drop generate.")


@dataclass(frozen=True)
class EvidenceOptions:
    """Whether to re-run the model with tokens removed to measure how faithful each readout is, against `seeds`
    random rankings (`interpret.evidence`), and how a token is removed: "delete", "mask" or "zero" (None: by
    the inputs, `interpret.evidence.default_removal`)."""

    enabled: bool = True
    removal: str | None = None
    seeds: int = DEFAULT_SEEDS

    def __post_init__(self) -> None:
        if self.removal is not None and self.removal not in REMOVALS:
            raise ConfigError(f"removal={self.removal!r} is not one of {', '.join(REMOVALS)}.")


@dataclass(frozen=True)
class Limits:
    """How much a run may hold.

    max_length: truncate each text to this many tokens (None: the model's limit).
    capture_bytes: the largest capture per example (None: no limit).
    streaming: "auto" streams when the full capture of every pattern is over `capture_bytes`, "on" always,
        "off" never: a streamed run captures no pattern and runs each analyzer's streamed computation
        (`interpret.analysis.strategy`).
    """

    max_length: int | None = None
    capture_bytes: int | None = CAPTURE_BUDGET
    streaming: str = "auto"

    def __post_init__(self) -> None:
        if self.streaming not in STREAMING_CHOICES:
            raise ConfigError(f"streaming={self.streaming!r} is unknown; use auto, on or off")


@dataclass(frozen=True)
class View:
    """What the report shows besides the numbers: the layers and heads its attention views embed (analyzers
    still see every layer they need; None: all), the model's name (None: the collector's), and (label, text)
    facts every reader must see, shown at the top (after those `interpret.models.loading.load_notes` gives)."""

    layers: Sequence[int] | None = None
    heads: Sequence[int] | None = None
    model_id: str | None = None
    notes: Sequence[tuple[str, str]] = ()


DEFAULT_DRIVERS = 20  # tokens (and words) of the lead method an audit re-runs the model without
DEFAULT_DRIVER_ROWS = 200  # rows each of them is re-run in at most (a seeded sample of a more frequent one's)
PART_EXAMPLES = 512  # an audit stores a part once it holds this many examples (or after PART_SECONDS)


@dataclass(frozen=True)
class AuditOptions:
    """How `interpret.audit.run_audit` runs, besides the analyzers, their params, the batch size and the head.

    target: explain each example's prediction, or its gold label ("gold"; every example needs a label).
    max_length: truncate texts to this many tokens; without it a text over the model's limit stops the
        audit before any batch runs, naming its row.
    streaming: "on" runs each analyzer's streamed computation and captures no pattern (an analyzer that needs
        every pattern is refused, or left out of the default set with a warning); "off" (default) never.
    evidence: also measure each readout's faithfulness (interpret.evidence), stored in every part, and write
        evidence_examples.csv and evidence.csv (per method, bootstrap 95% intervals, ranked); its `removal`
        says how evidence and drivers remove tokens (None: `default_removal`).
    drivers: check the top `drivers` tokens of the lead method by re-running the model without them
        (`interpret.audit.drivers`: drivers.parquet, drivers.csv, counterfactuals.csv); 0: no drivers.
    driver_rows: re-run each of them in at most this many of the rows holding it, a sample seeded by `seed`
        (its flip rate and interval are then the sample's); 0: in every row holding it.
    slice_by: a column of `input_file`: accuracy and evidence per value of it (slices.csv).
    seed: the seed of any randomness.
    fresh: discard the parts of an earlier audit in the output directory instead of resuming or refusing.
    model_id: names the model in the fingerprint and the summary (default: what the collector reports).
    model_dir: the directory the model was loaded from, unchanged since: its weight files are fingerprinted
        (sha256 memoised by size, inode, mtime and ctime) instead of hashing the model's tensors in memory.
    input_file: the file the examples were read from; its content joins the fingerprint.
    skipped: the input's rows skipped for an empty text (`interpret.reading.datasets.read_dataset(...,
        skip_empty=True)`): listed in skipped.csv (row, id, line), counted in the summary and the result, and
        part of the fingerprint. None: the input was read without skipping, and no skipped.csv is written.
    part_examples: store finished batches as one part once they hold this many examples (or after
        PART_SECONDS); the tables do not depend on it.
    engine: computes the missing batches, called as `interpret.audit.runner._compute_missing` is (default:
        that, in this process); `interpret.audit.engine_ray.RayEngine` spreads them over Ray actors. The tables
        do not depend on it.
    """

    target: str = "prediction"
    max_length: int | None = None
    streaming: str = "off"
    evidence: EvidenceOptions = EvidenceOptions(enabled=False)
    drivers: int = DEFAULT_DRIVERS
    driver_rows: int = DEFAULT_DRIVER_ROWS
    slice_by: str | None = None
    seed: int = 0
    fresh: bool = False
    model_id: str = ""
    model_dir: Any = None  # str | os.PathLike
    input_file: Any = None  # str | os.PathLike
    skipped: Sequence[Any] | None = None  # interpret.reading.datasets.Skipped
    part_examples: int = PART_EXAMPLES
    engine: Callable[..., set[int]] | None = None

    def __post_init__(self) -> None:
        if self.target not in ("prediction", "gold"):
            raise ConfigError(f"target={self.target!r} is not known; the audit explains 'prediction' or 'gold'.")
        if self.streaming not in ("on", "off"):
            raise ConfigError(f"streaming={self.streaming!r} is not known; use 'on' (streamed computations) or 'off'.")
        if isinstance(self.part_examples, bool) or not isinstance(self.part_examples, int) or self.part_examples < 1:
            raise ConfigError(f"part_examples={self.part_examples!r} must be a positive number of examples;"
                              f" use e.g. {PART_EXAMPLES}.")
        if isinstance(self.drivers, bool) or not isinstance(self.drivers, int) or self.drivers < 0:
            raise ConfigError(f"drivers={self.drivers!r} must be a number of tokens to check, 0 or more;"
                              f" use e.g. {DEFAULT_DRIVERS}.")
        if isinstance(self.driver_rows, bool) or not isinstance(self.driver_rows, int) or self.driver_rows < 0:
            raise ConfigError(f"driver_rows={self.driver_rows!r} must be a number of rows to re-run each driver in,"
                              f" 0 (every row) or more; use e.g. {DEFAULT_DRIVER_ROWS}.")
        if self.slice_by is not None and self.input_file is None:
            raise ConfigError(f"slice_by={self.slice_by!r} reads a column of the input file; pass input_file= too.")
