"""`ReportData`, `RunInfo`, `Section` and `ExampleTokens`: what one run found, as plain data.

Rendering (`render`), export (`export`) and `interpret.report.Report` (the data with those two as methods)
build on this module; it imports none of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Literal

from interpret.analysis.result import AnalyzerResult
from interpret.decision.decide import Decision
from interpret.evidence.evidence import Evidence
from interpret.report.comparison import ClassComparison
from interpret.trace import Trace

DEFAULT_MAX_BYTES = 20_000_000
PAIR_SEPARATOR = " ‖ "  # between a text and its pair where the report shows them on one line

SectionKind = Literal["analyzer", "attention"]
TokenSide = tuple[tuple[str, ...], tuple[str, ...], tuple[bool, ...], tuple[bool, ...]]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunInfo:
    """What was run: model, inputs, the decisions explained, seed, versions and timing (top of the report).

    model_id / revision: the model as loaded (revision: a commit hash or tag, when known).
    attention: how the patterns were obtained (`trace.meta.attention`: eager or recomputed).
    kind: encoder, decoder, encoder-decoder or vision.
    inputs: the input texts, one per example.
    request: what the user asked to explain, in words ("the prediction", "positive", "each gold label",
        "positive vs negative").
    decisions: one Decision per example: the prediction, its probability, the Target explained (each
        example its own) and the gold label when the input gave one.
    analyzers: the analyzers run, in section order.
    notes: facts a reader must see, as (label, text) pairs (e.g. that the default head is a demonstration).
    created: ISO 8601 time of the run (UTC); now when not given.
    """

    model_id: str
    revision: str | None = None
    attention: str = "eager"
    kind: str = "encoder"
    inputs: tuple[str, ...] = ()
    request: str = "the prediction"
    decisions: tuple[Decision, ...] = ()
    analyzers: tuple[str, ...] = ()
    notes: tuple[tuple[str, str], ...] = ()
    seed: int | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    wall_seconds: float | None = None
    created: str = field(default_factory=_now)

    def __post_init__(self) -> None:
        # A lone string is one input, not a sequence of one-character inputs.
        object.__setattr__(self, "inputs", (self.inputs,) if isinstance(self.inputs, str) else tuple(self.inputs))

    @classmethod
    def from_trace(cls, trace: Trace, **fields: Any) -> RunInfo:
        """Return the RunInfo of `trace` (model, attention source, kind, texts, versions); `fields` override."""
        base: dict[str, Any] = {
            "model_id": trace.meta.model_id,
            "attention": trace.meta.attention,
            "kind": trace.meta.kind,
            "inputs": tuple(trace.encoded.texts or ()),
            "versions": dict(trace.meta.versions),
        }
        base.update(fields)
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict of every field (non-finite probabilities as None)."""
        return {
            **{item.name: getattr(self, item.name) for item in fields(self)},
            "inputs": list(self.inputs),
            "decisions": [_finite(decision.to_dict()) for decision in self.decisions],
            "analyzers": list(self.analyzers),
            "notes": [list(note) for note in self.notes],
            "versions": dict(self.versions),
        }


