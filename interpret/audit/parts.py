"""The audit's directory on disk: a manifest with the run's fingerprint, and one finished part per batch.

    out_dir/manifest.json                      what the audit is of (fingerprint and its components)
    out_dir/parts/batch-00012-tokens.parquet   the batch's rows of the tokens table
    out_dir/parts/batch-00012-examples.parquet the batch's rows of the examples table
    out_dir/parts/batch-00012.json             the batch's statistics; written last, so it marks the part done

Every file is written atomically (temporary file, then os.replace), so a killed audit leaves whole parts
or none; a part whose JSON is missing is simply computed again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from interpret.atomic import atomic_path, write_atomically
from interpret.audit.stats import HeadSums
from interpret.datasets import Example
from interpret.errors import InputError

FORMAT = 2  # bump when the layout or the tables change, so old parts are never mixed with new ones
OUTPUTS = ("tokens.parquet", "tokens.csv", "examples.parquet", "examples.csv", "heads.csv", "summary.html")
_PART = re.compile(r"^batch-(\d{5,})(-tokens\.parquet|-examples\.parquet|\.json)$")


def fingerprint_parts(
    examples: Sequence[Example],
    analyzers: Sequence[str],
    params: Mapping[str, Mapping[str, Any]],
    batch_size: int,
    max_length: int | None,
    model_id: str,
    head_digest: str,
    seed: int,
    target: str = "prediction",
) -> dict[str, str]:
    """Return the components of the audit's identity, each as a short hash or value (JSON-ready)."""
    data = hashlib.sha256()
    for example in examples:
        data.update(json.dumps([example.row, example.text, example.label]).encode("utf-8") + b"\n")
    return {
        "format": str(FORMAT),
        "examples": f"{len(examples)} examples, sha256 {data.hexdigest()[:16]}",
        "analyzers": ",".join(analyzers),
        "params": json.dumps(params, sort_keys=True, default=str),
        "batch_size": str(batch_size),
        "max_length": str(max_length),
        "model_id": model_id,
        "head": head_digest,
        "seed": str(seed),
        "target": target,
    }


def fingerprint(parts: Mapping[str, str]) -> str:
    """Return the sha256 of the fingerprint components."""
    return hashlib.sha256(json.dumps(dict(parts), sort_keys=True).encode("utf-8")).hexdigest()


class AuditDir:
    """The audit's output directory: opens (or refuses) a manifest, stores and reads per-batch parts."""

    def __init__(self, out_dir: Path) -> None:
        self.root = Path(out_dir)
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
                    f"{self.root} holds an audit of different {_difference(found.get('components', {}), components)};"
                    " pass a new output directory (--output) or --fresh (fresh=True) to discard its parts."
                )
            return
        if self.done():
            raise InputError(
                f"{self.root / 'parts'} holds parts but no manifest.json; pass a new output directory (--output)"
                " or --fresh (fresh=True) to discard them."
            )
        manifest = {"fingerprint": wanted, "n_batches": n_batches, "components": dict(components)}
        write_atomically(self.manifest, json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    def done(self) -> set[int]:
        """Return the indices of the batches whose parts are complete."""
        if not self.parts.is_dir():
            return set()
        found: dict[int, set[str]] = {}
        for path in self.parts.iterdir():
            match = _PART.match(path.name)
            if match:
                found.setdefault(int(match.group(1)), set()).add(match.group(2))
        return {index for index, kinds in found.items() if len(kinds) == 3}

    def write(self, index: int, tokens: pd.DataFrame, examples: pd.DataFrame, stats: HeadSums) -> None:
        """Store batch `index`: both tables, then its statistics, which mark it done."""
        with atomic_path(self._path(index, "-tokens.parquet")) as temporary:
            tokens.to_parquet(temporary, index=False)
        with atomic_path(self._path(index, "-examples.parquet")) as temporary:
            examples.to_parquet(temporary, index=False)
        write_atomically(self._path(index, ".json"), json.dumps(stats.to_dict()) + "\n")

    def read(self, n_batches: int) -> tuple[list[pd.DataFrame], list[pd.DataFrame], list[HeadSums]]:
        """Return the tokens parts, examples parts and statistics of batches 0..n_batches-1, in order."""
        missing = sorted(set(range(n_batches)) - self.done())
        if missing:
            raise InputError(f"{self.parts} lacks batch {missing[0]}; re-run the audit to compute it.")
        tokens = [pd.read_parquet(self._path(i, "-tokens.parquet")) for i in range(n_batches)]
        examples = [pd.read_parquet(self._path(i, "-examples.parquet")) for i in range(n_batches)]
        stats = [HeadSums.from_dict(json.loads(self._path(i, ".json").read_text("utf-8"))) for i in range(n_batches)]
        return tokens, examples, stats

    def clear(self) -> None:
        """Delete the manifest, every part and the final outputs (only files the audit names; nothing else)."""
        if self.parts.is_dir():
            for path in self.parts.iterdir():
                if _PART.match(path.name) or (path.name.startswith(".batch-") and path.name.endswith(".tmp")):
                    path.unlink()
        # Outputs of the discarded audit must not sit beside the parts of the new one if it stops early.
        for name in OUTPUTS:
            (self.root / name).unlink(missing_ok=True)
        self.manifest.unlink(missing_ok=True)

    def _path(self, index: int, suffix: str) -> Path:
        return self.parts / f"batch-{index:05d}{suffix}"

    def _read_manifest(self) -> dict[str, Any]:
        try:
            data = json.loads(self.manifest.read_text("utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}


def _difference(found: Mapping[str, str], wanted: Mapping[str, str]) -> str:
    """Return which components differ, e.g. "batch_size (16 there, 8 now)"."""
    changed = [key for key in wanted if found.get(key) != wanted[key]]
    if not changed:
        return "settings"
    key = changed[0]
    there, now = str(found.get(key, "none")), str(wanted[key])
    if len(there) + len(now) > 120:
        return key
    return f"{key} ({there} there, {now} now)"
