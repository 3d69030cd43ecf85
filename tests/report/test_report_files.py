"""Writing reports: atomic render, size limit, export round trip, layer/head selection, rounding and packing."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_cases import Page, encoder_decoder_trace, payload_report, report_of, trace_of

import interpret
from interpret.errors import ReportError
from interpret.files.csv_io import read_csv
from interpret.report import RunInfo, build_report, render
from interpret.report.views import decode, pack, round_significant_array


@pytest.fixture(scope="module")
def report():
    return payload_report()


def test_render_writes_the_projected_size_and_logs_it(report, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="interpret"):
        size = report.projected_size()
        path = report.render(tmp_path / "sub" / "audit.html")
    assert path == tmp_path / "sub" / "audit.html" and path.stat().st_size == size
    assert sum("projected size" in record.getMessage() for record in caplog.records) == 2
    assert [p.name for p in path.parent.iterdir()] == ["audit.html"]


def test_failed_render_keeps_the_older_report(report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "audit.html"
    path.write_text("older report")

    def half_then_fail(handle, data: bytes) -> None:
        handle.write(data[: len(data) // 2])
        raise OSError("disk full (injected)")

    monkeypatch.setattr(render, "_write_chunks", half_then_fail)
    with pytest.raises(OSError, match="injected"):
        report.render(path)
    assert path.read_text() == "older report"
    assert [p.name for p in tmp_path.iterdir()] == ["audit.html"]


def test_failed_first_render_leaves_no_file(report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        report.render(tmp_path / "audit.html")
    assert list(tmp_path.iterdir()) == []


def test_size_limit_refuses_in_one_line(report, tmp_path: Path) -> None:
    path = tmp_path / "audit.html"
    path.write_text("older report")
    with pytest.raises(ReportError) as err:
        report.render(path, max_bytes=10_000)
    message = str(err.value)
    assert "\n" not in message and "above the 0.0 MB limit" in message
    assert "layers=" in message and "fewer analyzers" in message and "shorten the text" in message
    assert path.read_text() == "older report"


def test_export_round_trips_at_full_precision(report, tmp_path: Path) -> None:
    written = report.export(tmp_path / "data")
    assert all(path.is_file() for path in written)
    manifest = json.loads((tmp_path / "data" / "report.json").read_text())
    assert [s["key"] for s in manifest["sections"]] == ["rollout", "flow", "attention"]
    for section in report.sections:
        for name, array in section.result.arrays.items():
            stem = tmp_path / "data" / section.key / name
            document = json.loads(stem.with_suffix(".json").read_text())
            assert document["axes"] == list(array.axes) and document["shape"] == list(array.values.shape)
            np.testing.assert_array_equal(np.asarray(document["values"], dtype=array.values.dtype), array.values)
            for frame in (pd.read_parquet(stem.with_suffix(".parquet")), pd.read_csv(stem.with_suffix(".csv"), float_precision="round_trip")):
                assert list(frame.columns) == [*array.axes, "value"]
                assert len(frame) == array.values.size
                values = frame["value"].to_numpy().astype(array.values.dtype).reshape(array.values.shape)
                np.testing.assert_array_equal(values, array.values)
    pattern = pd.read_parquet(tmp_path / "data" / "attention" / "pattern.parquet")
    assert sorted(pattern["layer"].unique()) == list(report.layers)
    tokens = read_csv(tmp_path / "data" / "tokens.csv")  # undoes the formula guard's leading '
    assert tokens["token"].tolist()[: len(report.examples[0].tokens)] == list(report.examples[0].tokens)
    checks = pd.read_parquet(tmp_path / "data" / "checks.parquet")
    assert checks["ok"].all() and len(checks) == sum(len(section.result.checks) for section in report.sections) == 6


def test_layer_and_head_selection_cuts_what_is_embedded(tmp_path: Path) -> None:
    trace = trace_of(["the cat sat on mat", "a dog ran"])
    report = report_of(trace, layers=[-1], heads=[1, 3])
    assert report.layers == (1,) and report.heads == (1, 3)
    data = Page(report.page().decode()).data_block()
    sections = {s["key"]: s for s in data["sections"]}
    pattern = sections["attention"]["arrays"]["pattern"]
    assert pattern["shape"][1:3] == [1, 2] and pattern["coords"] == {"layer": [1], "head": [1, 3]}
    expected = trace.stack("attn.hook_pattern")[:, [1]][:, :, [1, 3]].cpu().numpy()
    np.testing.assert_allclose(decode(pattern), expected, atol=1e-4)
    per_layer = sections["rollout"]["arrays"]["per_layer"]
    assert per_layer["shape"][1] == 1 and per_layer["coords"] == {"layer": [1]}
    # export keeps the analyzers' arrays whole
    assert report.section("rollout").result.arrays["per_layer"].values.shape[1] == 2


def test_selection_of_a_missing_layer_or_head_is_refused() -> None:
    trace = trace_of(["the cat sat"])
    with pytest.raises(ReportError, match="layer 7 was not captured"):
        report_of(trace, layers=[7])
    with pytest.raises(ReportError, match="head 9 was not captured"):
        report_of(trace, heads=[9])


def test_values_round_to_four_significant_digits() -> None:
    values = np.array([0.123456, 1.23456e-7, -98765.4321, 0.0, 1.0, 3.14159e12])
    np.testing.assert_array_equal(
        round_significant_array(values), [0.1235, 1.235e-7, -98770.0, 0.0, 1.0, 3.142e12]
    )
    packed = pack(np.array([[0.123456, np.nan]]), ("batch", "key"), {}, {})
    assert packed["encoding"] == "f" and packed["data"] == [0.1235, None]
    assert json.dumps(packed["data"]) == "[0.1235, null]"


def test_large_arrays_pack_as_sixteen_bit_fixed_point() -> None:
    rng = np.random.default_rng(0)
    values = rng.dirichlet(np.ones(128), size=(1, 4, 128)).reshape(1, 4, 128, 128)
    values[0, 0, 0, 0] = np.nan
    packed = pack(values, ("batch", "head", "query", "key"), {}, {})
    assert packed["encoding"] == "u16"
    back = decode(packed)
    assert np.isnan(back[0, 0, 0, 0])
    finite = ~np.isnan(values)
    span = np.nanmax(values) - np.nanmin(values)
    assert np.abs(back[finite] - values[finite]).max() <= span / 65534 / 2 + 1e-12


def test_encoder_decoder_report_labels_each_side(tmp_path: Path) -> None:
    trace = encoder_decoder_trace()
    results = [interpret.analyze(trace, "rollout"), interpret.analyze(trace, "flow", params={"solver": "scipy"})]
    report = build_report(trace, results, RunInfo.from_trace(trace))
    data = Page(report.render(tmp_path / "ed.html").read_text()).data_block()
    sections = {s["key"]: s for s in data["sections"]}
    arrays = sections["attention"]["arrays"]
    assert set(arrays) == {"encoder", "decoder", "cross"}
    assert arrays["cross"]["tokens"] == {"query": "decoder", "key": "encoder"}
    assert arrays["decoder"]["tokens"] == {"query": "decoder", "key": "decoder"}
    assert sections["rollout"]["arrays"]["cross"]["tokens"] == {"query": "decoder", "key": "encoder"}
    assert [entry["name"] for entry in data["bertviz"]["entries"]] == ["Encoder", "Decoder", "Cross"]
    assert data["examples"][1]["decoder_tokens"][:3] == ["[CLS]", "the", "cat"]


def test_to_dict_is_json(report) -> None:
    document = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    decisions = document["run"]["decisions"]
    assert len(decisions) == len(report.examples)
    for decision, expected in zip(decisions, report.run.decisions):
        assert decision["probability"] == expected.probability
        assert decision["target"]["ids"] == list(expected.target.ids)
        assert decision["target"]["pooling"] == [[p, w] for p, w in expected.target.pooling]
    assert [s["key"] for s in document["sections"]] == ["rollout", "flow", "attention"]


def test_results_of_another_trace_are_refused() -> None:
    one = trace_of(["the cat sat"])
    two = trace_of(["the cat sat", "a dog"])
    with pytest.raises(ReportError, match="has 1 examples but the trace has 2"):
        build_report(two, [interpret.analyze(one, "rollout")], RunInfo.from_trace(two))


def test_export_draws_readouts_and_head_maps_as_png_and_svg(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ElementTree

    from report_cases import payload_report

    report = payload_report(signed=True)
    written = report.export(tmp_path / "a")
    figures = sorted(path.relative_to(tmp_path / "a").as_posix() for path in written if "/figures/" in path.as_posix())
    for section in ("rollout", "flow", "signed_demo"):  # every section with a declared readout, per example
        for example in range(len(report.examples)):
            assert f"{section}/figures/readout-{example}.png" in figures
            assert f"{section}/figures/readout-{example}.svg" in figures
    assert "signed_demo/figures/head_score-0.svg" in figures  # a [batch, layer, head] array: a head map
    png = (tmp_path / "a" / "rollout" / "figures" / "readout-0.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = (tmp_path / "a" / "rollout" / "figures" / "readout-0.svg").read_text(encoding="utf-8")
    # Tokens are drawn as glyph paths; matplotlib names each in an XML comment with "--" and "<" escaped, so the
    # payloads stay inside their comments: the file is well-formed and holds no element of theirs.
    tree = ElementTree.fromstring(svg)
    assert not [element for element in tree.iter() if element.tag.split("}")[-1] in ("script", "img", "foreignObject")]
    again = report.export(tmp_path / "b")
    assert (tmp_path / "b" / "rollout" / "figures" / "readout-0.svg").read_bytes() == svg.encode("utf-8")
    assert len(again) == len(written)
    assert not any("/figures/" in path.as_posix() for path in report.export(tmp_path / "c", figures=False))
