"""`interpret report -a integrated_gradients --format json -o -` on the default model gives the completeness delta
per example, in the checks with what to do when it is out of tolerance; a contrast is explained as asked."""

from __future__ import annotations

import json

import numpy as np
from cli_runner import run

TEXT = "A calm, honest and moving film."


def _section(stdout: str, name: str) -> dict:
    report = json.loads(stdout)
    return next(section["result"] for section in report["sections"] if section["result"]["analyzer"] == name)


def test_report_json_holds_the_completeness_delta() -> None:
    result = run("report", "--text", TEXT, "-a", "integrated_gradients", "--format", "json", "-o", "-")
    assert result.exit_code == 0, result.stderr
    section = _section(result.stdout, "integrated_gradients")
    check = section["checks"]["completeness_delta"]
    assert check["severity"] == "warning" and check["value"] <= check["tolerance"]
    delta = np.asarray(section["arrays"]["delta"]["values"])
    readout = np.asarray(section["arrays"]["readout"]["values"])
    gap = np.asarray(section["arrays"]["gap"]["values"])
    assert delta.shape == (1,) and abs(check["value"] - np.abs(delta).max()) < 1e-12
    # completeness: the token attributions add up to F(x) − F(baseline), up to the delta
    np.testing.assert_allclose(readout.sum(-1) - gap, delta, atol=1e-4)
    assert section["readout"]["signed"] is True


def test_too_few_steps_are_flagged_with_what_to_do() -> None:
    result = run("report", "--text", TEXT, "-a", "integrated_gradients", "--format", "json", "-o", "-",
                 "--set", "integrated_gradients.steps=2", "--set", "integrated_gradients.method=riemann_left",
                 "--target", "negative", "--contrast", "positive")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["run"]["decisions"][0]["target"]["label"] == "negative vs positive"
    check = _section(result.stdout, "integrated_gradients")["checks"]["completeness_delta"]
    assert check["value"] > check["tolerance"]
    assert "steps=8" in check["description"]


def test_repeated_targets_are_shown_side_by_side_in_the_export() -> None:
    result = run("report", "--text", TEXT, "-a", "integrated_gradients", "--format", "json", "-o", "-", "--no-evidence",
                 "--set", "integrated_gradients.steps=16", "--target", "positive", "--target", "negative",
                 "--contrast", "negative")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    (classes,) = report["classes"]
    assert classes["analyzer"] == "integrated_gradients"
    assert classes["roles"] == ["prediction", "asked", "asked", "contrast"]
    assert classes["labels"] == [["positive", "positive", "negative", "positive vs negative"]]
    scores = np.asarray(classes["scores"])[0]
    # the report explains the first --target against the contrast; IG is linear in the score
    np.testing.assert_allclose(scores[3], _section(result.stdout, "integrated_gradients")["arrays"]["readout"]["values"][0],
                               atol=1e-12)
    np.testing.assert_allclose(scores[3], scores[1] - scores[2], atol=1e-4)
    assert np.asarray(classes["words"]).shape[:2] == (1, 4) and classes["words_how"] == "sum"


def test_a_repeated_target_that_is_no_label_is_a_usage_error() -> None:
    result = run("report", "--text", TEXT, "-a", "integrated_gradients", "--target", "positive", "--target", "neutral")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--target" in result.stderr and "neutral" in result.stderr
