"""What an auditor reads first: the report's title, an overview of its texts (prediction, the lead method's top
tokens, its evidence verdict), the top tokens by each method and every invariant check, with failures.

With evidence on the report, methods are listed most faithful first (the evidence's order: mean comp − suff
over the report's examples), and on each example the methods that did no better than random there are
folded after the others instead of leading."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interpret.decision.decide import Decision
from interpret.evidence.aggregate import lead_of
from interpret.evidence.ranking import tie_groups
from interpret.report.model import PAIR_SEPARATOR, ReportData, Section

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
    """The tokens a method ranks highest for one example. For signed scores `top` holds only tokens for the
    decision (score > 0) and `against` the most negative, so no token is in both."""

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
    (earlier first). A signed method's top tokens are those for the decision (> 0), its "against" tokens the
    most negative: a token is never in both. Tokens are shown as a person reads them (the example's display
    form) when the report has one.
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
        signed = section.result.signed
        top = tuple(item(i) for i in [i for i in order if not signed or values[i][1] > 0][: report.top_k])
        against = tuple(item(i) for i in [i for i in reversed(order) if values[i][1] < 0][:_AGAINST])
        tops.append(MethodTop(section.key, section.result.analyzer, top, against))
    return tops


def summary_tops(
    report: ReportData, example: int, tops: list[MethodTop]
) -> tuple[list[MethodTop], list[MethodTop]]:
    """Return the example's `top_tokens` as the summary lists them: (the methods that beat random here, or were
    not evaluated; those no better than random here), each most faithful first by the report's evidence, then
    (not evaluated) in section order. Without evidence: every method in section order, none folded."""
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
        CheckRow(section.key, section.result.analyzer, name, check.description, check.value, check.tolerance, check.ok)
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
    raw, shown, special, real = report.examples[example].side(result.readout_of.side == "decoder")
    if len(raw) != row.shape[0]:
        return None
    scores = [
        (i, float(row[i])) for i in range(row.shape[0]) if real[i] and not special[i] and math.isfinite(row[i])
    ]
    return shown, raw, scores


TITLE_WORDS = 8  # the first words of a single text that title its report
EXCERPT_CHARACTERS = 80  # a text as the overview shows it


@dataclass(frozen=True)
class Verdict:
    """The lead method's evidence on one example: its comp − suff against the random rankings' mean ± sd.

    better: whether it beats random there (`Evidence.better_than_random`); None where it was not measured.
    """

    gap: float | None
    random: float | None
    spread: float | None
    better: bool | None


@dataclass(frozen=True)
class OverviewRow:
    """One text of a report as its overview lists it: what the model decided and what explains it best."""

    example: int
    id: str | None
    excerpt: str
    prediction: str | None
    probability: float | None
    top: tuple[TokenScore, ...]
    verdict: Verdict


def report_title(report: ReportData) -> str:
    """Return the report's title: "Report: <the first words of its text>" (a text pair: of the text, then "‖"
    and its pair), or "Report: N texts" ("inputs" when they were not given as text: token ids, images)."""
    texts = [example.joined_text() for example in report.examples]
    if len(texts) != 1 or texts[0] is None:
        return f"Report: {len(texts)} {'texts' if None not in texts else 'inputs'}"
    words = texts[0].split()
    return "Report: " + " ".join(words[:TITLE_WORDS]) + (" …" if len(words) > TITLE_WORDS else "")


def lead_method(report: ReportData, tops: list[list[MethodTop]]) -> str | None:
    """Return the analyzer whose top tokens the overview shows: the first in the evidence's order (most faithful
    on these inputs) that declares a readout, else the first readout; None without any readout."""
    readouts = [method.title for method in (tops[0] if tops else [])]
    ranked = [method.method for method in report.evidence.ranked()] if report.evidence is not None else []
    return lead_of(ranked, readouts)


def overview_rows(
    report: ReportData, tops: list[list[MethodTop]], decisions: Sequence[Decision | None]
) -> list[OverviewRow]:
    """Return one OverviewRow per example: its id, text excerpt (a text pair's with its pair), prediction and
    probability (`decisions`: each example's Decision or None), the lead method's top tokens and its evidence
    verdict."""
    lead = lead_method(report, tops)
    evidence = report.evidence
    measured = evidence is not None and any(method.method == lead for method in evidence.methods)
    rows = []
    for b, example in enumerate(report.examples):
        top = next((method.top for method in tops[b] if method.title == lead), ())
        verdict = Verdict(None, None, None, None)
        if measured:
            method = next(method for method in evidence.methods if method.method == lead)
            gap = float(method.gap[b])
            if math.isfinite(gap):
                verdict = Verdict(gap, float(evidence.random.gap[b]), float(evidence.random.spread["gap"][b]),
                                  bool(evidence.better_than_random(lead)[b]))
        decision = decisions[b]
        rows.append(OverviewRow(
            b, example.id, _excerpt_of(report, b), None if decision is None else _predicted(decision),
            None if decision is None else decision.predicted_probability, top, verdict,
        ))
    return rows


def _predicted(decision: Decision) -> str:
    """Return the prediction as the overview shows it: a classifier with one output with its score."""
    if decision.score is not None and decision.target.kind == "class":
        return f"{decision.predicted} (score {decision.score:.4g})"
    return decision.predicted


def excerpt(text: str, limit: int = EXCERPT_CHARACTERS) -> str:
    """Return `text` cut to `limit` characters, the last one an ellipsis when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _excerpt_of(report: ReportData, example: int) -> str:
    """Return an example's text (with its pair) as the overview shows it (`pair_excerpt`)."""
    return pair_excerpt(_text_of(report, example), report.examples[example].text_pair)


def pair_excerpt(text: str, pair: str | None, limit: int = EXCERPT_CHARACTERS) -> str:
    """Return `excerpt(text)`, or for a text pair its text, PAIR_SEPARATOR and its pair in `limit` characters, each
    cut to half the room unless the other leaves it more."""
    if pair is None:
        return excerpt(text, limit)
    room = limit - len(PAIR_SEPARATOR)
    half = room // 2
    first, second = excerpt(text, max(half, room - len(pair))), excerpt(pair, max(room - half, room - len(text)))
    return first + PAIR_SEPARATOR + second


def _text_of(report: ReportData, example: int) -> str:
    """Return an example's text, or its real non-special tokens joined when it was given as token ids."""
    tokens = report.examples[example]
    if tokens.text is not None:
        return tokens.text
    shown = tokens.display or tokens.tokens
    return " ".join(t for t, real, special in zip(shown, tokens.real, tokens.special) if real and not special)
