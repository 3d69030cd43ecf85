"""A report's exported CSV files: the same rows as its Parquet files, and no cell a spreadsheet would run."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_cases import WORDS, report_of, trace_of

from interpret.files.csv_io import FORMULA_STARTS, neutralise, read_csv

# Tokens a spreadsheet would evaluate, or that split a row when a bare "\r" is left unquoted.
FORMULAS = ('=HYPERLINK("http://x","y")', "+1", "-", "@SUM(A1)", "\tx", "a\rb", "'q")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = trace_of([" ".join(WORDS[: len(FORMULAS)]), "a dog ran"], FORMULAS)
    directory = tmp_path_factory.mktemp("export")
    report_of(trace, signed=True).export(directory)
    return directory


def test_every_csv_reads_back_to_its_parquet(exported: Path) -> None:
    paths = sorted(exported.rglob("*.csv"))
    assert len(paths) >= 8  # tokens, checks, scalars and every analyzer array
    for path in paths:
        table = pd.read_parquet(path.with_suffix(".parquet"))
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle, strict=True))
        assert rows[0] == list(table.columns) and len(rows) == len(table) + 1, path
        for index, column in enumerate(table.columns):
            if table[column].dtype == object or pd.api.types.is_string_dtype(table[column].dtype):
                written = [row[index] for row in rows[1:]]
                assert written == ["" if pd.isna(cell) else neutralise(cell) for cell in table[column]], path
                assert not any(cell.startswith(FORMULA_STARTS) for cell in written), path
        back = read_csv(path, {name: str(dtype) for name, dtype in table.dtypes.items()})
        pd.testing.assert_frame_equal(back, table, check_exact=True)


def test_formula_tokens_are_neutralised_in_tokens_csv(exported: Path) -> None:
    with open(exported / "tokens.csv", encoding="utf-8", newline="") as handle:
        tokens = [row["token"] for row in csv.DictReader(handle) if row["batch"] == "0"]
    assert tokens[1 : 1 + len(FORMULAS)] == ["'" + token if token[0] in "=+-@\t'" else token for token in FORMULAS]
    assert read_csv(exported / "tokens.csv", {"token": str})["token"].tolist()[1 : 1 + len(FORMULAS)] == list(FORMULAS)


def test_signed_values_stay_numbers(exported: Path) -> None:
    frame = read_csv(exported / "signed_demo" / "attr.csv")
    assert frame["value"].dtype == np.float64 and (frame["value"] < 0).any()
    with open(exported / "signed_demo" / "attr.csv", encoding="utf-8", newline="") as handle:
        values = [row[-1] for row in list(csv.reader(handle))[1:]]
    assert any(value.startswith("-") for value in values)  # a negative number is not text: no quote mark
