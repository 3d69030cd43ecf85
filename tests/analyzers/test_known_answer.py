"""Known answer: on the toy marker task the decisive token is known by construction; rollout and flow find it."""

from __future__ import annotations

import numpy as np
import pytest

import interpret
from interpret.reference.toy import marker_dataset, marker_task


@pytest.mark.parametrize("name", ["rollout", "flow"])
def test_attention_analyzers_rank_the_marker_first(name: str) -> None:
    model, tokenizer = marker_task()
    data = marker_dataset(120, seed=123)
    positive = [i for i, label in enumerate(data.labels.tolist()) if label == 1][:40]
    trace = interpret.collect(model, tokenizer, [data.texts[i] for i in positive])
    result = interpret.analyze(trace, name, model=model, tokenizer=tokenizer)
    scores = result.readout.copy()  # [batch, key]
    scores[trace.encoded.special.cpu().numpy()] = -np.inf
    top = scores.argmax(-1)
    hits = [int(top[row]) in data.decisive[i] for row, i in enumerate(positive)]
    assert np.mean(hits) >= 0.95
