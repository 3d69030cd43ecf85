"""`Report`, `RunInfo`, `Section` and `ExampleTokens`: what one audit found, ready to render or export.

A report is plain data. `render` (HTML) and `export` (JSON, CSV, Parquet) live in their own modules; the
methods here only delegate to them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from interpret.analyze.result import AnalyzerResult
from interpret.trace import Trace

DEFAULT_MAX_BYTES = 20_000_000

SectionKind = Literal["analyzer", "attention"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunInfo:
    """What was run: model, input, decision, seed, versions and timing (shown at the top of the report).

    model_id / revision: the model as loaded (revision: a commit hash or tag, when known).
    attention: how the patterns were obtained (`trace.meta.attention`: eager or recomputed).
    kind: encoder, decoder, encoder-decoder or vision.
    inputs: the input texts, one per example.
    target: the class index or token the explanation is for (None: the model's own prediction).
    prediction / probability: the decision being explained, for the first example.
    created: ISO 8601 time of the run (UTC); now when not given.
    extra: anything else worth recording (shown as key/value rows); values must be JSON-compatible.
        `extra["decisions"]`, one mapping per example with `predicted`, `predicted_probability`, `target`
        and `probability`, is shown in each example's summary instead.
    """

    model_id: str
    revision: str | None = None
    attention: str = "eager"
    kind: str = "encoder"
    inputs: tuple[str, ...] = ()
    target: str | int | None = None
    prediction: str | None = None
    probability: float | None = None
    seed: int | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    wall_seconds: float | None = None
    created: str = field(default_factory=_now)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A lone string is one input, not a sequence of one-character inputs.
        if isinstance(self.inputs, str):
            object.__setattr__(self, "inputs", (self.inputs,))
        else:
            object.__setattr__(self, "inputs", tuple(self.inputs))

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
        """Return a JSON-ready dict of every field (NaN probability as None)."""
        probability = self.probability
        if probability is not None and not math.isfinite(probability):
            probability = None
        return {
            "model_id": self.model_id,
            "revision": self.revision,
            "attention": self.attention,
            "kind": self.kind,
            "inputs": list(self.inputs),
            "target": self.target,
            "prediction": self.prediction,
            "probability": probability,
            "seed": self.seed,
            "versions": dict(self.versions),
            "wall_seconds": self.wall_seconds,
            "created": self.created,
            "extra": dict(self.extra),
        }


@dataclass(frozen=True)
class ExampleTokens:
    """One example's tokens, padded to the batch's length like every array of the report.

    tokens / special / real: [pos] token strings, special-token flags, and real (not padding) flags.
    decoder_*: the same for the decoder side of an encoder-decoder model (empty otherwise).
    """

    tokens: tuple[str, ...]
    special: tuple[bool, ...]
    real: tuple[bool, ...]
    text: str | None = None
    decoder_tokens: tuple[str, ...] = ()
    decoder_special: tuple[bool, ...] = ()
    decoder_real: tuple[bool, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict of every field."""
        return {
            "text": self.text,
            "tokens": list(self.tokens),
            "special": list(self.special),
            "real": list(self.real),
            "decoder_tokens": list(self.decoder_tokens),
            "decoder_special": list(self.decoder_special),
            "decoder_real": list(self.decoder_real),
        }


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
class Report:
    """The report of one audit: run info, ordered sections and the examples' tokens.

    layers / heads: the model layers and heads embedded in the HTML (a `layer` or `head` axis of any array
    is cut to these when rendering; export() writes every array whole). Build one with `build_report`.
    """

    run: RunInfo
    sections: tuple[Section, ...]
    examples: tuple[ExampleTokens, ...]
    layers: tuple[int, ...] = ()
    heads: tuple[int | str, ...] = ()
    top_k: int = 5
    # The rendered page, kept so that projected_size() followed by render() builds it once.
    _cache: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

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

    def page(self) -> bytes:
        """Return the UTF-8 bytes of the self-contained HTML page (built once, then reused)."""
        if "page" not in self._cache:
            from interpret.report.render import render_page

            self._cache["page"] = render_page(self).encode("utf-8")
        return self._cache["page"]

    def projected_size(self) -> int:
        """Return the size in bytes of the HTML file `render` would write (also logged at INFO)."""
        from interpret.report.render import log_size

        size = len(self.page())
        log_size(size, None)
        return size

    def render(self, path: str | Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> Path:
        """Return the path of the one self-contained HTML file written there atomically.

        Raises ReportError, writing nothing, when the page would exceed `max_bytes` (None: no limit).
        """
        from interpret.report.render import write_report

        return write_report(self, Path(path), max_bytes=max_bytes)

    def export(self, directory: str | Path) -> list[Path]:
        """Return the files written under `directory`: every array and table as JSON, CSV and Parquet."""
        from interpret.report.export import export_report

        return export_report(self, Path(directory))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict: run, examples, selection and each section with its full result."""
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
