"""Every ranking of a readout ties scores within a tolerance and breaks ties by position, so that an example's
ranking, and every metric computed from it, is the same alone and in any batch (float noise cannot move it)."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

import interpret
from interpret.audit.tables import token_columns, token_frame
from interpret.evidence.agreement import rank_agreement
from interpret.evidence.ranking import TIE_TOLERANCE, order_of, tie_groups
from interpret.models.default_model import load_default
from interpret.reading.datasets import Example
from interpret.report.summary import top_tokens


def test_tie_groups_chain_scores_within_the_tolerance_of_the_scale() -> None:
    scale = 3.0
    near = 0.3 * TIE_TOLERANCE * scale  # inside the tolerance: tied
    far = 3.0 * TIE_TOLERANCE * scale  # outside: a new group
    scores = np.array([1.0, scale, 1.0 + near, 1.0 - far, np.nan, 1.0 + 2 * near, -np.inf, 0.0])
    assert tie_groups(scores).tolist() == [1, 0, 1, 2, 4, 1, 4, 3]  # 1, 1 + near, 1 + 2·near chain into one group
    assert tie_groups(scores * 1e-3).tolist() == tie_groups(scores).tolist()  # relative to the example's scale
    assert tie_groups(np.zeros(4)).tolist() == [0, 0, 0, 0]
    assert tie_groups(np.zeros(0)).tolist() == []


def test_tied_scores_rank_by_position_whatever_their_noise() -> None:
    # Positions 2, 4, 5, 7 share one value (as flow's content tokens often do); float noise of 1e-9 of the scale,
    # drawn differently each time, must not reorder them: they rank by position.
    rng = np.random.default_rng(0)
    readout = np.array([9.0, 0.2, 0.5, 0.9, 0.5, 0.5, 0.1, 0.5, 0.7])
    positions = np.arange(1, 9)
    expected = [3, 8, 2, 4, 5, 7, 1, 6]
    for _ in range(20):
        noisy = readout * (1 + 1e-9 * rng.standard_normal(readout.shape))
        assert order_of(noisy, positions).tolist() == expected
    rho, tau = rank_agreement([readout[positions], (readout * (1 + 1e-9 * rng.standard_normal(9)))[positions]])
    assert rho[0, 1] == 1.0 and tau[0, 1] == 1.0  # the noisy copy of a readout agrees with it perfectly


def _heldout(*rows: int) -> list[str]:
    data = resources.files("interpret.data").joinpath("sentiment_heldout.jsonl")
    lines = data.read_text(encoding="utf-8").splitlines()
    return [json.loads(lines[row])["text"] for row in rows]


def _evidence_of(evidence: dict, b: int) -> dict[str, object]:
    """Every number of example b's evidence (the report's JSON: methods, random baseline, agreement), flat."""
    flat: dict[str, object] = {}

    def walk(value: object, path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{path}/{key}")
        elif isinstance(value, list):
            for i, inner in enumerate(value):
                walk(inner, f"{path}/{i}")
        else:
            flat[path] = value

    per_example = ("full_probability", "candidates", "methods", "random", "better_than_random", "agreement")
    for key in per_example:
        walk(_example_slice(evidence[key], b), key)
    return flat


def _example_slice(value: object, b: int) -> object:
    """Return the example-b part of an evidence entry (its per-example lists are batch-first)."""
    if isinstance(value, dict):
        return {k: (v if k in ("method", "methods") else _example_slice(v, b)) for k, v in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [_example_slice(v, b) for v in value]
    return value[b] if isinstance(value, list) else value


def _same(ours: dict, theirs: dict) -> bool:
    """Whether two flat evidences hold the same entries: floats within 1e-9, anything else equal."""
    return ours.keys() == theirs.keys() and all(
        abs(a - b) <= 1e-9 if isinstance(a, float) and isinstance(b, float) else a == b
        for a, b in ((ours[k], theirs[k]) for k in ours)
    )


def _tops(report: object, b: int) -> list[tuple[str, list[int], list[int]]]:
    return [(m.section, [t.position for t in m.top], [t.position for t in m.against]) for m in top_tokens(report, b)]


@pytest.mark.slow
def test_an_examples_evidence_is_the_same_alone_and_in_any_batch() -> None:
    """Held-out sentence 9 ("The jumper pilled after one wear.") has content tokens that attention flow ties; in a
    batch padded for a longer sentence their float noise differs and, ranked by raw value, their order flipped
    (its evidence with it). Every number of an example's evidence, its top tokens and its audit ranks must be
    those it gets alone, in batches of other compositions, paddings and positions."""
    model, tokenizer, head = load_default("cpu")
    jumper, long_, theatre = _heldout(9, 36, 51)
    methods = ["flow", "rollout", "integrated_gradients"]

    def run(texts: list[str]) -> tuple[object, object]:
        report = interpret.explain(model, tokenizer, texts, methods, head=head)
        examples = [Example(row=i, text=text) for i, text in enumerate(texts)]
        tokens = token_frame([token_columns(examples, interpret.encode(tokenizer, texts), [s.result for s in report.sections])])
        return report, tokens

    alone = {text: run([text]) for text in (jumper, long_, theatre)}
    for batch in ([long_, jumper], [jumper, theatre, long_], [theatre, jumper]):
        report, tokens = run(batch)
        evidence = report.to_dict()["evidence"]
        for b, text in enumerate(batch):
            single, single_tokens = alone[text]
            n = len(single.examples[0].tokens)
            for section, own in zip(report.sections, single.sections):
                if section.result.readout is None:  # e.g. a section drawing an analyzer's other arrays
                    continue
                # the analyzers themselves: the same readout to well within the tie tolerance
                ours, theirs = np.asarray(section.result.readout[b][:n]), np.asarray(own.result.readout[0])
                assert np.abs(ours - theirs).max() <= 0.1 * TIE_TOLERANCE * np.abs(theirs).max(), section.key
            assert _same(_evidence_of(evidence, b), _evidence_of(single.to_dict()["evidence"], 0)), text
            assert _tops(report, b) == _tops(single, 0), text
            ranks = tokens[tokens["row"] == b][["analyzer", "position", "rank"]].reset_index(drop=True)
            expected = single_tokens[["analyzer", "position", "rank"]].reset_index(drop=True)
            assert ranks.equals(expected), text
