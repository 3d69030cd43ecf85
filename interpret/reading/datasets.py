"""Read examples for reports and audits from JSON Lines or CSV files (a `text` column, optional `text_pair`, `label`
and `id`).

A `text_pair` column makes every row a text pair (an NLI premise and hypothesis, a query and a passage), read as
the tokenizer reads `tokenizer(text, text_pair)`: every row then needs one, or the file is refused (a row read
as a single text beside pairs would be a different kind of input).

A label is kept as text (a JSON whole number as its decimal digits); what class it names is decided once
the model is known, by `interpret.decision.labels`.

Both formats are read exactly as written:
- the file must be UTF-8; a leading byte-order mark is dropped;
- CSV goes through the csv module (RFC 4180 quoting), so a quoted newline, comma or quote stays in its field
  and a form feed, U+2028 or U+0085 inside a field is just a character;
- JSON Lines are split on "\\n" only ("\\r\\n" accepted), so U+2028, U+0085 or a form feed inside a JSON
  string never splits a line.
Every error names the file and the physical line (1-based) where the bad row starts.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from interpret.errors import InputError

SUFFIXES = (".jsonl", ".csv")
_CSV_LINE_END = re.compile(rb"\r\n|\r|\n")  # what the csv reader counts as a line on a newline="" file
_JSON_BLANK = " \t\r"  # a JSONL line holding only these is skipped; anything else must be JSON


class EmptyText(InputError):
    """A row's text is missing, empty or whitespace only (`read_dataset(skip_empty=True)` skips such rows)."""


@dataclass(frozen=True)
class Example:
    """One input text (with the second text of its pair, if the file has pairs), its optional gold label and id, and
    its row number in the file (0-based).

    row: the example's index among the file's rows (blank lines not counted, rows skipped for an empty text
        counted), not its line number.
    label: the gold label as text (a number in the file becomes its decimal text, e.g. 1 → "1").
    id: the file's `id` for this example, as text, or None when the file has no `id` (or it is empty).
    line: the physical line (1-based) where its row starts in the file; None when not read from a file. It
        says where the example came from, not what it is, so it takes no part in equality.
    """

    row: int
    text: str
    label: str | None = None
    id: str | None = None
    line: int | None = field(default=None, compare=False)
    text_pair: str | None = None

    def place(self, file_name: str | None = None) -> str:
        """Return where the example is, for a message: "data.csv line 7", or "example row 3"."""
        return f"{file_name} line {self.line}" if file_name and self.line is not None else f"example row {self.row}"


class Skipped(NamedTuple):
    """A row skipped for an empty text (`read_dataset(skip_empty=True)`): its row number (counted as an
    example's `row` is), the physical line (1-based) where it starts, and its `id` (None when it has none)."""

    row: int
    line: int
    id: str | None = None


@dataclass(frozen=True)
class Dataset:
    """A file's examples, and the rows skipped for an empty text (`skip_empty`), in file order."""

    examples: list[Example]
    skipped: tuple[Skipped, ...] = ()

    @property
    def paired(self) -> bool:
        """Whether the examples are text pairs (the file has a `text_pair` column)."""
        return bool(self.examples) and self.examples[0].text_pair is not None


PAIR_COLUMN = "text_pair"


def pair_texts(examples: Sequence[Example]) -> list[str] | None:
    """Return each example's `text_pair`, or None when they are single texts; InputError for a mix of both."""
    if all(example.text_pair is None for example in examples):
        return None
    missing = next((example for example in examples if example.text_pair is None), None)
    if missing is not None:
        raise InputError(f"{missing.place()} has no text_pair but other examples do; give every example one, or none.")
    return [str(example.text_pair) for example in examples]


def text_inputs(texts: Sequence[str], pairs: Sequence[str] | None) -> list[str] | dict[str, list[str]]:
    """Return what the model reads: the texts, or with `pairs` the text pairs {"text": texts, "text_pair": pairs}
    (`interpret.inputs.as_encoded`)."""
    return list(texts) if pairs is None else {"text": list(texts), PAIR_COLUMN: list(pairs)}


