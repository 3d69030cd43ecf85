"""write_csv: every CSV reads back to exactly the rows written, and no string cell can run as a formula."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpret.errors import InputError
from interpret.files.csv_io import FORMULA_STARTS, neutralise, read_csv, restore, write_csv


def csv_rows(path: Path) -> list[list[str]]:
    """Return the file's records as the csv module reads them (the file opened with newline="")."""
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.reader(handle, strict=True))


def pandas_plain(path: Path, text_columns: list[str]) -> pd.DataFrame:
    """Return the file as pandas reads it with text columns as text, only empty cells missing, and numbers
    correctly rounded (pandas' default parser before pandas 3 can be one unit in the last place off)."""
    return pd.read_csv(path, dtype={name: str for name in text_columns}, keep_default_na=False, na_values=[""],
                       float_precision="round_trip")


@pytest.mark.parametrize("start", [*FORMULA_STARTS, "'"])
def test_cells_that_start_like_a_formula_get_a_quote_mark(start: str) -> None:
    cell = start + "SUM(A1:A9)"
    assert neutralise(cell) == "'" + cell
    assert restore(neutralise(cell)) == cell


@pytest.mark.parametrize("cell", ["plain", " =1+1", "1-2", "", "–en dash", "＝fullwidth"])
def test_other_cells_are_written_as_they_are(cell: str) -> None:
    assert neutralise(cell) == cell and restore(cell) == cell


@pytest.mark.parametrize("value", [-1.5, -3, np.float32(-0.25), np.int64(-7), True, None, float("nan")])
def test_non_strings_are_never_touched(value: object) -> None:
    assert neutralise(value) is value


def test_numbers_stay_numbers_and_formulas_become_text(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "token": ["=cmd|' /C calc'!A0", "+1", "-", "@SUM(1)", "\tx", "\rx", "'quoted", "ok", None],
            "value": [-1.5, -0.0, 2.0, -1e-30, np.nan, 3.25, -7.0, 0.1, 1.0],
            "count": np.array([-1, 0, 1, 2, 3, 4, 5, 6, 7], dtype=np.int64),
            "flag": [True, False, True, False, True, False, True, False, True],
        }
    )
    path = write_csv(frame, tmp_path / "t.csv")
    rows = csv_rows(path)
    assert rows[0] == ["token", "value", "count", "flag"]
    assert [row[0] for row in rows[1:]] == [
        "'=cmd|' /C calc'!A0", "'+1", "'-", "'@SUM(1)", "'\tx", "'\rx", "''quoted", "ok", "",
    ]
    # Numeric cells keep their sign and full precision; nothing numeric was prefixed.
    assert [row[1] for row in rows[1:]] == ["-1.5", "-0.0", "2.0", "-1e-30", "", "3.25", "-7.0", "0.1", "1.0"]
    assert [row[2] for row in rows[1:]] == [str(n) for n in range(-1, 8)]
    back = read_csv(path, dtype={"token": str})
    pd.testing.assert_frame_equal(back, frame.astype({"token": back["token"].dtype}))


def test_bare_carriage_returns_do_not_split_rows(tmp_path: Path) -> None:
    texts = [f"row {i}\rcontinued" if i % 2 else f"row {i}\r\nsplit\n" for i in range(8)]
    path = write_csv(pd.DataFrame({"text": texts, "n": range(8)}), tmp_path / "cr.csv")
    assert [row[0] for row in csv_rows(path)[1:]] == texts
    assert pandas_plain(path, ["text"])["text"].tolist() == texts


def test_headers_are_neutralised_and_restored(tmp_path: Path) -> None:
    frame = pd.DataFrame({"=evil": ["a"], "value": [1.0]})
    path = write_csv(frame, tmp_path / "h.csv")
    assert csv_rows(path)[0] == ["'=evil", "value"]
    pd.testing.assert_frame_equal(read_csv(path, {"=evil": str}), frame.astype({"=evil": "str"}))


def test_categorical_string_columns_are_neutralised(tmp_path: Path) -> None:
    frame = pd.DataFrame({"label": pd.Categorical(["=bad", "good", "=bad"]), "v": [1, 2, 3]})
    path = write_csv(frame, tmp_path / "c.csv")
    assert [row[0] for row in csv_rows(path)[1:]] == ["'=bad", "good", "'=bad"]
    assert frame["label"].tolist() == ["=bad", "good", "=bad"]  # the caller's frame is left alone


