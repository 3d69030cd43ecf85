"""One line per example saying what the model decided and what the report explains (printed after `report`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def decision_lines(decisions: Sequence[Any], ids: Sequence[str | None] | None, tokenizer: Any) -> list[str]:
    """Return one line per example's `interpret.decision.decide.Decision`, e.g.

    `example 0 (id 17): prediction positive (p=0.93); explaining positive [prediction]; gold negative (wrong)`, or
    with a contrast `explaining negative (p=0.189) rather than positive (p=0.811) [given]`; a classifier with one
    output `prediction LABEL_0 (score 2.31); explaining its score [prediction]`.
    Token labels are shown as a person reads them (subword markers resolved) and quoted.
    """
    show = _token_display(tokenizer)
    lines = []
    for index, decision in enumerate(decisions):
        example_id = ids[index] if ids is not None and index < len(ids) else None
        head = f"example {index}" + (f" (id {example_id})" if example_id is not None else "")
        lines.append(f"{head}: {_describe(decision, show)}")
    return lines


def _describe(decision: Any, show: Any) -> str:
    target = decision.target
    if target.kind == "none":
        rows = ", ".join(str(position) for position, _ in target.pooling) or "none"
        return f"no decision to explain (the model has no classifier or language-model head); attention read from position {rows}"
    if target.kind == "similarity":  # a dual encoder's logit of the text and its image (SigLIP: with σ)
        return f"text-image similarity {decision.score:.4g}{_probability(decision.probability)}; explaining it [{target.source}]"
    quote = target.kind == "token"
    predicted = show(decision.predicted) if quote else decision.predicted
    if decision.score is not None:  # a classifier with one output: its logit (with σ where it is a probability)
        predicted += f" (score {decision.score:.4g}{'' if decision.probability is None else f', p={decision.probability:.3g}'})"
        parts = [f"prediction {predicted}", f"explaining its score [{target.source}]"]
        if decision.gold is not None:
            parts.append(f"gold {decision.gold}")
        return "; ".join(parts)
    parts = [f"prediction {predicted}{_probability(decision.predicted_probability)}"]
    labels = [show(label) if quote else label for label in target.labels]
    explained = " ".join(labels) if len(labels) > 1 else labels[0]
    steps = f" ({len(labels)} tokens)" if len(labels) > 1 else ""
    same_as_prediction = target.source == "prediction" and not target.contrast
    explained += f"{steps}{'' if same_as_prediction else _probability(decision.probability)}"
    if target.contrast_labels:  # each side with its own probability: "negative (p=0.189) rather than positive (p=0.811)"
        rivals = [show(label) if quote else label for label in target.contrast_labels]
        rival = rivals[0] if len(set(rivals)) == 1 else " ".join(rivals)
        explained += f" rather than {rival}{_probability(decision.contrast_probability)}"
    parts.append(f"explaining {explained} [{target.source}]")
    if decision.gold is not None:
        verdict = {True: " (correct)", False: " (wrong)", None: ""}[decision.correct]
        parts.append(f"gold {decision.gold}{verdict}")
    return "; ".join(parts)


def _probability(value: float | None) -> str:
    return "" if value is None else f" (p={value:.3g})"


def _token_display(tokenizer: Any) -> Any:
    """Return a function showing a raw token as its text, quoted (`'Paris'`, `' the'` keeps its space)."""
    from interpret.reading.text import display_tokens, token_scheme

    scheme = token_scheme(tokenizer)

    def show(token: str) -> str:
        return repr(display_tokens([str(token)], scheme)[0])

    return show