def _finite(data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` with non-finite float values replaced by None (JSON has no NaN)."""
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value for key, value in data.items()}


@dataclass(frozen=True)
class ExampleTokens:
    """One example's tokens, padded to the batch's length like every array of the report.

    tokens / special / real: [pos] token strings, special-token flags, and real (not padding) flags.
    display: [pos] the tokens as a person reads them (subword markers resolved); () to show `tokens`.
    decoder_display: the same for the decoder side.
    words: [pos] the word each position belongs to (None for special tokens and padding); () when unknown.
    decoder_*: the same for the decoder side of an encoder-decoder model (empty otherwise).
    image_*: the same for the image side of a text-image dual encoder (its class token and patches; empty
        otherwise).
    id: the example's id from the input file, when it had one.
    text_pair: the second text of a text pair (an NLI hypothesis, a cross-encoder's passage), None for a single
        text; its tokens follow the text's in `tokens`, after the separator.
    """

    tokens: tuple[str, ...]
    special: tuple[bool, ...]
    real: tuple[bool, ...]
    text: str | None = None
    id: str | None = None
    display: tuple[str, ...] = ()
    words: tuple[int | None, ...] = ()
    decoder_tokens: tuple[str, ...] = ()
    decoder_special: tuple[bool, ...] = ()
    decoder_real: tuple[bool, ...] = ()
    decoder_display: tuple[str, ...] = ()
    image_tokens: tuple[str, ...] = ()
    image_special: tuple[bool, ...] = ()
    image_real: tuple[bool, ...] = ()
    image_display: tuple[str, ...] = ()
    text_pair: str | None = None

    def joined_text(self) -> str | None:
        """Return the text as one line shows it: the text, then PAIR_SEPARATOR and its pair for a text pair."""
        if self.text_pair is None:
            return self.text
        return (self.text or "") + PAIR_SEPARATOR + self.text_pair

    def side(self, decoder: bool) -> TokenSide:
        """Return one side's tokens as written, as shown (display forms, else as written), special and real flags."""
        if decoder:
            shown = self.decoder_display or self.decoder_tokens
            return self.decoder_tokens, shown, self.decoder_special, self.decoder_real
        return self.tokens, self.display or self.tokens, self.special, self.real

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict of every field."""
        lists = ("tokens", "display", "words", "special", "real", "decoder_tokens", "decoder_special", "decoder_real",
                 "decoder_display", "image_tokens", "image_special", "image_real", "image_display")
        return {"id": self.id, "text": self.text, "text_pair": self.text_pair,
                **{name: list(getattr(self, name)) for name in lists}}


@dataclass(frozen=True)
class Section:
    """One part of the report, drawn from one AnalyzerResult.

    key: the section's anchor and export folder name (unique within a report; letters, digits, - and _).
    title / description: the heading and the one line under it (an analyzer's registry summary).
    kind: "analyzer" for an analyzer's result; "attention" for the raw patterns, whose result holds
        `pattern` (or `encoder`, `decoder`, `cross`) arrays [batch, layer, head, query, key].
    layers: the model layer index of each entry of a `layer` axis of this section's arrays.
    heads: the model head index of each entry of a `head` axis ("mean"/"max" for a head-reduced trace).
    """

    key: str
    title: str
    kind: SectionKind
    result: AnalyzerResult
    description: str = ""
    layers: tuple[int, ...] = ()
    heads: tuple[int | str, ...] = ()


@dataclass(frozen=True)
class ReportData:
    """The report of one run as plain data: run info, ordered sections and the examples' tokens.

    layers / heads: the model layers and heads embedded in the HTML (a `layer` or `head` axis of any array
    is cut to these when rendering; export writes every array whole). `interpret.report.Report` adds
    rendering and export; build one with `build_report`.
    """

    run: RunInfo
    sections: tuple[Section, ...]
    examples: tuple[ExampleTokens, ...]
    layers: tuple[int, ...] = ()
    heads: tuple[int | str, ...] = ()
    top_k: int = 5
    evidence: Evidence | None = None  # faithfulness of each readout on these inputs (interpret.evidence)
    # class-specific readouts for the prediction, each asked class and the contrast (interpret.report.classes)
    classes: tuple[ClassComparison, ...] = ()

    @property
    def results(self) -> tuple[AnalyzerResult, ...]:
        """Return the analyzers' results, in section order (the attention section excluded)."""
        return tuple(section.result for section in self.sections if section.kind == "analyzer")

    def section(self, key: str) -> Section:
        """Return the section with this key."""
        for section in self.sections:
            if section.key == key:
                return section
        raise KeyError(f"no section {key!r}; sections: {[s.key for s in self.sections]}")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict: run (with each example's decision and target), examples, selection and
        each section with its full result."""
        return {
            "run": self.run.to_dict(),
            "layers": list(self.layers),
            "heads": list(self.heads),
            "examples": [example.to_dict() for example in self.examples],
            "sections": [
                {
                    "key": section.key,
                    "title": section.title,
                    "description": section.description,
                    "kind": section.kind,
                    "layers": list(section.layers),
                    "heads": list(section.heads),
                    "result": section.result.to_dict(),
                }
                for section in self.sections
            ],
            "evidence": None if self.evidence is None else self.evidence.to_dict(),
            "classes": [comparison.to_dict() for comparison in self.classes],
        }


def section_keys(names: Sequence[str]) -> list[str]:
    """Return unique, anchor-safe keys for section names (a repeated name gets -2, -3, ...)."""
    keys: list[str] = []
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-").lower() or "section"
        key, n = base, 2
        while key in keys:
            key, n = f"{base}-{n}", n + 1
        keys.append(key)
    return keys
