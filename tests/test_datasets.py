"""read_dataset: CSV and JSON Lines read exactly (quoting, odd line breaks, BOM), and one-line errors by line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpret.errors import InputError
from interpret.reading.datasets import Example, Skipped, read_dataset

# Texts that str.splitlines() would break or that need CSV quoting; every one must come back unchanged.
AWKWARD = (
    "form\ffeed",
    "line\u2028separator and para\u2029graph",
    "next\u0085line",
    "quoted\nnewline",
    "crlf\r\ninside",
    "bare\rcarriage return",
    'comma, and "quotes"',
    "vertical\vtab and \x1c\x1d\x1e separators",
    "  leading and trailing spaces  ",
    "=1+1 stays as written",
    "naïve café 😀",
)


def read_examples(path, **options) -> list[Example]:
    """The examples of `read_dataset` (every row needs a non-empty text)."""
    return read_dataset(path, **options).examples


def write_csv_file(path: Path, rows: list[dict[str, str]], *, bom: bool = False, line_end: str = "\r\n") -> Path:
    """Write `rows` with the csv module (an independent writer) and return the path."""
    # With "\n" line ends the csv module's minimal quoting leaves a bare "\r" unquoted; quote every field then.
    quoting = csv.QUOTE_MINIMAL if line_end == "\r\n" else csv.QUOTE_ALL
    with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator=line_end, quoting=quoting)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_jsonl_file(path: Path, rows: list[dict], *, bom: bool = False, line_end: str = "\n", ascii: bool = False) -> Path:
    body = "".join(json.dumps(row, ensure_ascii=ascii) + line_end for row in rows)
    path.write_bytes(("\ufeff" if bom else "").encode() + body.encode("utf-8"))
    return path


@pytest.mark.parametrize("bom", [False, True])
@pytest.mark.parametrize("line_end", ["\r\n", "\n"])
def test_csv_round_trips_awkward_texts(tmp_path: Path, bom: bool, line_end: str) -> None:
    rows = [{"id": f"ex-{i}", "text": text, "label": ("pos", "neg")[i % 2]} for i, text in enumerate(AWKWARD)]
    examples = read_examples(write_csv_file(tmp_path / "in.csv", rows, bom=bom, line_end=line_end))
    assert examples == [
        Example(row=i, text=text, label=("pos", "neg")[i % 2], id=f"ex-{i}") for i, text in enumerate(AWKWARD)
    ]


@pytest.mark.parametrize("bom", [False, True])
@pytest.mark.parametrize("line_end", ["\r\n", "\n"])
@pytest.mark.parametrize("ascii", [False, True])
def test_jsonl_round_trips_awkward_texts(tmp_path: Path, bom: bool, line_end: str, ascii: bool) -> None:
    rows = [{"text": text, "label": i, "id": i * 10} for i, text in enumerate(AWKWARD)]
    path = write_jsonl_file(tmp_path / "in.jsonl", rows, bom=bom, line_end=line_end, ascii=ascii)
    examples = read_examples(path)
    assert examples == [Example(row=i, text=text, label=str(i), id=str(i * 10)) for i, text in enumerate(AWKWARD)]


def test_raw_separators_inside_jsonl_strings_do_not_split_lines(tmp_path: Path) -> None:
    # ensure_ascii=False writes U+2028, U+0085 and a form feed escaped as \f; put them in raw as a hand
    # editor would (JSON allows any character but C0 controls raw inside a string).
    path = tmp_path / "raw.jsonl"
    path.write_bytes('{"text": "a\u2028b\u0085c\u2029d"}\n{"text": "second"}\n'.encode())
    assert [e.text for e in read_examples(path)] == ["a\u2028b\u0085c\u2029d", "second"]


def test_bom_padded_column_names_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    # A BOM before the header, spaces around column names, a blank line (skipped) and an empty label.
    path.write_bytes(b"\xef\xbb\xbftext , label\nhello,1\n\nworld,\n")
    assert read_examples(path) == [Example(0, "hello", "1"), Example(1, "world", None)]


def test_labels_given_as_numbers_and_missing_ids(tmp_path: Path) -> None:
    path = tmp_path / "numbers.jsonl"
    path.write_text(
        '{"text": "a", "label": 0}\n\n{"text": "b", "label": 2.0}\n{"text": "c", "label": "x"}\n{"text": "d"}\n'
    )
    assert read_examples(path) == [Example(0, "a", "0"), Example(1, "b", "2"), Example(2, "c", "x"), Example(3, "d")]


def test_example_keeps_its_positional_fields() -> None:
    # Callers build Example(row, text, label) positionally; the id is an optional fourth field.
    assert Example(3, "t", "l") == Example(row=3, text="t", label="l", id=None)


texts = st.text(st.characters(exclude_categories=("Cs",)), min_size=1).filter(lambda t: t.strip() != "")


@settings(max_examples=150, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6), st.booleans())
def test_any_text_round_trips_through_csv(tmp_path_factory: pytest.TempPathFactory, values: list[str], bom: bool) -> None:
    path = tmp_path_factory.mktemp("csv") / "in.csv"
    write_csv_file(path, [{"text": text} for text in values], bom=bom)
    assert [e.text for e in read_examples(path)] == values


@settings(max_examples=150, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6), st.booleans())
def test_any_text_round_trips_through_jsonl(tmp_path_factory: pytest.TempPathFactory, values: list[str], ascii: bool) -> None:
    path = tmp_path_factory.mktemp("jsonl") / "in.jsonl"
    write_jsonl_file(path, [{"text": text} for text in values], ascii=ascii)
    assert [e.text for e in read_examples(path)] == values


# (file name, bytes, the message must contain all of these)
BAD_FILES = [
    ("empty.csv", b"", ["empty.csv is empty"]),
    ("blank.jsonl", b"\xef\xbb\xbf\n \n", ["blank.jsonl is empty"]),
    ("header_only.csv", b"text,label\n", ["holds no examples"]),
    ("latin1.csv", b"text\nfine\ncaf\xe9\n", ["line 3 is not UTF-8", "0xe9"]),
    ("latin1_cr.csv", b"text\rfine\rcaf\xe9\r", ["line 3 is not UTF-8"]),
    ("latin1.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n', ["line 2 is not UTF-8"]),
    ("no_text.csv", b"sentence,label\nhi,1\n", ["line 1", "no 'text' column", "'sentence', 'label'"]),
    ("twice.csv", b"text,text\na,b\n", ["line 1", "'text' twice"]),
    ("no_text.jsonl", b'{"text": "a"}\n{"sentence": "b"}\n', ["line 2 has no text"]),
    ("empty_text.csv", b"text\nfine\n\"   \"\n", ["line 3 has an empty text"]),
    ("array.jsonl", b'{"text": "a"}\n\n["text", "b"]\n', ["line 3 is a JSON array, not an object"]),
    ("string.jsonl", b'"just text"\n', ["line 1 is a JSON string, not an object"]),
    ("not_json.jsonl", b'{"text": "a"}\n{"text": b}\n', ["line 2 is not JSON", "column 10"]),
    ("u2028_outside.jsonl", '{"text": "a"}\u2028\n'.encode(), ["line 1 is not JSON"]),
    ("number_text.jsonl", b'{"text": 12}\n', ["line 1 has a number as its text"]),
    ("surrogate.jsonl", b'{"text": "ok"}\n{"text": "bad \\ud800 here"}\n', ["line 2", "lone surrogate \\ud800", "character 4"]),
    ("surrogate_label.jsonl", b'{"text": "ok", "label": "\\udfff"}\n', ["line 1", "label holds a lone surrogate"]),
    ("pair_is_fine_but_label_bool.jsonl", b'{"text": "\\ud83d\\ude00", "label": true}\n', ["line 1", "boolean True"]),
    ("float_label.jsonl", b'{"text": "a", "label": 0.5}\n', ["line 1", "number 0.5 as its label"]),
    ("fields.csv", b"text,label\nfine,1\nno, quotes, here,1\n", ["line 3 has 4 fields but the header has 2"]),
    ("few.csv", b"text,label\nfine\n", ["line 2 has 1 fields but the header has 2"]),
    ("quote.csv", b'text\nfine\n"never closed\nmore\n', ["line 3 is not valid CSV"]),
    # The record after a two-line quoted field starts on physical line 4.
    ("multi.csv", b'text,label\n"two\nlines",1\n"  ",2\n', ["line 4 has an empty text"]),
    ("dup.csv", b"id,text\na,one\nb,two\na,three\n", ["line 4 repeats id 'a' (first on line 2)"]),
    ("table.tsv", b"text\n", ["neither .jsonl nor .csv"]),
]


@pytest.mark.parametrize(("name", "data", "needles"), BAD_FILES, ids=[case[0] for case in BAD_FILES])
def test_bad_files_fail_with_one_line_naming_the_line(tmp_path: Path, name: str, data: bytes, needles: list[str]) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError) as caught:
        read_examples(path)
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read .*absent\.csv.*check the path"):
        read_examples(tmp_path / "absent.csv")


def test_seed_file_still_reads() -> None:
    from importlib.resources import files

    seed = Path(str(files("interpret.data") / "sentiment_seed.jsonl"))
    examples = read_examples(seed)
    assert examples and all(e.text.strip() and e.label for e in examples)


def test_skip_empty_skips_rows_without_text_and_keeps_their_lines(tmp_path: Path) -> None:
    csv_path = tmp_path / "gaps.csv"
    csv_path.write_bytes(b'text,label,id\nfirst,a,\n"",b,x1\n"two\nlines",c,\n"  \t",d,\n\nlast,e,\n')
    dataset = read_dataset(csv_path, skip_empty=True)
    # (row, physical line, id); the quoted newline makes row 3 start on line 4
    assert dataset.skipped == (Skipped(1, 3, "x1"), Skipped(3, 6, None))
    assert [(e.row, e.text, e.label, e.line) for e in dataset.examples] == [
        (0, "first", "a", 2), (2, "two\nlines", "c", 4), (4, "last", "e", 8),  # skipped rows keep their row numbers
    ]
    jsonl = tmp_path / "gaps.jsonl"
    jsonl.write_text('{"text": "a"}\n{"text": null}\n{"label": 1}\n{"text": " "}\n{"text": "b"}\n')
    assert [entry.line for entry in read_dataset(jsonl, skip_empty=True).skipped] == [2, 3, 4]
    repeated = tmp_path / "repeated.jsonl"  # a skipped row's id is an id of the file like any other
    repeated.write_text('{"text": "a", "id": 7}\n{"text": "", "id": "7"}\n')
    with pytest.raises(InputError, match=r"repeated.jsonl line 2 repeats id '7' \(first on line 1\)"):
        read_dataset(repeated, skip_empty=True)
    with pytest.raises(InputError, match="gaps.jsonl line 2 has no text"):
        read_dataset(jsonl)  # the default still refuses the file
    only = tmp_path / "only.jsonl"
    only.write_text('{"text": ""}\n')
    with pytest.raises(InputError, match=r"holds no examples \(all 1 rows have an empty text\)"):
        read_dataset(only, skip_empty=True)
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"text": 7}\n')
    with pytest.raises(InputError, match="number as its text"):  # a text of the wrong type is no empty text
        read_dataset(wrong, skip_empty=True)


def test_the_label_column_is_read_by_the_same_rule(tmp_path: Path) -> None:
    path = tmp_path / "col.jsonl"
    path.write_text('{"text": "a", "sentiment": 1, "label": "x"}\n{"text": "b", "sentiment": "neg"}\n')
    assert [e.label for e in read_examples(path, label_column="sentiment")] == ["1", "neg"]
    assert [e.line for e in read_examples(path)] == [1, 2]
