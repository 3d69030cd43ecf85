"""Read examples for reports and audits from JSON Lines or CSV files (a `text` column, optional `label`)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from interpret.errors import InputError


@dataclass(frozen=True)
class Example:
    """One input text with its optional gold label and its row number in the file (0-based)."""

    row: int
    text: str
    label: str | None = None


def read_examples(path: str | Path) -> list[Example]:
    """Return the examples of a .jsonl or .csv file; one-line InputError for anything unusable."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise InputError(f"{str(path)!r} is neither .jsonl nor .csv; give a JSON Lines or CSV file with a text column.")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read {str(path)!r} ({type(err).__name__}: {err}); check the path and that it is UTF-8.") from None
    rows = _jsonl(raw, path) if suffix == ".jsonl" else _csv(raw, path)
    examples = []
    for number, row in enumerate(rows):
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{path.name} row {number + 1} has no text; every row needs a non-empty 'text'.")
        label = row.get("label")
        examples.append(Example(row=number, text=text, label=None if label in (None, "") else str(label)))
    if not examples:
        raise InputError(f"{str(path)!r} holds no examples; add rows with a 'text' column.")
    return examples


def _jsonl(raw: str, path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path.name} line {number} is not JSON ({err.msg}); write one JSON object per line.") from None
        if not isinstance(row, dict):
            raise InputError(f"{path.name} line {number} is not a JSON object; write {{\"text\": ...}} per line.")
        rows.append(row)
    return rows


def _csv(raw: str, path: Path) -> list[dict]:
    reader = csv.DictReader(raw.splitlines())
    if reader.fieldnames is None or "text" not in reader.fieldnames:
        found = ", ".join(reader.fieldnames or []) or "none"
        raise InputError(f"{path.name} has no 'text' column (columns: {found}); add a header row with 'text'.")
    return list(reader)
