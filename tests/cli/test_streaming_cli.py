"""`interpret report --streaming auto|on|off`: a streamed report runs the streaming analyzers and embeds no
pattern; the pre-run size refusal lets a streamed run through where the full capture would be over budget, and
still refuses with --streaming off; an analyzer the user names without a streaming version is refused before the
model loads, and the default set streams, leaving such analyzers out with a note."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run

WORDS = "the cat sat on mat a dog saw red blue".split()
LONG = " ".join(WORDS[(7 * i) % len(WORDS)] for i in range(50))
SMALL_BUDGET = 60_000  # tiny GPT-2 (2 layers, 4 heads) at ~52 tokens: patterns ~87 kB, q, k, v and z ~53 kB


def _small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("interpret.cli.report_cmd.CAPTURE_BUDGET", SMALL_BUDGET)
    monkeypatch.setattr("interpret.cli.budget.CAPTURE_BUDGET", SMALL_BUDGET)


def test_streaming_on_writes_a_streamed_report(gpt2_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "streamed.json"
    result = run("report", "--model", str(gpt2_dir), "--text", LONG, "-a", "rollout", "--streaming", "on",
                 "--format", "json", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert '"streaming_rollout"' in text and "hook_pattern" not in text


def test_auto_streams_what_the_capture_budget_would_refuse(gpt2_dir: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _small_budget(monkeypatch)
    refused = run("report", "--model", str(gpt2_dir), "--text", LONG, "-a", "rollout", "--streaming", "off",
                  "-o", str(tmp_path / "off.json"), "--format", "json")
    assert refused.exit_code == 2 and "capture budget" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    out = tmp_path / "auto.json"
    streamed = run("report", "--model", str(gpt2_dir), "--text", LONG, "-a", "rollout", "--format", "json",
                   "-o", str(out), "-q")
    assert streamed.exit_code == 0, streamed.stderr
    assert '"streaming_rollout"' in out.read_text(encoding="utf-8")


def test_an_analyzer_without_a_streaming_version_is_refused_before_the_model_loads(
    gpt2_dir: Path, tmp_path: Path, loads: list[str]
) -> None:
    result = run("report", "--model", str(gpt2_dir), "--text", LONG, "-a", "flow", "--streaming", "on",
                 "-o", str(tmp_path / "flow.html"))
    assert result.exit_code == 2
    assert "streaming_rollout" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not loads


def test_the_default_analyzers_stream_with_a_note_for_those_left_out(gpt2_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "defaults.json"
    result = run("report", "--model", str(gpt2_dir), "--text", LONG, "--streaming", "on", "--no-evidence",
                 "--format", "json", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert '"streaming_rollout"' in text and "decompx left out" in text and "hook_pattern" not in text
