"""What an auditor reads first: the top tokens by each method and every invariant check, with failures.

With evidence on the report, methods are listed most faithful first (the evidence's order: mean comp − suff
over the report's examples), and on each example the methods that did no better than random there are
folded after the others instead of leading."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from interpret.evidence.ranking import tie_groups
from interpret.report.model import ReportData, Section

# How many of the most negative tokens a signed method also lists (evidence against the decision).
_AGAINST = 3


@dataclass(frozen=True)
class TokenScore:
    """One token of one example with its score: as a person reads it (`token`) and as the tokenizer wrote it."""

    token: str
    position: int
    value: float
    raw: str = ""


@dataclass(frozen=True)
class MethodTop:
    """The tokens a method ranks highest for one example (`against`: the most negative, for signed scores)."""

    section: str
    title: str
    top: tuple[TokenScore, ...]
    against: tuple[TokenScore, ...] = ()


@dataclass(frozen=True)
class CheckRow:
    """One invariant check of one section, as the summary lists it."""

    section: str
    analyzer: str
    name: str
    description: str
    value: float
    tolerance: float
    ok: bool


def top_tokens(report: ReportData, example: int) -> list[MethodTop]:
    """Return, for each section whose result declares a readout ([batch, key]), its top tokens.

    Special tokens and padding are excluded; scores tied within `tie_groups`' tolerance rank by position
    (earlier first). Tokens are shown as a person reads them (the example's display form) when the report
    has one.
    """
    tops = []
    for section in report.sections:
        scores = _readout_row(report, section, example)
        if scores is None:
            continue
        shown, raw, values = scores

        def item(i: int) -> TokenScore:
            position, value = values[i]
            return TokenScore(shown[position], position, value, raw[position])

        groups = tie_groups(np.array([value for _, value in values]))
        order = sorted(range(len(values)), key=lambda i: (groups[i], values[i][0]))
        top = tuple(item(i) for i in order[: report.top_k])
        against = tuple(item(i) for i in [i for i in reversed(order) if values[i][1] < 0][:_AGAINST])
        tops.append(MethodTop(section.key, section.result.analyzer, top, against))
    return tops


def summary_tops(report: ReportData, example: int) -> tuple[list[MethodTop], list[MethodTop]]:
    """Return the example's `top_tokens` as the summary lists them: (the methods that beat random here, or were
    not evaluated; those no better than random here), each most faithful first by the report's evidence, then
    (not evaluated) in section order. Without evidence: every method in section order, none folded."""
    tops = top_tokens(report, example)
    evidence = report.evidence
    if evidence is None:
        return tops, []
    rank = {method.method: i for i, method in enumerate(evidence.ranked())}
    ordered = sorted(tops, key=lambda top: rank.get(top.title, len(rank)))  # stable: section order after
    weak = set(evidence.no_better_than_random(example))
    return [top for top in ordered if top.title not in weak], [top for top in ordered if top.title in weak]


def check_rows(report: ReportData) -> list[CheckRow]:
    """Return every check of every section, in section order."""
    return [
        CheckRow(
            section=section.key,
            analyzer=section.result.analyzer,
            name=name,
            description=check.description,
            value=check.value,
            tolerance=check.tolerance,
            ok=check.ok,
        )
        for section in report.sections
        for name, check in section.result.checks.items()
    ]


def failed_checks(report: ReportData) -> list[CheckRow]:
    """Return the checks whose value is out of tolerance (or NaN)."""
    return [row for row in check_rows(report) if not row.ok]


def _readout_row(
    report: ReportData, section: Section, example: int
) -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[int, float]]] | None:
    """Return the key tokens as shown and as written, and (position, score) of the declared readout, for real
    non-special keys only."""
    result = section.result
    if result.readout is None or result.readout_of is None:
        return None
    row = np.asarray(result.readout[example], dtype=np.float64)
    tokens_of = report.examples[example]
    if result.readout_of.side == "decoder":
        raw, shown = tokens_of.decoder_tokens, tokens_of.decoder_display or tokens_of.decoder_tokens
        special, real = tokens_of.decoder_special, tokens_of.decoder_real
    else:
        raw, shown = tokens_of.tokens, tokens_of.display or tokens_of.tokens
        special, real = tokens_of.special, tokens_of.real
    if len(raw) != row.shape[0]:
        return None
    scores = [
        (i, float(row[i])) for i in range(row.shape[0]) if real[i] and not special[i] and math.isfinite(row[i])
    ]
    return shown, raw, scores
