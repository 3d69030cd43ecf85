"""The `interpret` CLI through click's CliRunner: every command, option, exit code and one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from click.testing import CliRunner
from hf_tiny import WORDS, tiny_config, word_tokenizer

from interpret.cli.main import cli
from interpret.trace_io import load_trace

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT sentiment classifier (random weights, labels negative/positive) saved as safetensors."""
    torch.manual_seed(0)
    tokenizer = word_tokenizer()
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.id2label, config.label2id = {0: "negative", 1: "positive"}, {"negative": 0, "positive": 1}
    directory = tmp_path_factory.mktemp("tiny-bert")
    transformers.BertForSequenceClassification(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def run(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_version_names_the_three_versions() -> None:
    result = run("--version")
    assert result.exit_code == 0
    assert all(name in result.stdout for name in ("transformer-audit", "torch", "transformers"))


def test_analyzers_list_and_show() -> None:
    listed = run("analyzers", "list", "--format", "json")
    assert {row["name"] for row in json.loads(listed.stdout)} >= {"rollout", "flow"}
    shown = json.loads(run("analyzers", "show", "rollout", "--format", "json").stdout)
    assert "head_fusion" in [p["name"] for p in shown["params"]]
    unknown = run("analyzers", "show", "rolout")
    assert unknown.exit_code == 2 and "Did you mean 'rollout'?" in unknown.stderr


def test_report_html(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = run("report", "--model", str(model_dir), "--text", TEXT, "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html>")


def test_report_json_to_stdout_parses(model_dir: Path) -> None:
    result = run(
        "report", "--model", str(model_dir), "--text", TEXT, "--format", "json", "-o", "-",
        "-a", "rollout", "--set", "rollout.head_fusion=max", "--target", "positive", "--layers", "0", "--seed", "3",
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["run"]["request"] == "positive" and data["run"]["seed"] == 3
    assert all(d["target"]["label"] == "positive" and d["target"]["source"] == "given" for d in data["run"]["decisions"])


def test_report_from_input_files(model_dir: Path, tmp_path: Path) -> None:
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text('{"text": "the cat sat", "label": "positive"}\n{"text": "a dog saw red"}\n')
    csv = tmp_path / "data.csv"
    csv.write_text("text,label\nthe cat sat,positive\na dog saw red,negative\n")
    for source in (jsonl, csv):
        out = tmp_path / f"{source.stem}-{source.suffix[1:]}.json"
        result = run("report", "--model", str(model_dir), "--input", str(source), "--format", "json", "-o", str(out), "-q")
        assert result.exit_code == 0, result.stderr
        assert json.loads(out.read_text())["run"]["inputs"] == ["the cat sat", "a dog saw red"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-a", "rolout"], "Did you mean 'rollout'?"),
        (["--set", "rollout.head_fusoin=max"], "valid: residual, head_fusion"),
        (["--set", "rollout.head_fusion=median"], "must be one of mean, max, min"),
        (["--set", "flow.rows=all"], "add -a flow"),
        (["--set", "nonsense"], "NAME.KEY=VALUE"),
        (["--text", "   "], "--text is empty"),
        (["--layers", "x"], "comma-separated"),
        (["--device", "tpu"], "tpu"),
    ],
)
def test_usage_errors_exit_2_with_one_line(model_dir: Path, args: list[str], fragment: str) -> None:
    base = ["report", "--model", str(model_dir), "-a", "rollout"]
    if "--text" not in args:
        base += ["--text", TEXT]
    result = run(*base, *args)
    assert result.exit_code == 2, result.stderr
    assert fragment in result.stderr


def test_text_and_input_are_exclusive(model_dir: Path, tmp_path: Path) -> None:
    assert run("report", "--model", str(model_dir)).exit_code == 2
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a"}\n')
    assert run("report", "--model", str(model_dir), "--text", TEXT, "--input", str(data)).exit_code == 2


def _runtime_error(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_runtime_errors_are_one_line(model_dir: Path, tmp_path: Path) -> None:
    missing = _runtime_error("report", "--model", str(tmp_path / "nope"), "--text", TEXT, "-q")
    assert "nope" in missing
    long_text = " ".join(WORDS * 10)
    too_long = _runtime_error("report", "--model", str(model_dir), "--text", long_text, "-q")
    assert "at most" in too_long and "--max-length" in too_long
    unreadable = _runtime_error("report", "--model", str(model_dir), "--input", str(tmp_path / "x.jsonl"), "-q")
    assert "cannot read" in unreadable
    no_text = tmp_path / "bad.csv"
    no_text.write_text("sentence,label\nhi,1\n")
    assert "no 'text' column" in _runtime_error("report", "--model", str(model_dir), "--input", str(no_text), "-q")
    if not torch.cuda.is_available():
        assert "no CUDA" in _runtime_error("report", "--model", str(model_dir), "--text", TEXT, "--device", "cuda", "-q")


def test_max_length_truncates(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "long.json"
    long_text = " ".join(WORDS * 10)
    result = run("report", "--model", str(model_dir), "--text", long_text, "--max-length", "16",
                 "--format", "json", "-o", str(out), "-a", "rollout", "-q")
    assert result.exit_code == 0, result.stderr
    assert out.exists()


def test_verbose_shows_the_traceback(tmp_path: Path) -> None:
    result = run("report", "--model", str(tmp_path / "nope"), "--text", TEXT, "-v")
    assert result.exit_code == 1 and "Traceback" in result.stderr


def test_collect_saves_a_trace(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.safetensors"
    result = run("collect", "--model", str(model_dir), "--text", TEXT, "--text", "a dog", "--names",
                 "blocks.*.attn.hook_pattern", "--names", "blocks.0.hook_resid_post", "--layers", "0",
                 "--reduce", "mean", "-o", str(out), "--format", "json", "-q")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    trace = load_trace(out)
    assert summary["tensors"]["blocks.0.attn.hook_pattern"] == list(trace["blocks.0.attn.hook_pattern"].shape)
    assert trace.meta.reduce == "mean" and trace.encoded.tokens[1][:2] == ["[CLS]", "a"]
    bad = run("collect", "--model", str(model_dir), "--text", TEXT, "--names", "blocks.*.attn.hook_patern")
    assert bad.exit_code == 1 and "Did you mean" in bad.stderr


def test_audit_writes_tables_and_resumes(model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    rows = [{"text": text, "label": label} for text, label in
            [("the cat sat", "positive"), ("a dog saw red", "negative"), ("the mat", "positive")]]
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    out = tmp_path / "audit"
    args = ["audit", "--model", str(model_dir), "--input", str(data), "-o", str(out), "--batch-size", "2",
            "-a", "rollout", "--set", "rollout.head_fusion=max", "--format", "json", "-q"]
    first = run(*args)
    assert first.exit_code == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["examples"] == 3 and 0.0 <= summary["accuracy"] <= 1.0
    assert (out / "tokens.parquet").is_file() and (out / "summary.html").is_file()
    again = run(*args)
    assert again.exit_code == 0 and json.loads(again.stdout) == summary
    changed = run(*[a if a != "2" else "3" for a in args])
    assert changed.exit_code == 1 and "--fresh" in changed.stderr
    assert run(*[a if a != "2" else "3" for a in args], "--fresh").exit_code == 0


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_tiny import save_tiny

    return save_tiny("t5", tmp_path_factory.mktemp("tiny-t5"))


def test_encoder_decoder_needs_and_takes_decoder_text(t5_dir: Path, tmp_path: Path) -> None:
    missing = _runtime_error("report", "--model", str(t5_dir), "--text", TEXT, "-a", "rollout", "-q")
    assert "--decoder-text" in missing
    out = tmp_path / "t5.json"
    result = run("report", "--model", str(t5_dir), "--text", TEXT, "--decoder-text", "a dog", "-a", "rollout",
                 "--format", "json", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    trace_out = tmp_path / "t5.safetensors"
    collected = run("collect", "--model", str(t5_dir), "--text", TEXT, "--decoder-text", "a dog", "-o", str(trace_out), "-q")
    assert collected.exit_code == 0, collected.stderr
    assert load_trace(trace_out).encoded.decoder is not None
