"""A classifier with one output (a reranker, a reward model) on the command line: the decision line gives the score,
the report says the evidence is in logits, an audit tabulates the score and keeps relevance labels as given, and
options that need classes (--contrast, --target gold, head importance) are refused before the model loads."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from cli_runner import run
from hf_tiny import tiny_config

import shipped_tokenizers

QUERIES = {"text": ["the cat", "a dog"], "text_pair": ["the cat sat on the mat", "a quiet morning by the river"]}


def _logits(directory, inputs) -> torch.Tensor:
    """The saved model's one output [batch] on `tokenizer(texts, pairs)`, called directly."""
    model = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    with torch.no_grad():
        return model(**tokenizer(inputs["text"], inputs["text_pair"], padding=True, return_tensors="pt")).logits[:, 0]


@pytest.fixture(scope="module")
def scorer_dir(tmp_path_factory: pytest.TempPathFactory):
    """A saved tiny BERT with one output (a reranker: no sigmoid declared), with its WordPiece tokenizer."""
    tokenizer = shipped_tokenizers.wordpiece()
    torch.manual_seed(0)
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.num_labels, config.initializer_range = 1, 0.3
    model = transformers.BertForSequenceClassification(config).eval()
    directory = tmp_path_factory.mktemp("tiny-scorer")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_the_command_line_reports_the_score_and_its_evidence_in_logits(scorer_dir, tmp_path) -> None:
    out = tmp_path / "scores.html"
    result = run("report", "--model", str(scorer_dir), "--text", "the cat", "--text-pair", "the cat sat on the mat",
                 "-a", "integrated_gradients", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    logit = float(_logits(scorer_dir, {"text": ["the cat"], "text_pair": ["the cat sat on the mat"]})[0])
    assert f"prediction LABEL_0 (score {logit:.4g}); explaining its score [prediction]" in result.stdout
    page = out.read_text(encoding="utf-8")
    assert "the model&#39;s one output" in page or "the model's one output" in page
    assert "m is the explained\n    decision's logit" in page or "decision&#39;s logit" in page


def test_an_audit_of_scores_keeps_labels_as_given_and_tabulates_the_score(scorer_dir, tmp_path) -> None:
    data = tmp_path / "relevance.jsonl"
    rows = [{"text": q, "text_pair": p, "label": label} for q, p, label in
            zip(QUERIES["text"], QUERIES["text_pair"], ["0.8", "0.1"])]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    result = run("audit", "--model", str(scorer_dir), "--input", str(data), "-o", str(tmp_path / "audit"), "-a",
                 "integrated_gradients", "--evidence", "-q")
    assert result.exit_code == 0, result.stderr
    table = pd.read_parquet(tmp_path / "audit" / "examples.parquet")
    np.testing.assert_allclose(table["score"].astype(float), _logits(scorer_dir, QUERIES).numpy(), atol=1e-5)
    assert list(table["label"]) == ["0.8", "0.1"] and table["correct"].isna().all() and table["probability"].isna().all()


@pytest.mark.parametrize("command, args, message", [
    ("report", ("--text", "the cat", "--contrast", "LABEL_0"), "no other class to contrast with"),
    ("heads", ("--input", "{data}"), "with one output (a score)"),
    ("audit", ("--input", "{data}", "--target", "gold"), "--target gold needs classes"),
])
def test_options_that_need_classes_are_refused_before_loading(scorer_dir, tmp_path, command, args, message,
                                                              loads) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "the cat", "label": "1"}\n', encoding="utf-8")
    result = run(command, "--model", str(scorer_dir), *(arg.format(data=data) for arg in args))
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert loads == []
