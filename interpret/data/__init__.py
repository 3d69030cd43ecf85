"""Data the package ships: labelled English sentiment sentences written for the project (Apache-2.0).

Three disjoint splits, one JSON object per line with "id", "text" and "label" ("negative" or "positive"):

- `sentiment_train.jsonl` (704 sentences): what the default sentiment head is fitted on, and nothing else is.
- `sentiment_heldout.jsonl` (180 sentences): never used for fitting; measures the head and serves the
  faithfulness benchmarks. Its order interleaves the labels, so any prefix is nearly balanced.
- `sentiment_plain.jsonl` (60 sentences): short everyday sentences, one positive and one negative about each
  of 30 subjects, a quick check that the head gets the obvious cases right.

`sentiment_seed.jsonl` holds the 60 sentences of the earlier nearest-centroid head ({"text", "label"} only);
it is kept so the new head can be compared with the old one, and is used for nothing else.
See LICENSE-data.md beside this file for where the sentences come from and their licence.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Literal

from interpret.errors import ConfigError

Split = Literal["train", "heldout", "plain", "seed"]
SPLITS: tuple[Split, ...] = ("train", "heldout", "plain", "seed")


def split_bytes(split: str) -> bytes:
    """Return the raw bytes of a split's JSONL file (what cache keys hash)."""
    if split not in SPLITS:
        raise ConfigError(f"split {split!r} is not one of {', '.join(SPLITS)}; pick one of those.")
    return resources.files(__name__).joinpath(f"sentiment_{split}.jsonl").read_bytes()


def read_split(split: str) -> list[dict[str, str]]:
    """Return a split's examples in file order, each a dict with "text" and "label" (and "id", except seed)."""
    lines = split_bytes(split).decode("utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def training_examples() -> list[dict[str, str]]:
    """Return the 704 training sentences ({"id", "text", "label"}), the only data the head is fitted on."""
    return read_split("train")


def heldout_examples() -> list[dict[str, str]]:
    """Return the 180 held-out sentences ({"id", "text", "label"}), never used for fitting."""
    return read_split("heldout")


def plain_examples() -> list[dict[str, str]]:
    """Return the 60 plain test sentences ({"id", "text", "label"}), never used for fitting."""
    return read_split("plain")


def seed_examples() -> list[dict[str, str]]:
    """Return the 60 sentences the earlier nearest-centroid head was fitted on ({"text", "label"})."""
    return read_split("seed")
