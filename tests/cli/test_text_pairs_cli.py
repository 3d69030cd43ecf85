"""Text pairs on the command line: `--text-pair` (one per --text) and a `text_pair` column in --input files, for
`report`, `audit` and `evaluate --checks erasers`; the pair reaches the model (decisions equal the model called
directly on `tokenizer(text, text_pair)`), joins the audit's tables and fingerprint, and every option that cannot
take a pair refuses it before the model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from cli_runner import run
from hf_tiny import tiny_config

import shipped_tokenizers
from interpret.files.csv_io import read_csv

TEXTS = ["the cat sat on the mat", "a dog"]
PAIRS = ["a quiet dog", "the cat ran by the river !"]
LABELS = ("entailment", "neutral", "contradiction")


@pytest.fixture(scope="module")
def nli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT with three NLI classes and a WordPiece tokenizer that gives segment ids, saved."""
    tokenizer = shipped_tokenizers.wordpiece()
    torch.manual_seed(0)
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.num_labels, config.initializer_range = 3, 0.3
    config.id2label = dict(enumerate(LABELS))
    config.label2id = {label: index for index, label in config.id2label.items()}
    directory = tmp_path_factory.mktemp("tiny-nli")
    transformers.BertForSequenceClassification(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _direct(directory: Path, texts: list[str], pairs: list[str]) -> torch.Tensor:
    """The model's class probabilities [batch, 3] on `tokenizer(texts, pairs)`, called directly."""
    model = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    with torch.no_grad():
        return model(**tokenizer(texts, pairs, padding=True, return_tensors="pt")).logits.softmax(-1)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_report_explains_each_text_with_its_pair(nli_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "nli.json"
    result = run("report", "--model", str(nli_dir), "--text", TEXTS[0], "--text-pair", PAIRS[0], "--text", TEXTS[1],
                 "--text-pair", PAIRS[1], "-a", "rollout", "-a", "integrated_gradients", "--format", "json",
                 "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    direct = _direct(nli_dir, TEXTS, PAIRS)
    for b, decision in enumerate(data["run"]["decisions"]):
        assert decision["predicted"] == LABELS[int(direct[b].argmax())]
        assert decision["predicted_probability"] == pytest.approx(float(direct[b].max()), abs=1e-6)
    assert [example["text"] for example in data["examples"]] == TEXTS


def test_report_reads_a_file_of_pairs_and_cuts_a_long_pair_as_the_tokenizer_does(nli_dir: Path, tmp_path: Path) -> None:
    long_text = "the cat sat on the mat and the dog ran by the river"
    data = _jsonl(tmp_path / "nli.jsonl", [{"text": long_text, "text_pair": PAIRS[0]}, {"text": TEXTS[1], "text_pair": PAIRS[1]}])
    out = tmp_path / "nli.json"
    result = run("report", "--model", str(nli_dir), "--input", str(data), "-a", "rollout", "--max-length", "10",
                 "--no-evidence", "--format", "json", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(nli_dir)
    cut = tokenizer(long_text, PAIRS[0], truncation=True, max_length=10)
    first = report["examples"][0]
    assert [t for t, real in zip(first["tokens"], first["real"]) if real] == tokenizer.convert_ids_to_tokens(cut["input_ids"])
    assert first["text_pair"] == PAIRS[0]
    model = transformers.AutoModelForSequenceClassification.from_pretrained(nli_dir).eval()
    for b, (text, pair) in enumerate([(long_text, PAIRS[0]), (TEXTS[1], PAIRS[1])]):  # both are over 10 tokens
        with torch.no_grad():
            expected = model(**tokenizer(text, pair, truncation=True, max_length=10, return_tensors="pt")).logits
        assert report["run"]["decisions"][b]["predicted_probability"] == pytest.approx(float(expected.softmax(-1).max()),
                                                                                       abs=1e-6)


def test_an_input_file_with_a_text_pair_column_is_audited_with_its_pairs(nli_dir: Path, tmp_path: Path) -> None:
    data = _jsonl(tmp_path / "nli.jsonl", [{"text": t, "text_pair": p, "label": "neutral"} for t, p in zip(TEXTS, PAIRS)])
    out = tmp_path / "audit"
    result = run("audit", "--model", str(nli_dir), "--input", str(data), "-o", str(out), "-a", "rollout", "-q")
    assert result.exit_code == 0, result.stderr
    table = read_csv(out / "examples.csv")
    assert list(table["text_pair"]) == PAIRS
    direct = _direct(nli_dir, TEXTS, PAIRS)
    assert list(table["prediction"]) == [LABELS[int(row.argmax())] for row in direct]
    assert [float(p) for p in table["probability"]] == pytest.approx([float(row.max()) for row in direct], abs=1e-6)
    # the pairs are part of what the audit is: changed pairs are not resumed as if they were the same input
    _jsonl(data, [{"text": t, "text_pair": p, "label": "neutral"} for t, p in zip(TEXTS, reversed(PAIRS))])
    again = run("audit", "--model", str(nli_dir), "--input", str(data), "-o", str(out), "-a", "rollout", "-q")
    assert again.exit_code != 0 and "--fresh" in again.stderr


def test_erasers_run_on_a_file_of_pairs(nli_dir: Path, tmp_path: Path) -> None:
    data = _jsonl(tmp_path / "nli.jsonl", [{"text": t, "text_pair": p} for t, p in zip(TEXTS, PAIRS)])
    result = run("evaluate", "--model", str(nli_dir), "--input", str(data), "--checks", "erasers", "-a", "rollout",
                 "--format", "json", "-q")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["erasers"]["methods"]


@pytest.mark.parametrize("args, message", [
    (("--text", "a", "--text-pair", "b", "--text-pair", "c"), "2 --text-pair for 1 --text; give one --text-pair per --text"),
    (("--text", "a", "--text-pair", "b", "--continuation", "c"), "--continuation continues a single text"),
    (("--text", "a", "--text-pair", " "), "--text-pair"),
])
def test_report_refuses_pairs_that_do_not_fit_before_loading(nli_dir: Path, args: tuple[str, ...], message: str,
                                                             loads: list[str]) -> None:
    result = run("report", "--model", str(nli_dir), *args)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert loads == []


def test_commands_that_read_single_texts_refuse_a_file_of_pairs(nli_dir: Path, tmp_path: Path, loads: list[str]) -> None:
    data = _jsonl(tmp_path / "nli.jsonl", [{"text": t, "text_pair": p, "label": "neutral"} for t, p in zip(TEXTS, PAIRS)])
    heads = run("heads", "--model", str(nli_dir), "--input", str(data))
    assert heads.exit_code == 2 and "holds text pairs" in heads.stderr
    sanity = run("evaluate", "--model", str(nli_dir), "--input", str(data), "--checks", "sanity")
    assert sanity.exit_code == 2 and "holds text pairs" in sanity.stderr
    both = run("report", "--model", str(nli_dir), "--input", str(data), "--text-pair", "x")
    assert both.exit_code == 2 and "drop --text-pair" in both.stderr
    assert loads == []
