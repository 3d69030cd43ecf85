"""The evidence reaches the user: explain() computes it (on by default, off on request), the JSON holds every
metric, the HTML shows the section and marks a method no better than random beside its top tokens; on the
marker toy task (the decisive token known) the planted-evidence ranking beats every random ranking."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
import transformers
from hf_tiny import TEXTS, tiny_config, word_tokenizer

import interpret
from interpret.analysis import AnalyzerResult, NamedArray, Readout
from interpret.analysis.run import run_context
from interpret.errors import ConfigError
from interpret.evidence import evaluate_evidence
from interpret.reference.toy import marker_dataset, marker_task
from interpret.request import EvidenceOptions

METRICS = ("comprehensiveness", "sufficiency", "area", "comp_bins", "suff_bins", "morf", "lerf")


def _bert() -> torch.nn.Module:
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.num_labels = 2
    return transformers.BertForSequenceClassification(config).eval()


def test_explain_json_holds_every_metric_and_html_shows_the_section(tmp_path: object) -> None:
    report = interpret.explain(_bert(), word_tokenizer(), TEXTS, ["rollout", "last_layer_attention", "attention_entropy"])
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))["evidence"]
    assert data["removal"] == "delete" and data["bins"] == [0.01, 0.05, 0.1, 0.2, 0.5] and data["seeds"] == 5
    assert [m["method"] for m in data["methods"]] == ["rollout", "last_layer_attention"]
    assert sorted(data["order"]) == ["last_layer_attention", "rollout"]
    assert data["skipped"] == [["attention_entropy", "declares no readout"]]
    for method in [*data["methods"], data["random"]]:
        for key in METRICS:
            assert len(method[key]) == 2
        assert len(method["morf"][0]) == 11 and len(method["comp_bins"][0]) == 5
    assert set(data["random"]["spread"]) == {"comprehensiveness", "sufficiency", "area", "gap"}
    assert np.asarray(data["agreement"]["spearman"]).shape == (2, 2, 2)
    page = report.page().decode()
    assert 'id="evidence"' in page and "removal: <strong class=\"removal\">delete</strong>" in page
    assert page.count("<polyline") == 2 * 2 * 3  # examples × (MoRF, LeRF) × (2 methods + random)
    weak = report.evidence.better_than_random("rollout")
    assert page.count('class="random-mark"') == int((~weak).sum() + (~report.evidence.better_than_random("last_layer_attention")).sum())


def test_evidence_off_and_bad_removal() -> None:
    report = interpret.explain(_bert(), word_tokenizer(), TEXTS, ["rollout"], evidence=False)
    assert report.evidence is None and report.to_dict()["evidence"] is None and 'id="evidence"' not in report.page().decode()
    with pytest.raises(ConfigError, match="removal='drop'"):
        interpret.explain(_bert(), word_tokenizer(), TEXTS, ["rollout"], evidence=EvidenceOptions(removal="drop"))
    masked = interpret.explain(_bert(), word_tokenizer(), TEXTS, ["rollout"], evidence=EvidenceOptions(removal="mask"))
    assert masked.evidence.removal == "mask"


def _planted(trace: object, positions: list[tuple[int, ...]], seed: int) -> AnalyzerResult:
    """A readout that ranks the planted evidence first (the right explanation by construction)."""
    rng = np.random.default_rng(seed)
    values = rng.random(tuple(trace.encoded.attention_mask.shape)) * 0.1 * trace.encoded.attention_mask.cpu().numpy()
    for b, decisive in enumerate(positions):
        values[b, list(decisive)] = 1.0
    return AnalyzerResult(
        analyzer="planted", version="0", params={}, arrays={"readout": NamedArray(values, ("batch", "key"))},
        tokens=tuple(tuple(row) for row in trace.encoded.tokens), readout_of=Readout("readout"),
    )


def test_marker_task_separates_the_right_ranking_from_random(tmp_path: object) -> None:
    model, tokenizer = marker_task()
    data = marker_dataset(40, seed=7, min_words=10, max_words=12)
    keep = [i for i, label in enumerate(data.labels.tolist()) if label][:8]
    texts = [data.texts[i] for i in keep]
    trace = interpret.collect(model, tokenizer, texts, names=["*attn.hook_pattern"])
    ctx = run_context(trace, model, tokenizer)
    planted = _planted(trace, [data.decisive[i] for i in keep], 0)
    evidence = evaluate_evidence(trace, [planted], ctx, seeds=5)
    method = evidence.methods[0]
    # Deleting the one marker flips the decision: comprehensiveness at every bin is m(x) − m(x \ marker).
    assert np.all(method.comp_bins[:, 0] > 0.9)
    assert np.all(method.comprehensiveness > evidence.random.comprehensiveness + evidence.random.spread["comprehensiveness"])
    assert np.all(method.sufficiency < evidence.random.sufficiency)
    assert np.all(evidence.better_than_random("planted"))
    assert float(method.area.mean()) > float(evidence.random.area.mean()) + 0.3


def _summary_rows(page: str, example: int) -> list[str]:
    """The method names of one example's summary table in page order, the fold's header as "FOLD"."""
    block = page.split(f'<div class="example-summary" data-example="{example}"')[1].split("</table>")[0]
    rows = re.findall(r'<th scope="row"><a href="#sec-[^"]*">([^<]+)</a>|(Did no better than random here)', block)
    return [name or "FOLD" for name, fold in rows]


def test_summary_lists_methods_most_faithful_first_and_folds_those_no_better_than_random() -> None:
    """The summary leads with the method the evidence ranks first, whatever order the methods were asked in;
    on each example the methods no better than random there come after the others, under one header."""
    model, tokenizer = marker_task()
    data = marker_dataset(40, seed=7, min_words=10, max_words=12)
    texts = [data.texts[i] for i in range(6)]
    methods = ["rollout", "last_layer_attention", "input_x_gradient", "integrated_gradients"]
    ranked = [m.method for m in interpret.explain(model, tokenizer, texts, methods).evidence.ranked()]
    asked = ranked[::-1]  # the least faithful first: section order is not the evidence's order
    report = interpret.explain(model, tokenizer, texts, asked)
    assert [m.method for m in report.evidence.ranked()] == ranked
    page = report.page().decode()
    evidence, folds, marks = report.evidence, 0, 0
    for b in range(len(texts)):
        weak = {m.method for m in evidence.methods
                if np.isfinite(m.gap[b]) and not evidence.better_than_random(m.method)[b]}
        expected = [m for m in ranked if m not in weak] + (["FOLD"] if weak else []) + [m for m in ranked if m in weak]
        assert _summary_rows(page, b) == expected
        folds, marks = folds + (0 < len(weak) < len(ranked)), marks + len(weak)
    assert folds > 0  # some example has methods on both sides of the fold
    assert page.count('class="random-mark"') == marks