def test_unencodable_cell_fails_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("older file\n")
    frame = pd.DataFrame({"token": pd.Series(["fine", "lone \ud800 surrogate"], dtype=object)})
    with pytest.raises(InputError, match=r"bad\.csv: column 'token' row 1 holds '\\ud800'"):
        write_csv(frame, path)
    assert path.read_text() == "older file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


# Any text but lone surrogates (which UTF-8 cannot hold): quotes, commas, every kind of line break, NUL, tabs.
any_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)
awkward_text = st.text(st.sampled_from(list("=+-@'\t\r\n\f\v\x00\x85\u2028\u2029\",; ab1.")), max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(any_text, awkward_text, st.none()),
            st.one_of(st.floats(allow_nan=True, allow_infinity=False, width=64), st.none()),
            st.integers(-(2**53), 2**53),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_any_table_reads_back_exactly(tmp_path_factory: pytest.TempPathFactory, rows: list[tuple]) -> None:
    texts = [row[0] for row in rows]
    frame = pd.DataFrame(
        {
            "text": pd.Series(texts, dtype=object),
            "value": pd.Series([row[1] for row in rows], dtype=np.float64),
            "count": pd.Series([row[2] for row in rows], dtype=np.int64),
        }
    )
    path = write_csv(frame, tmp_path_factory.mktemp("csv") / "t.csv")
    expected = [None if text in (None, "") else neutralise(text) for text in texts]

    # The csv module: the header plus exactly one record per row, every cell as written.
    records = csv_rows(path)
    assert records[0] == ["text", "value", "count"] and len(records) == len(rows) + 1
    for record, want, (_, value, count) in zip(records[1:], expected, rows):
        assert record[0] == (want or "")
        assert (record[1] == "") if value is None or math.isnan(value) else float(record[1]) == value
        assert int(record[2]) == count
        # Nothing a spreadsheet would run: no cell starts like a formula unless it is a number.
        assert not record[0].startswith(FORMULA_STARTS)

    # pandas, reading text as text: the same rows (empty cells missing).
    plain = pandas_plain(path, ["text"])
    assert len(plain) == len(rows)
    assert [None if pd.isna(cell) else cell for cell in plain["text"]] == expected
    np.testing.assert_array_equal(plain["value"].to_numpy(), frame["value"].to_numpy())
    assert plain["count"].tolist() == frame["count"].tolist()

    # read_csv undoes the quote marks: the frame written, with "" read as missing.
    back = read_csv(path, {"text": str})
    assert [None if pd.isna(cell) else cell for cell in back["text"]] == [text or None for text in texts]
    np.testing.assert_array_equal(back["value"].to_numpy(), frame["value"].to_numpy())
    assert back["count"].tolist() == frame["count"].tolist()


@pytest.mark.parametrize("dtype", [object, "string"])
def test_a_nul_is_escaped_in_the_file_and_restored_on_reading(tmp_path: Path, dtype: object) -> None:
    texts = ["a\x00b", "\x00", "=\x00", "'\\0 and \x00 and \\", "\\0 is no NUL", "'\\x", "plain", None]
    frame = pd.DataFrame({"text": pd.Series(texts, dtype=dtype), "na\x00me": pd.Series(range(8), dtype=np.int64)})
    path = write_csv(frame, tmp_path / "t.csv")
    data = path.read_bytes()
    assert b"\x00" not in data  # a text file: spreadsheets, C-string tools and grep read it whole
    records = csv_rows(path)
    assert records[0] == ["text", "'\\na\\0me"]
    assert [row[0] for row in records[1:4]] == ["'\\a\\0b", "'\\\\0", "'\\=\\0"]
    assert [row[0] for row in records[5:8]] == ["\\0 is no NUL", "''\\x", "plain"]  # only NUL cells are escaped
    back = read_csv(path, {"text": str})
    assert list(back.columns) == ["text", "na\x00me"]
    assert back["text"].tolist()[:7] == texts[:7] and pd.isna(back["text"].tolist()[7])