def model_inputs(examples: Sequence[Example]) -> list[str] | dict[str, list[str]]:
    """Return the model inputs of `examples` (`text_inputs` of their texts and `pair_texts`). Every caller that runs
    the model on examples reads them here."""
    return text_inputs([example.text for example in examples], pair_texts(examples))


def read_dataset(path: str | Path, *, label_column: str = "label", skip_empty: bool = False) -> Dataset:
    """Return the examples of a .jsonl or .csv file; one-line InputError naming the line for anything unusable.

    label_column: the column (or JSON key) holding each example's label.
    skip_empty: skip a row whose text is missing, empty or whitespace only, recording its row, line and id
        (`Skipped`; its id must be unique as an example's), instead of refusing the file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"{str(path)!r} is neither .jsonl nor .csv; give a JSON Lines or CSV file with a text column.")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read {str(path)!r} ({err.strerror or type(err).__name__}); check the path.") from None
    text = _decode(data, path, universal=suffix == ".csv")
    if not text.strip():
        raise InputError(f"{path.name} is empty; give one example per line with a 'text' field.")
    rows = _jsonl_rows(text, path) if suffix == ".jsonl" else _csv_rows(text, path)
    paired: bool | None = None  # whether the first row has a text pair: every row must agree
    examples: list[Example] = []
    skipped: list[Skipped] = []
    first_line_of_id: dict[str, int] = {}
    for line, row in rows:
        index = len(examples) + len(skipped)
        if skip_empty and _no_text(row):
            identifier = _optional_name(row.get("id"), "id", f"{path.name} line {line}")
            skipped.append(Skipped(index, line, identifier))
        else:
            examples.append(_example(index, line, row, path, label_column))
            identifier = examples[-1].id
            has_pair = examples[-1].text_pair is not None
            if paired is None:
                paired = has_pair
            elif has_pair != paired:
                first = "text pairs" if paired else "single texts"
                raise InputError(f"{path.name} line {line} {'has' if has_pair else 'has no'} {PAIR_COLUMN!r} but the rows"
                                 f" before it are {first}; give every row a {PAIR_COLUMN}, or none.")
        if identifier is not None:
            if identifier in first_line_of_id:
                raise InputError(
                    f"{path.name} line {line} repeats id {identifier!r} (first on line {first_line_of_id[identifier]});"
                    " give every example a unique id."
                )
            first_line_of_id[identifier] = line
    if not examples:
        found = f" (all {len(skipped)} rows have an empty text)" if skipped else ""
        raise InputError(f"{path.name} holds no examples{found}; add rows with a 'text' column.")
    return Dataset(examples, tuple(skipped))


def read_column(path: str | Path, column: str) -> list[str | None]:
    """Return one value of `column` per row of the file (indexed as `Example.row` counts rows: rows skipped for
    an empty text included), read as `read_dataset` reads it: text as it is, other JSON values as JSON; None where
    a row has none. InputError naming the file's columns when no row has `column`."""
    path = Path(path)
    text = _decode(path.read_bytes(), path, universal=path.suffix.lower() == ".csv")
    rows = [row for _, row in (_jsonl_rows(text, path) if path.suffix.lower() == ".jsonl" else _csv_rows(text, path))]
    if not any(column in row for row in rows):
        found = ", ".join(sorted({name for row in rows for name in row}))
        raise InputError(f"{path.name} has no column {column!r}; its columns: {found}.")
    values = [row.get(column) for row in rows]
    return [None if value is None or value == "" else value if isinstance(value, str) else json.dumps(value)
            for value in values]


