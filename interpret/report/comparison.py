"""`ClassComparison`: one analyzer's attributions for several classes of the same examples, as plain data
(built by `interpret.report.classes.compared`, held by `ReportData.classes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from jaxtyping import Float

RowRole = Literal["prediction", "asked", "contrast class", "contrast"]


@dataclass(frozen=True)
class ClassComparison:
    """One analyzer's attributions for several classes of the same examples.

    analyzer: the analyzer's name; roles: each row's role (same for every example);
    labels [batch][row]: each example's row label (its class, or "A vs B" for a contrast);
    scores [batch, row, key]: the readout of each row (0 where a token is not attributed);
    words [batch, row, word] or None: the word-level readout (`words_how` over subwords: sum or max);
    word_start / word_stop [batch, word]: each word's [start, stop) token positions, −1 past an example's words.
    """

    analyzer: str
    roles: tuple[RowRole, ...]
    labels: tuple[tuple[str, ...], ...]
    scores: Float[np.ndarray, "batch row key"]
    words: Float[np.ndarray, "batch row word"] | None = None
    words_how: str | None = None
    word_start: np.ndarray | None = None
    word_stop: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict of every field (arrays as nested lists)."""
        return {
            "analyzer": self.analyzer,
            "roles": list(self.roles),
            "labels": [list(row) for row in self.labels],
            "axes": ["batch", "row", "key"],
            "scores": self.scores.tolist(),
            "word_axes": ["batch", "row", "word"],
            "words": None if self.words is None else self.words.tolist(),
            "words_how": self.words_how,
            "word_start": None if self.word_start is None else self.word_start.tolist(),
            "word_stop": None if self.word_stop is None else self.word_stop.tolist(),
        }
