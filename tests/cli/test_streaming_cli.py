"""`interpret report --streaming auto|on|off`: a streamed report runs each analyzer's streamed computation (its
result keeps the analyzer's name, strategy "streamed") and embeds no pattern; the pre-run size refusal lets a
streamed run through where the full capture would be over budget, and still refuses with --streaming off; an
analyzer the user names without a streamed computation is refused before the model loads, and the default set
streams, leaving such analyzers out with a note. `interpret audit --streaming on` streams every batch; the old
streaming_* names run their twin streamed, with a warning line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run

WORDS = "the cat sat on mat a dog saw red blue".split()
LONG = " ".join(WORDS[(7 * i) % len(WORDS)] for i in range(50))
SMALL_BUDGET = 60_000  # tiny GPT-2 (2 layers, 4 heads) at ~52 tokens: patterns ~87 kB, q, k, v and z ~53 kB


def _streamed_rollout(text: str) -> bool:
    """Return whether a report's JSON holds a result of rollout run streamed."""
    def found(node: object) -> bool:
        if isinstance(node, dict):
            return (node.get("analyzer") == "rollout" and node.get("strategy") == "streamed") or any(
                found(value) for value in node.values())
        return isinstance(node, list) and any(found(value) for value in node)

    return found(json.loads(text))


def _small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("interpret.cli.options.CAPTURE_BUDGET", SMALL_BUDGET)  # the run's Limits
    monkeypatch.setattr("interpret.cli.budget.CAPTURE_BUDGET", SMALL_BUDGET)


def test_streaming_on_writes_a_streamed_report(gpt2_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "streamed.json"
    result = run("report", "--model", str(gpt2_dir), "--text", LONG, "-a", "rollout", "--streaming", "on",
                 "--format", "json", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert _streamed_rollout(text) and "hook_pattern" not in text


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
    assert _streamed_rollout(out.read_text(encoding="utf-8"))


def test_an_analyzer_without_a_streaming_version_is_refused_before_the_model_loads(
    gpt2_dir: Path, tmp_path: Path, loads: list[str]
) -> None:
    result = run("report", "--model", str(gpt2_dir), "--text", LONG, "-a", "flow", "--streaming", "on",
                 "-o", str(tmp_path / "flow.html"))
    assert result.exit_code == 2
    assert "use analyzers that stream (" in result.stderr and "rollout" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not loads


def test_the_default_analyzers_stream_with_a_note_for_those_left_out(gpt2_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "defaults.json"
    result = run("report", "--model", str(gpt2_dir), "--text", LONG, "--streaming", "on", "--no-evidence",
                 "--format", "json", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert _streamed_rollout(text) and "decompx left out" in text and "hook_pattern" not in text


def test_an_old_streaming_name_runs_its_twin_streamed_with_a_warning(gpt2_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "old.json"
    result = run("report", "--model", str(gpt2_dir), "--text", LONG, "-a", "streaming_rollout", "--set",
                 "rollout.block_mib=1", "--format", "json", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert "-a streaming_rollout is now -a rollout streamed" in result.stderr
    assert _streamed_rollout(out.read_text(encoding="utf-8"))
    listed = run("analyzers", "list")
    assert listed.exit_code == 0 and "streaming_" not in listed.stdout


def test_an_audit_streams_every_batch_and_refuses_before_the_model_loads_what_cannot_stream(
    gpt2_dir: Path, tmp_path: Path, loads: list[str]
) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": LONG[: 40 + 9 * i]}) + "\n" for i in range(3)), encoding="utf-8")
    refused = run("audit", "--model", str(gpt2_dir), "--input", str(data), "-a", "flow", "--streaming", "on",
                  "-o", str(tmp_path / "flow"))
    assert refused.exit_code == 2 and "use analyzers that stream (" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not loads
    out = tmp_path / "streamed"
    streamed = run("audit", "--model", str(gpt2_dir), "--input", str(data), "-a", "rollout", "--streaming", "on",
                   "-o", str(out), "-q")
    assert streamed.exit_code == 0, streamed.stderr
    assert "rollout (streamed)" in (out / "manifest.json").read_text(encoding="utf-8")
