"""Every CSV the project writes: read back exactly, and safe to open in a spreadsheet.

`write_csv(frame, path)` is the one way a table becomes a CSV file:
- RFC 4180 quoting with "\\r\\n" row ends, so a field holding a quote, comma, "\\n" or a bare "\\r" is quoted
  and every reader (the csv module, pandas) sees exactly the rows written;
- formula injection is neutralised as OWASP's "CSV Injection" guidance says: a string cell that begins with
  `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`, so a spreadsheet shows it as text instead
  of evaluating it. A string that already begins with `'` gets one too, which makes the change reversible:
  `restore` drops exactly one leading `'` from any string cell that has one. Column names are treated alike.
  Only string cells change: numbers (a negative float included), booleans and missing values are written as
  they are;
- a NUL character (U+0000, valid in JSON and UTF-8 text) is never written raw: a CSV is a text file, and a NUL
  in one makes spreadsheets and C-string tools cut the cell short and grep call the file binary. A string cell
  that holds one is written as `'\\` and then the cell with each `\\` doubled and each NUL written `\\0`. The
  leading `'` keeps a spreadsheet from reading it as a formula, and no other written cell starts with `'\\` (a
  `'` is only put before a formula start or a `'`), so `restore` knows exactly which cells to undo. Escaping
  rather than refusing keeps a text with a stray NUL auditable (the Parquet tables hold it unchanged);

- a missing value and an empty string are both an empty cell (CSV has no other way to write them);
- UTF-8 without a byte-order mark; the file appears whole or not at all (interpret.files.atomic).

`read_csv(path, dtype)` reads such a file back into the frame that was written (strings restored).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from interpret.errors import InputError
from interpret.files.atomic import atomic_path

# The first characters that make a spreadsheet read a cell as a formula (OWASP, CSV Injection), and the escape.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ESCAPE = "'"
NUL_ESCAPE = "'\\"  # how a cell holding a NUL starts (no other written cell does)
LINE_END = "\r\n"
_SURROGATE = re.compile("[\ud800-\udfff]")  # what UTF-8 cannot encode
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)  # a backslash pair inside a NUL-escaped cell


def neutralise(value: Any) -> Any:
    """Return a string cell with a leading `'` when it starts like a formula (or with `'`), or NUL-escaped when
    it holds a NUL; other values as given."""
    if isinstance(value, str) and "\0" in value:
        return NUL_ESCAPE + value.replace("\\", "\\\\").replace("\0", "\\0")
    if isinstance(value, str) and value.startswith((*FORMULA_STARTS, ESCAPE)):
        return ESCAPE + value
    return value


def restore(value: Any) -> Any:
    """Return a string cell as it was before `neutralise` (NUL escapes undone, or one leading `'` dropped);
    other values as given."""
    if isinstance(value, str) and value.startswith(NUL_ESCAPE):
        return _ESCAPED.sub(lambda pair: "\0" if pair.group(1) == "0" else pair.group(1), value[len(NUL_ESCAPE):])
    if isinstance(value, str) and value.startswith(ESCAPE):
        return value[1:]
    return value


def neutralised(frame: pd.DataFrame) -> pd.DataFrame:
    """Return a copy of `frame` whose string cells and column names are neutralised; numbers untouched."""
    out = frame.copy()
    for column in out.columns:
        out[column] = _map_strings(out[column], neutralise)
    out.columns = [neutralise(name) for name in out.columns]
    return out


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write `frame` (no index) as a neutralised, fully quoted-where-needed UTF-8 CSV, atomically; return the path."""
    path = Path(path)
    _refuse_unencodable(frame, path)
    safe = neutralised(frame)
    with atomic_path(path) as temporary:
        safe.to_csv(temporary, index=False, encoding="utf-8", lineterminator=LINE_END)
    return path


def read_csv(path: str | Path, dtype: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Return the frame a `write_csv` file holds: strings restored, empty cells missing, `dtype` per column.

    Columns not named in `dtype` get the type pandas infers (give text columns `str`: a column of tokens such
    as "1", "2" would otherwise read as numbers). No text such as "NA" or "null" is taken for a missing value;
    only an empty cell is. Numbers are parsed correctly rounded (`float_precision="round_trip"`): pandas' default
    parser before pandas 3 can be one unit in the last place off on the shortest exact digits `write_csv` writes.
    """
    wanted = {neutralise(name): kind for name, kind in (dtype or {}).items()}
    frame = pd.read_csv(path, dtype=wanted or None, keep_default_na=False, na_values=[""], encoding="utf-8",
                        float_precision="round_trip")
    frame.columns = [restore(name) for name in frame.columns]
    for column in frame.columns:
        frame[column] = _map_strings(frame[column], restore)
    return frame


def _map_strings(column: pd.Series, function: Callable[[Any], Any]) -> pd.Series:
    """Return `column` with `function` (neutralise or restore) applied to its string cells, dtype kept."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.rename_categories([function(category) for category in column.cat.categories])
    if column.dtype == object:
        # Cell by cell: an object column may mix strings with numbers, which stay as they are.
        return pd.Series([function(value) for value in column], index=column.index, dtype=object, name=column.name)
    if pd.api.types.is_string_dtype(column.dtype):
        # Vectorised for the large string columns of the audit tables (tokens, texts); only the rare cells
        # holding a NUL go through `function` one by one.
        if function is neutralise:
            nul = column.str.contains("\0", regex=False).fillna(False).astype(bool)
            quoted = column.str.startswith((*FORMULA_STARTS, ESCAPE)).fillna(False).astype(bool) & ~nul
            out = column.mask(quoted, ESCAPE + column)
        else:
            nul = column.str.startswith(NUL_ESCAPE).fillna(False).astype(bool)
            quoted = column.str.startswith(ESCAPE).fillna(False).astype(bool) & ~nul
            out = column.mask(quoted, column.str.slice(1))
        return out.mask(nul, column[nul].map(function)) if nul.any() else out
    return column


def _refuse_unencodable(frame: pd.DataFrame, path: Path) -> None:
    """Raise a one-line InputError naming the first string cell (or column name) that UTF-8 cannot encode."""
    for column_index, column in enumerate(frame.columns):
        values = frame.iloc[:, column_index]
        names = [("name", column)]
        if isinstance(values.dtype, pd.CategoricalDtype):
            cells = names + [("category", value) for value in values.cat.categories]
        elif values.dtype == object or pd.api.types.is_string_dtype(values.dtype):
            text = values.astype(object)
            flagged = [row for row, value in enumerate(text) if isinstance(value, str) and _SURROGATE.search(value)]
            cells = names + [(f"row {row}", text.iloc[row]) for row in flagged[:1]]
        else:
            cells = names
        for where, value in cells:
            found = _SURROGATE.search(value) if isinstance(value, str) else None
            if found:
                raise InputError(
                    f"{path.name}: column {column!r} {where} holds {found.group()!r}, which UTF-8 cannot encode;"
                    " remove lone surrogates from the data."
                )