def _decode(data: bytes, path: Path, *, universal: bool) -> str:
    """Return the file's text without a leading BOM; an InputError naming the line of the first non-UTF-8 byte."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[: err.start]
        line = (len(_CSV_LINE_END.findall(before)) if universal else before.count(b"\n")) + 1
        raise InputError(
            f"{path.name} line {line} is not UTF-8 (byte 0x{data[err.start]:02x}); save the file as UTF-8."
        ) from None


def _jsonl_rows(text: str, path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """Yield (line number, object) for each non-blank line; lines end at "\\n" only."""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip(_JSON_BLANK):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(
                f"{path.name} line {number} is not JSON ({err.msg} at column {err.colno});"
                " write one JSON object per line."
            ) from None
        if not isinstance(row, dict):
            raise InputError(
                f"{path.name} line {number} is a JSON {_json_kind(row)}, not an object;"
                ' write {"text": ...} per line.'
            )
        yield number, row


def _csv_rows(text: str, path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """Yield (first physical line, {column: field}) per record; the header is the first record."""
    # newline="": the csv reader itself decides which line ends are inside quotes (a file opened this way).
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    start = 1
    try:
        for record in reader:
            line, start = start, reader.line_num + 1
            if not record:
                continue  # a blank line
            if header is None:
                header = _header(record, line, path)
                continue
            if len(record) != len(header):
                raise InputError(
                    f"{path.name} line {line} has {len(record)} fields but the header has {len(header)}"
                    f" ({', '.join(header)}); quote fields that hold commas, and give every row the header's fields."
                )
            yield line, dict(zip(header, record))
    except csv.Error as err:
        raise InputError(
            f"{path.name} line {start} is not valid CSV ({err}); close every quoted field and double quotes inside one."
        ) from None


def _header(record: list[str], line: int, path: Path) -> list[str]:
    header = [name.strip() for name in record]
    if "text" not in header:
        found = ", ".join(repr(name) for name in header) or "none"
        raise InputError(
            f"{path.name} line {line} (the header) has no 'text' column (columns: {found});"
            " add a header row with 'text'."
        )
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise InputError(f"{path.name} line {line} (the header) names {repeated[0]!r} twice; give each column once.")
    return header


def _no_text(row: Mapping[str, Any]) -> bool:
    """Return whether a row's text is missing, null, or a string of whitespace only."""
    text = row.get("text")
    return text is None or (isinstance(text, str) and not text.strip())


def _example(index: int, line: int, row: Mapping[str, Any], path: Path, label_column: str) -> Example:
    where = f"{path.name} line {line}"
    text = row.get("text")
    if text is None:
        raise EmptyText(f"{where} has no text; every row needs a non-empty 'text'.")
    if not isinstance(text, str):
        raise InputError(f"{where} has a {_json_kind(text)} as its text; write the text as a string.")
    if not text.strip():
        raise EmptyText(f"{where} has an empty text; every row needs a non-empty 'text'.")
    _refuse_surrogate(text, "text", where)
    label = _optional_name(row.get(label_column), label_column, where)
    identifier = _optional_name(row.get("id"), "id", where)
    return Example(row=index, text=text, label=label, id=identifier, line=line, text_pair=_pair(row, where))


def _pair(row: Mapping[str, Any], where: str) -> str | None:
    """Return a row's `text_pair` (None when the row has none: no such key, null, or an empty field)."""
    pair = row.get(PAIR_COLUMN)
    if pair is None or pair == "":
        return None
    if not isinstance(pair, str):
        raise InputError(f"{where} has a {_json_kind(pair)} as its {PAIR_COLUMN}; write it as a string.")
    if not pair.strip():
        raise InputError(f"{where} has a {PAIR_COLUMN} of whitespace only; give it words, or leave it out of every row.")
    _refuse_surrogate(pair, PAIR_COLUMN, where)
    return pair


def _optional_name(value: Any, field: str, where: str) -> str | None:
    """Return a label or id as text: strings as they are, whole numbers in decimal; None when absent or empty."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        _refuse_surrogate(value, field, where)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    raise InputError(f"{where} has {_json_kind(value)} {value!r} as its {field}; give a string or a whole number.")


def _refuse_surrogate(value: str, field: str, where: str) -> None:
    # A lone surrogate is the one character UTF-8 cannot encode: the encoder finds it in C (a pattern search took
    # a second on a 20 MB text), and an ASCII text (known at once) has none.
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InputError(
            f"{where}: the {field} holds a lone surrogate \\u{ord(value[err.start]):04x} at character {err.start};"
            " write the character itself (or a complete surrogate pair)."
        ) from None


def _json_kind(value: Any) -> str:
    """Return what a JSON value is, in words: 'array', 'number', 'string', ..."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(type(value), type(value).__name__)
