"""The `interpret` CLI through click's CliRunner: every command's output, and runtime failures as one line."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch
from cli_runner import run
from hf_tiny import WORDS

from interpret.files.trace_io import load_trace

TEXT = "the cat sat on the mat"


def _one_error_line(result: object, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_version_names_the_three_versions() -> None:
    result = run("--version")
    assert result.exit_code == 0
    assert all(name in result.stdout for name in ("transformer-audit", "torch", "transformers"))


def test_analyzers_list_and_show() -> None:
    listed = run("analyzers", "list", "--format", "json")
    assert {row["name"] for row in json.loads(listed.stdout)} >= {"rollout", "flow"}
    shown = json.loads(run("analyzers", "show", "rollout", "--format", "json").stdout)
    assert "head_fusion" in [p["name"] for p in shown["params"]] and shown["provides"] == ["readout"]
    text = run("analyzers", "show", "rollout").stdout
    assert "parameters (--set rollout.KEY=VALUE):" in text and "head_fusion" in text


def test_report_html_prints_the_decision_and_the_path(classifier_dir: Path, tmp_path: Path, loads: list[str]) -> None:
    out = tmp_path / "r.html"
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "-o", str(out), "-a", "rollout", "-q")
    assert result.exit_code == 0, result.stderr
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html>")
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == f"wrote {out}"
    assert lines[0].startswith("example 0: prediction ") and "[prediction]" in lines[0]
    assert loads == [f"load {classifier_dir}"]


def test_report_json_to_stdout_is_pure_json(classifier_dir: Path) -> None:
    result = run(
        "report", "--model", str(classifier_dir), "--text", TEXT, "--format", "json", "-o", "-",
        "-a", "rollout", "--set", "rollout.head_fusion=max", "--target", "positive", "--layers", "0", "--heads", "1,-1",
        "--seed", "3",
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["run"]["request"] == "positive" and data["run"]["seed"] == 3
    assert data["layers"] == [0] and data["heads"] == [1, 3]
    decision = data["run"]["decisions"][0]
    assert decision["target"]["label"] == "positive" and decision["target"]["source"] == "given"
    # The decision line goes to stderr when the report itself is on stdout, with the target's probability.
    line = next(line for line in result.stderr.splitlines() if line.startswith("example 0"))
    assert f"explaining positive (p={decision['probability']:.3g}) [given]" in line


def test_the_default_model_is_named_with_its_logistic_head() -> None:
    result = run("collect", "--text", TEXT, "--decoder-text", "a dog")
    assert result.exit_code == 2
    assert "--model the default model (MiniLM-L6 with a logistic-regression sentiment head) is an encoder" in result.stderr


def test_report_from_input_files_keeps_ids_and_gold(classifier_dir: Path, tmp_path: Path) -> None:
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text('{"id": "a7", "text": "the cat sat", "label": "positive"}\n{"id": "b2", "text": "a dog saw red"}\n')
    csv = tmp_path / "data.csv"
    csv.write_text("text,label\nthe cat sat,positive\na dog saw red,negative\n")
    for source in (jsonl, csv):
        out = tmp_path / f"{source.stem}-{source.suffix[1:]}.json"
        result = run("report", "--model", str(classifier_dir), "--input", str(source), "--format", "json",
                     "-o", str(out), "-a", "rollout", "-q")
        assert result.exit_code == 0, result.stderr
        data = json.loads(out.read_text())
        assert data["run"]["inputs"] == ["the cat sat", "a dog saw red"]
        lines = result.stdout.splitlines()
        assert len(lines) == 3 and lines[-1] == f"wrote {out}"
        decisions = data["run"]["decisions"]
        verdict = "correct" if decisions[0]["correct"] else "wrong"
        assert lines[0].endswith(f"; gold positive ({verdict})")
        if source is jsonl:
            assert lines[0].startswith("example 0 (id a7): ") and lines[1].startswith("example 1 (id b2): ")
            assert "gold" not in lines[1] and [e["id"] for e in data["examples"]] == ["a7", "b2"]


def test_report_contrast(classifier_dir: Path) -> None:
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "--format", "json", "-o", "-",
                 "-a", "rollout", "--target", "negative", "--contrast", "positive")
    assert result.exit_code == 0, result.stderr
    decision = json.loads(result.stdout)["run"]["decisions"][0]
    target = decision["target"]
    assert target["labels"] == ["negative"] and target["contrast_labels"] == ["positive"]
    # each class with its own probability (two classes: they sum to one)
    negative, positive = decision["probability"], decision["contrast_probability"]
    assert negative + positive == pytest.approx(1, abs=1e-12)
    assert f"explaining negative (p={negative:.3g}) rather than positive (p={positive:.3g}) [given]" in result.stderr


def test_report_language_model_token_target_and_continuation(gpt2_dir: Path) -> None:
    given = run("report", "--model", str(gpt2_dir), "--text", "the cat sat on", "--target", "mat",
                "-a", "rollout", "--format", "json", "-o", "-")
    assert given.exit_code == 0, given.stderr
    assert json.loads(given.stdout)["run"]["decisions"][0]["target"]["source"] == "given"
    assert "explaining 'mat'" in given.stderr
    continued = run("report", "--model", str(gpt2_dir), "--text", "the cat", "--continuation", "sat on",
                    "-a", "rollout", "--format", "json", "-o", "-")
    assert continued.exit_code == 0, continued.stderr
    assert len(json.loads(continued.stdout)["run"]["decisions"][0]["target"]["ids"]) == 2
    assert "(2 tokens)" in continued.stderr


def test_max_length_cuts_the_text_before_a_whole_continuation(gpt2_dir: Path) -> None:
    result = run("report", "--model", str(gpt2_dir), "--text", " ".join(WORDS * 3), "--continuation", "the cat sat",
                 "--max-length", "8", "-a", "rollout", "--format", "json", "-o", "-", "-q")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["examples"][0]["tokens"] == ["[CLS]", "the", "cat", "sat", "[SEP]", "the", "cat", "sat"]
    assert len(data["run"]["decisions"][0]["target"]["ids"]) == 3


def test_a_vision_language_model_on_text_generates_and_takes_layer_options(tmp_path: Path) -> None:
    """Llama 3.2 Vision (Mllama) saved with its config.json's layers, heads and vocabulary in `text_config`: the
    checks made before loading read them there, so `--generate` and `--layers` apply (they were refused: the model
    was taken for an encoder with 0 layers), and the report explains the generated tokens over the 2 blocks that
    run on text (its cross-attention block is skipped)."""
    from hf_tiny import save_tiny

    directory = save_tiny("mllama", tmp_path / "mllama")
    result = run("report", "--model", str(directory), "--text", "the cat", "--generate", "2", "--layers", "-1",
                 "-a", "rollout", "--format", "json", "-o", "-", "--no-evidence")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    decision = data["run"]["decisions"][0]
    assert decision["target"]["source"] == "generated" and len(decision["target"]["ids"]) == 2
    assert data["layers"] == [1] and "(2 tokens)" in result.stderr  # -1: the last of the 2 layers that run
    assert next(s for s in data["sections"] if s["key"] == "rollout")["layers"] == [0, 1]


def test_generate_explains_the_generated_tokens(llama_dir: Path, gpt2_dir: Path, t5_dir: Path, tmp_path: Path) -> None:
    """`--generate 3` end to end: the model generates (transformers' greedy generate, called here directly for
    the reference), the report explains each generated token (Integrated Gradients' per_step rows) and shows the
    continuation marked as generated; a model that ends its sequence generates fewer; an encoder-decoder
    generates its decoder side."""
    import transformers

    result = run("report", "--model", str(llama_dir), "--text", "the cat", "--generate", "3", "-a", "rollout",
                 "-a", "integrated_gradients", "--format", "json", "-o", "-", "--no-evidence")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    decision = data["run"]["decisions"][0]
    model = transformers.AutoModelForCausalLM.from_pretrained(llama_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(llama_dir)
    prompt = torch.tensor([tokenizer("the cat")["input_ids"]])
    expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=3)[0, prompt.shape[1]:]
    assert decision["target"]["ids"] == expected.tolist() and decision["target"]["source"] == "generated"
    assert decision["continuation"] == tokenizer.decode(expected) and "(3 tokens)" in result.stderr
    assert data["examples"][0]["tokens"][-3:] == tokenizer.convert_ids_to_tokens(expected.tolist())
    per_step = next(s for s in data["sections"] if s["key"] == "integrated_gradients")["result"]["arrays"]["per_step"]
    rows = [p for p, row in enumerate(per_step["values"][0]) if any(row)]
    assert rows == decision["target"]["positions"] == [prompt.shape[1] - 1, prompt.shape[1], prompt.shape[1] + 1]
    page = tmp_path / "generated.html"
    assert run("report", "--model", str(llama_dir), "--text", "the cat", "--generate", "3", "-a", "rollout",
               "-o", str(page), "-q").exit_code == 0
    assert f"<dt>Generated</dt><dd><bdi class=\"continuation\">{tokenizer.decode(expected)}</bdi>" in page.read_text()
    ended = run("report", "--model", str(gpt2_dir), "--text", "the cat", "--generate", "3", "-a", "rollout",
                "--format", "json", "-o", "-", "--no-evidence")  # the tiny GPT-2 writes its end-of-sequence token first
    assert ended.exit_code == 0, ended.stderr
    assert json.loads(ended.stdout)["run"]["decisions"][0]["target"]["labels"] == ["[SEP]"]
    seq2seq = run("report", "--model", str(t5_dir), "--text", "the cat", "--generate", "2", "-a", "rollout",
                  "--format", "json", "-o", "-", "--no-evidence")
    assert seq2seq.exit_code == 0, seq2seq.stderr
    target = json.loads(seq2seq.stdout)["run"]["decisions"][0]["target"]
    assert target["source"] == "generated" and target["positions"] == [0, 1]


def test_generate_gives_one_row_per_generated_token_for_the_attention_gradient_methods(llama_dir: Path) -> None:
    """`report --generate 2` with attention × gradient and gradient-weighted rollout: the JSON export holds a
    per_step array for each, with a row at each generated token's scoring position and nowhere else."""
    result = run("report", "--model", str(llama_dir), "--text", "the cat", "--generate", "2", "-a",
                 "attention_x_gradient", "-a", "gradient_weighted_rollout", "--format", "json", "-o", "-", "--no-evidence")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    positions = data["run"]["decisions"][0]["target"]["positions"]
    assert len(positions) == 2 and data["run"]["decisions"][0]["target"]["source"] == "generated"
    for name in ("attention_x_gradient", "gradient_weighted_rollout"):
        per_step = next(s for s in data["sections"] if s["key"] == name)["result"]["arrays"]["per_step"]
        assert [p for p, row in enumerate(per_step["values"][0]) if any(row)] == positions, name


def test_max_length_truncates(classifier_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "long.json"
    long_text = " ".join(WORDS * 10)
    result = run("report", "--model", str(classifier_dir), "--text", long_text, "--max-length", "16",
                 "--format", "json", "-o", str(out), "-a", "rollout", "-q")
    assert result.exit_code == 0, result.stderr
    tokens = json.loads(out.read_text())["examples"][0]["tokens"]
    assert len(tokens) == 16 and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"  # cut as the tokenizer cuts


def test_encoder_decoder_takes_decoder_text(t5_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "t5.json"
    result = run("report", "--model", str(t5_dir), "--text", TEXT, "--decoder-text", "a dog", "-a", "rollout",
                 "--format", "json", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    trace_out = tmp_path / "t5.safetensors"
    collected = run("collect", "--model", str(t5_dir), "--text", TEXT, "--decoder-text", "a dog", "-o", str(trace_out), "-q")
    assert collected.exit_code == 0, collected.stderr
    assert load_trace(trace_out).encoded.decoder is not None


def test_collect_saves_a_trace(classifier_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.safetensors"
    result = run("collect", "--model", str(classifier_dir), "--text", TEXT, "--text", "a dog", "--names",
                 "blocks.*.attn.hook_pattern", "--names", "blocks.0.hook_resid_post", "--layers", "0",
                 "--reduce", "mean", "-o", str(out), "--format", "json", "-q")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    trace = load_trace(out)
    assert summary["tensors"]["blocks.0.attn.hook_pattern"] == list(trace["blocks.0.attn.hook_pattern"].shape)
    assert trace.meta.reduce == "mean" and trace.encoded.tokens[1][:2] == ["[CLS]", "a"]
    text = run("collect", "--model", str(classifier_dir), "--text", TEXT, "-o", str(out), "-q")
    assert text.stdout.splitlines()[-1].startswith(f"wrote {out} (2 tensors")


def test_audit_prints_a_table_writes_tables_and_resumes(classifier_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    rows = [{"text": text, "label": label} for text, label in
            [("the cat sat", "positive"), ("a dog saw red", "negative"), ("the mat", "positive")]]
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    out = tmp_path / "audit"
    args = ["audit", "--model", str(classifier_dir), "--input", str(data), "-o", str(out), "--batch-size", "2",
            "-a", "rollout", "--set", "rollout.head_fusion=max", "-q"]
    first = run(*args, "--format", "json")
    assert first.exit_code == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["examples"] == 3 and summary["computed"] == 3 and 0.0 <= summary["accuracy"] <= 1.0
    assert (out / "tokens.parquet").is_file() and (out / "summary.html").is_file()
    again = run(*args)
    assert again.exit_code == 0, again.stderr
    table = again.stdout.splitlines()
    assert table[0] == "audit of data.jsonl"
    assert "3 (0 computed, 3 resumed)" in table[1]
    assert f"{100 * summary['accuracy']:.1f}% of labelled examples" in table[2]
    assert "[" not in again.stdout and "PosixPath" not in again.stdout
    changed = run(*[a if a != "2" else "3" for a in args])
    assert "--fresh" in _one_error_line(changed, 1)
    assert run(*[a if a != "2" else "3" for a in args], "--fresh").exit_code == 0


def test_a_full_disk_is_one_line(classifier_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import interpret.report.render

    def full(handle: object, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(interpret.report.render, "_write_chunks", full)
    out = tmp_path / "r.html"
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "-o", str(out), "-a", "rollout", "-q")
    assert "no space left on the device" in _one_error_line(result, 1)
    assert not out.exists() and not list(tmp_path.iterdir())  # no partial file, no temporary left behind


@pytest.mark.parametrize(
    ("raised", "code", "fragment"),
    [
        (KeyboardInterrupt(), 130, "interrupted"),
        (UnicodeEncodeError("ascii", "é", 0, 1, "ordinal not in range(128)"), 1, "could not be converted"),
        (MemoryError(), 1, "out of memory"),
        (TypeError("unexpected"), 1, "internal error (TypeError: unexpected); run again with -v"),
    ],
)
def test_failures_during_the_run_are_one_line(
    classifier_dir: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException, code: int, fragment: str
) -> None:
    import interpret.api

    def explain(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(interpret.api, "explain", explain)
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "-a", "rollout", "-q")
    assert fragment in _one_error_line(result, code)


def test_verbose_shows_the_traceback(classifier_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import interpret.api

    def explain(*args: object, **kwargs: object) -> None:
        raise TypeError("unexpected")

    monkeypatch.setattr(interpret.api, "explain", explain)
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "-a", "rollout", "-v")
    assert result.exit_code == 1 and "Traceback" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("error: internal error")


def test_a_report_bigger_than_its_estimate_is_refused_before_writing(classifier_dir: Path, tmp_path: Path) -> None:
    # The estimate counts the attention views and the page's scripts; rollout's [query, key] map and the page's
    # data come on top, so a limit just above the estimate passes the check and the real page is refused.
    from interpret.estimate.checkpoint import read_json
    from interpret.estimate.facts import model_facts
    from interpret.estimate.report import estimate_report

    estimate = estimate_report(model_facts(read_json(classifier_dir / "config.json")), [8], fmt="html")
    out = tmp_path / "r.html"
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "-o", str(out), "-a", "rollout",
                 "--max-bytes", str(estimate.output_bytes + 10), "-q")
    message = _one_error_line(result, 1)
    assert "above --max-bytes" in message and "-a" in message and not out.exists()


def test_output_directories_are_created(classifier_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "r.json"
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "-o", str(out), "--format", "json",
                 "-a", "rollout", "-q")
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())["run"]["inputs"] == [TEXT]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_a_usage_error(classifier_dir: Path, loads: list[str]) -> None:
    result = run("report", "--model", str(classifier_dir), "--text", TEXT, "--device", "cuda", "-a", "rollout")
    assert "no CUDA device" in _one_error_line(result, 2) and loads == []
