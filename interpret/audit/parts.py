"""The audit's directory on disk: a manifest with the run's fingerprint, and finished parts of consecutive batches.

    out_dir/manifest.json                            what the audit is of (fingerprint and its components)
    out_dir/.audit.lock                              the directory's lock (interpret.audit.lock)
    out_dir/parts/part-00003-00010-tokens.parquet    rows of the tokens table of batches 3..10
    out_dir/parts/part-00003-00010-examples.parquet  rows of the examples table of batches 3..10
    out_dir/parts/part-00003-00010-evidence.parquet  rows of the evidence table (audits that measure evidence)
    out_dir/parts/part-00003-00010.json              the part's record, written last (it marks the part done):
        {"format", "first", "last", "rows": example row ids in batch order,
         "files": {"tokens"|"examples"[|"evidence"]: {"name", "bytes", "sha256"}}, "stats": one HeadSums dict per batch}
    out_dir/tokens.parquet, ..., summary.html        the final outputs (OUTPUTS), published together (`publish`)

Every file is written atomically, so a killed audit leaves whole files or none. A part counts as done only
when its record is well formed, names exactly the example rows that its batches hold now, does not overlap
an earlier part, and each table file has the recorded size and sha256. Anything else (a swapped, truncated,
edited or deleted file, a record from another batch) fails the check: the part's files are deleted and its
batches computed again. Reading a part hashes the very bytes it parses, so nothing unchecked is ever read.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from interpret.audit.identity import FORMAT, difference
from interpret.audit.stats import HeadSums
from interpret.errors import InputError
from interpret.files.atomic import write_atomically

log = logging.getLogger("interpret")

SKIPPED = "skipped.csv"  # the input lines skipped for an empty text (an audit that skips them)
OUTPUTS = (
    "tokens.parquet", "tokens.csv", "examples.parquet", "examples.csv", "heads.csv", "summary.html",
    "evidence_examples.csv", "evidence.csv", SKIPPED, "drivers.parquet", "drivers.csv", "counterfactuals.csv",
    "slices.csv",
)
TABLES = ("tokens", "examples")
EVIDENCE_TABLE = "evidence"  # a part's third table when the audit measures evidence
_PART = re.compile(r"^part-(\d{5,})-(\d{5,})(-tokens\.parquet|-examples\.parquet|-evidence\.parquet|\.json)$")
_TEMPORARY = re.compile(r"^\.part-.*\.tmp$")
_STAGING = ".audit-final-"  # the hidden folder the final outputs are written into (`publish`), and its
_STAGED = re.compile(r"^\.audit-final-[a-z0-9_]{8}$")  # whole name (tempfile.mkdtemp's), which alone is removed
T = TypeVar("T")


class PartCheckError(Exception):
    """A part failed its check (the message says why); its batches must be computed again."""


@dataclass(frozen=True)
class Part:
    """A checked part: batches first..last (inclusive), the example rows they hold, and its record."""

    first: int
    last: int
    rows: tuple[int, ...]
    record: Mapping[str, Any]

    @property
    def batches(self) -> range:
        """The batch indices this part holds."""
        return range(self.first, self.last + 1)


def fingerprint(parts: Mapping[str, str]) -> str:
    """Return the sha256 of the fingerprint components."""
    return hashlib.sha256(json.dumps(dict(parts), sort_keys=True).encode("utf-8")).hexdigest()


class AuditDir:
    """The audit's output directory: opens (or refuses) a manifest, stores, checks and reads parts."""

    def __init__(self, out_dir: Path, *, evidence: bool = False) -> None:
        """evidence: every part also holds the evidence table (and fails its check without it)."""
        self.root = Path(out_dir)
        self.tables = (*TABLES, EVIDENCE_TABLE) if evidence else TABLES
        self.parts = self.root / "parts"
        self.manifest = self.root / "manifest.json"

    def open(self, components: Mapping[str, str], n_batches: int, *, fresh: bool = False) -> None:
        """Start or resume the audit described by `components`; refuse a directory holding another one."""
        if fresh:
            self.clear()
        wanted = fingerprint(components)
        if self.manifest.is_file():
            found = self._read_manifest()
            if found.get("fingerprint") != wanted:
                raise InputError(
                    f"{self.root} holds an audit of a different {difference(found.get('components', {}), components)};"
                    " pass a new output directory (--output) or --fresh (fresh=True) to discard its parts."
                )
            return
        if self._part_files():
            raise InputError(
                f"{self.parts} holds parts but no manifest.json; pass a new output directory (--output)"
                " or --fresh (fresh=True) to discard them."
            )
        manifest = {"fingerprint": wanted, "n_batches": n_batches, "components": dict(components)}
        write_atomically(self.manifest, json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    def checked_parts(self, batch_rows: Sequence[Sequence[int]]) -> list[Part]:
        """Return the parts that pass their check, by first batch; delete every other part file.

        batch_rows: for each batch index, the example row ids it holds now.
        """
        records = sorted(
            (int(m.group(1)), int(m.group(2)))
            for m in (_PART.match(path.name) for path in self._part_files())
            if m and m.group(3) == ".json"
        )
        accepted: list[Part] = []
        for first, last in records:
            try:
                if accepted and first <= accepted[-1].last:
                    raise PartCheckError(f"it overlaps part {accepted[-1].first}-{accepted[-1].last}")
                accepted.append(self._check(first, last, batch_rows))
            except PartCheckError as err:
                log.warning(f"audit part {first}-{last} in {self.parts} failed its check ({err}); recomputing it")
        keep = {self._name(part.first, part.last, suffix) for part in accepted for suffix in _SUFFIXES}
        for path in self._part_files():
            if path.name not in keep:
                path.unlink(missing_ok=True)
        self._remove_temporaries()  # left by a killed audit; the lock says no one else is writing them
        return accepted

    def write_part(
        self, first: int, last: int, rows: Sequence[int], tables: Mapping[str, pd.DataFrame], stats: Sequence[HeadSums]
    ) -> None:
        """Store batches first..last: each of its tables, then the record (with their sizes and sha256), which marks it done."""
        files = {}
        for table in self.tables:
            buffer = io.BytesIO()
            tables[table].to_parquet(buffer, index=False)
            data = buffer.getvalue()
            name = self._name(first, last, f"-{table}.parquet")
            write_atomically(self.parts / name, data)
            files[table] = {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        record = {
            "format": FORMAT, "first": first, "last": last, "rows": [int(row) for row in rows], "files": files,
            "stats": [part.to_dict() for part in stats],
        }
        write_atomically(self.parts / self._name(first, last, ".json"), json.dumps(record) + "\n")

    def read(self, part: Part) -> tuple[dict[str, pd.DataFrame], list[HeadSums]]:
        """Return a checked part's tables (table name → rows) and per-batch statistics; PartCheckError if its
        bytes no longer match the record, or its tables hold other rows than recorded."""
        frames = {}
        for table in self.tables:
            entry = part.record["files"][table]
            try:
                data = (self.parts / entry["name"]).read_bytes()
            except OSError as err:
                raise PartCheckError(f"{entry['name']} cannot be read ({err.strerror or type(err).__name__})") from None
            if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise PartCheckError(f"{entry['name']} changed after it was written")
            frames[table] = pd.read_parquet(io.BytesIO(data))
        if sorted(frames["examples"]["row"].tolist()) != sorted(part.rows):
            raise PartCheckError("its examples table holds other rows than its record names")
        for table in self.tables:
            if table != "examples" and not set(frames[table]["row"].tolist()) <= set(part.rows):
                raise PartCheckError(f"its {table} table holds rows its record does not name")
        try:
            stats = [HeadSums.from_dict(item) for item in part.record["stats"]]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PartCheckError("its record's statistics are malformed") from None
        return frames, stats

    def publish(self, write: Callable[[Path], T]) -> T:
        """Return `write(folder)` after it wrote the final outputs into `folder`, a new hidden folder in the
        output directory, and they were renamed from there into place.

        Renames write no data, so a failure while writing (a full disk, an error, an interruption) leaves
        the earlier outputs whole and untouched, never new tables beside old ones; the folder is removed
        either way (and a killed process's by the next run, `checked_parts`). An output this call did not
        write (drivers.csv of an earlier run with drivers, now run without) is removed once the others are in place.
        """
        folder = Path(tempfile.mkdtemp(dir=self.root, prefix=_STAGING))
        try:
            result = write(folder)
            written = sorted(folder.iterdir())
            for path in written:
                os.replace(path, self.root / path.name)
            for name in set(OUTPUTS) - {path.name for path in written}:
                (self.root / name).unlink(missing_ok=True)
            return result
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def discard(self, part: Part) -> None:
        """Delete a part's files (its record first, so a part is never half there and counted done)."""
        for suffix in (".json", *_SUFFIXES[:-1]):
            (self.parts / self._name(part.first, part.last, suffix)).unlink(missing_ok=True)

    def clear(self) -> None:
        """Delete the manifest, every part and the final outputs (only files the audit names; nothing else)."""
        for path in self._part_files():
            path.unlink(missing_ok=True)
        self._remove_temporaries()
        # Outputs of the discarded audit must not sit beside the parts of the new one if it stops early.
        for name in OUTPUTS:
            (self.root / name).unlink(missing_ok=True)
        self.manifest.unlink(missing_ok=True)

    def _check(self, first: int, last: int, batch_rows: Sequence[Sequence[int]]) -> Part:
        """Return the part first..last when its record and files pass the check, else raise PartCheckError."""
        path = self.parts / self._name(first, last, ".json")
        try:
            record = json.loads(path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise PartCheckError("its record is not readable JSON") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise PartCheckError("its record is not of this audit format")
        if (record.get("first"), record.get("last")) != (first, last) or not first <= last < len(batch_rows):
            raise PartCheckError("its record names other batches than its file name")
        expected = [int(row) for index in range(first, last + 1) for row in batch_rows[index]]
        if record.get("rows") != expected:
            raise PartCheckError("it holds other example rows than these batches")
        stats = record.get("stats")
        if not isinstance(stats, list) or len(stats) != last - first + 1:
            raise PartCheckError("its record lacks the batches' statistics")
        files = record.get("files")
        if not isinstance(files, dict):
            raise PartCheckError("its record lists no files")
        for table in self.tables:
            entry = files.get(table)
            if not isinstance(entry, dict) or entry.get("name") != self._name(first, last, f"-{table}.parquet"):
                raise PartCheckError(f"its record lists no {table} file")
            self._check_file(self.parts / entry["name"], entry)
        return Part(first, last, tuple(expected), record)

    @staticmethod
    def _check_file(path: Path, entry: Mapping[str, Any]) -> None:
        try:
            size = path.stat().st_size
        except OSError:
            raise PartCheckError(f"{path.name} is missing") from None
        if size != entry.get("bytes"):
            raise PartCheckError(f"{path.name} has {size} bytes, not the {entry.get('bytes')} written")
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != entry.get("sha256"):
            raise PartCheckError(f"{path.name} does not have the sha256 written")

    def _remove_temporaries(self) -> None:
        if self.parts.is_dir():
            for path in self.parts.iterdir():
                if _TEMPORARY.match(path.name):
                    path.unlink(missing_ok=True)
        for path in self.root.iterdir() if self.root.is_dir() else ():
            if _STAGED.match(path.name) and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)

    def _part_files(self) -> list[Path]:
        if not self.parts.is_dir():
            return []
        return [path for path in self.parts.iterdir() if _PART.match(path.name)]

    @staticmethod
    def _name(first: int, last: int, suffix: str) -> str:
        return f"part-{first:05d}-{last:05d}{suffix}"

    def _read_manifest(self) -> dict[str, Any]:
        try:
            data = json.loads(self.manifest.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}


_SUFFIXES = ("-tokens.parquet", "-examples.parquet", "-evidence.parquet", ".json")
