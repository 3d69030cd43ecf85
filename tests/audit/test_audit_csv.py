"""The audit's CSV files: the same rows as its Parquet tables, and no cell a spreadsheet would run."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from interpret.audit import run_audit
from interpret.files.csv_io import FORMULA_STARTS, neutralise, read_csv
from interpret.models.default_model import CentroidHead
from interpret.reading.datasets import Example
from interpret.reference import Encoder, TransformerConfig
from interpret.reference.vocab import word_tokenizer

# Punctuation is a token of its own for the word tokenizer, so "=", "+", "-" and "@" become tokens.
WORDS = "= + - @ SUM cmd calc the cat sat".split()
TEXTS = ("=SUM(1) the cat", "+cmd sat\rthe cat", "-calc @ the", "@SUM - cat\r\n= sat", "the cat\rsat\x00 NUL")
LABELS = ("=1+1", "-neg", None, "@pos", "+")  # the head's class names (a label names a class: interpret.decision.labels)
IDS = ("=id", "+id", None, "@\x00id", "'id")


def records(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.reader(handle, strict=True))


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = word_tokenizer(WORDS)
    torch.manual_seed(0)
    config = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer), max_positions=32, n_classes=2
    )
    encoder = Encoder(config).eval()
    head = CentroidHead(torch.randn(4, 32), tuple(label for label in LABELS if label is not None))
    examples = [
        Example(row=i, text=text, label=label, id=identifier)
        for i, (text, label, identifier) in enumerate(zip(TEXTS, LABELS, IDS))
    ]
    out = tmp_path_factory.mktemp("audit")
    run_audit(encoder, tokenizer, examples, out, batch_size=2, head=head,
              analyzers=["rollout", "flow", "attention_entropy", "integrated_gradients"])
    return out


@pytest.mark.parametrize("stem", ["tokens", "examples"])
def test_csv_reads_back_to_the_parquet_table(audit_dir: Path, stem: str) -> None:
    table = pd.read_parquet(audit_dir / f"{stem}.parquet")
    text_columns = [name for name, dtype in table.dtypes.items() if pd.api.types.is_string_dtype(dtype)]
    assert text_columns  # tokens: analyzer, token; examples: text, label, prediction, ...
    rows = records(audit_dir / f"{stem}.csv")
    assert rows[0] == list(table.columns) and len(rows) == len(table) + 1
    for column in text_columns:
        written = [row[rows[0].index(column)] for row in rows[1:]]
        assert written == ["" if pd.isna(cell) else neutralise(cell) for cell in table[column]]
        assert not any(cell.startswith(FORMULA_STARTS) for cell in written)
    back = read_csv(audit_dir / f"{stem}.csv", dict(table.dtypes.astype(str)))
    pd.testing.assert_frame_equal(back, table, check_exact=True)


def test_formula_like_inputs_reach_the_tables(audit_dir: Path) -> None:
    examples = pd.read_parquet(audit_dir / "examples.parquet")
    assert examples["text"].tolist() == list(TEXTS)
    assert [None if pd.isna(v) else v for v in examples["label"]] == list(LABELS)
    assert [None if pd.isna(v) else v for v in examples["id"]] == list(IDS)
    assert b"\x00" not in (audit_dir / "examples.csv").read_bytes()  # escaped (interpret.files.csv_io), read back exactly
    tokens = pd.read_parquet(audit_dir / "tokens.parquet")
    assert {"=", "+", "-", "@"} <= set(tokens["token"])


def test_heads_csv_keeps_its_numbers(audit_dir: Path) -> None:
    rows = records(audit_dir / "heads.csv")
    assert rows[0] == ["layer", "head", "entropy", "special_attention"] and len(rows) == 1 + 2 * 4
    heads = read_csv(audit_dir / "heads.csv")
    assert heads["layer"].tolist() == [0] * 4 + [1] * 4 and heads["head"].tolist() == [0, 1, 2, 3] * 2
    assert np.isfinite(heads[["entropy", "special_attention"]].to_numpy()).all()
    assert all(not cell.startswith("'") for row in rows[1:] for cell in row)
