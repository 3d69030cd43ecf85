"""Running audits on a tiny reference model: resume after an interruption, fingerprints, errors, heads."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch
from pandas.testing import assert_frame_equal

from interpret.audit import AuditOptions, run_audit
from interpret.audit.parts import AuditDir
from interpret.errors import AnalyzerError, ConfigError, InputError
from interpret.models.default_model import CentroidHead
from interpret.reading.datasets import Example
from interpret.reference import Encoder, EncoderClassifier, EncoderDecoder, TransformerConfig
from interpret.reference.vocab import word_tokenizer

WORDS = "the cat sat on mat a dog saw good bad red blue".split()


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(WORDS, model_max_length=16)


def _config(tokenizer, **overrides) -> TransformerConfig:
    sizes = dict(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer), max_positions=16, n_classes=2)
    return TransformerConfig(**{**sizes, **overrides})


@pytest.fixture(scope="module")
def model(tokenizer) -> EncoderClassifier:
    torch.manual_seed(0)
    return EncoderClassifier(_config(tokenizer)).eval()


def make_examples(n: int, offset: int = 0) -> list[Example]:
    """Return n deterministic examples of 1..7 words, labelled class 0 / class 1."""
    return [
        Example(
            row=i,
            text=" ".join(WORDS[(7 * (i + offset) + 3 * j) % len(WORDS)] for j in range(1 + i % 7)),
            label=f"class {i % 2}",
        )
        for i in range(n)
    ]


def _tables(result) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return pd.read_parquet(result.tokens), pd.read_parquet(result.examples), pd.read_csv(result.heads)


def _assert_same_tables(left, right) -> None:
    for a, b in zip(_tables(left), _tables(right)):
        assert_frame_equal(a, b, check_exact=True)


def test_interrupted_and_resumed_equals_uninterrupted(model, tokenizer, tmp_path, monkeypatch) -> None:
    examples = make_examples(14)
    whole = run_audit(model, tokenizer, examples, tmp_path / "whole", batch_size=3)
    assert (whole.n_computed, whole.n_resumed) == (14, 0)

    real_write = AuditDir.write_part
    written = []

    def write_then_stop(self, first, *args) -> None:
        real_write(self, first, *args)
        written.append(first)
        if len(written) == 2:
            raise KeyboardInterrupt  # as a Ctrl-C right after the second part is stored

    monkeypatch.setattr(AuditDir, "write_part", write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_audit(model, tokenizer, examples, tmp_path / "resumed", batch_size=3, options=AuditOptions(part_examples=3))
    monkeypatch.setattr(AuditDir, "write_part", real_write)
    assert not (tmp_path / "resumed" / "tokens.parquet").exists()
    resumed = run_audit(model, tokenizer, examples, tmp_path / "resumed", batch_size=3)
    assert (resumed.n_computed, resumed.n_resumed) == (8, 6)
    assert resumed.accuracy == whole.accuracy
    _assert_same_tables(whole, resumed)


def test_incomplete_parts_are_recomputed(model, tokenizer, tmp_path) -> None:
    examples = make_examples(10)
    first = run_audit(model, tokenizer, examples, tmp_path, batch_size=4, options=AuditOptions(part_examples=1))
    expected = _tables(first)
    parts = tmp_path / "parts"
    (parts / "part-00001-00001.json").unlink()  # killed before the record: the batch counts as not done
    (parts / "part-00002-00002-tokens.parquet").unlink()
    (parts / ".part-00002-00002-tokens.parquet.abc.tmp").write_bytes(b"partial")  # left by a SIGKILL
    again = run_audit(model, tokenizer, examples, tmp_path, batch_size=4)
    assert (again.n_computed, again.n_resumed) == (6, 4)
    for a, b in zip(expected, _tables(again)):
        assert_frame_equal(a, b, check_exact=True)
    done = run_audit(model, tokenizer, examples, tmp_path, batch_size=4)
    assert (done.n_computed, done.n_resumed) == (0, 10)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"batch_size": 5}, "batch_size (4 there, 5 now)"),
        ({"examples": make_examples(10, offset=1)}, "examples"),
        ({"analyzers": ["rollout"]}, "analyzers (rollout,flow there, rollout now)"),
        ({"params": {"rollout": {"head_fusion": "max"}}}, "params"),
        ({"options": AuditOptions(max_length=6)}, "max_length (None there, 6 now)"),
        ({"options": AuditOptions(model_id="another")}, "model_id"),
    ],
)
def test_a_different_audit_is_refused(model, tokenizer, tmp_path, change, named) -> None:
    settings = dict(examples=make_examples(10), batch_size=4, analyzers=["rollout", "flow"])
    run_audit(model, tokenizer, out_dir=tmp_path, **settings)
    with pytest.raises(InputError) as caught:
        run_audit(model, tokenizer, out_dir=tmp_path, **{**settings, **change})
    message = str(caught.value)
    assert "\n" not in message and named in message and "--output" in message and "--fresh" in message
    changed = {**settings, **change}
    changed["options"] = dataclasses.replace(changed.get("options", AuditOptions()), fresh=True)
    fresh = run_audit(model, tokenizer, out_dir=tmp_path, **changed)
    assert fresh.n_resumed == 0 and fresh.n_computed == fresh.n_examples


def test_a_different_head_is_refused(tokenizer, tmp_path) -> None:
    torch.manual_seed(0)
    encoder = Encoder(_config(tokenizer)).eval()
    head = CentroidHead(torch.randn(2, 32), ("negative", "positive"))
    examples = [Example(i, e.text, ("negative", "positive")[i % 2]) for i, e in enumerate(make_examples(6))]
    result = run_audit(encoder, tokenizer, examples, tmp_path, head=head)
    predictions = pd.read_parquet(result.examples)["prediction"]
    assert set(predictions) <= {"negative", "positive"}
    assert result.accuracy == pytest.approx(float((predictions == [e.label for e in examples]).mean()))
    other = CentroidHead(torch.randn(2, 32), ("negative", "positive"))
    with pytest.raises(InputError, match="head"):
        run_audit(encoder, tokenizer, examples, tmp_path, head=other)


def test_bare_encoder_has_no_predictions(tokenizer, tmp_path) -> None:
    torch.manual_seed(0)
    encoder = Encoder(_config(tokenizer)).eval()
    result = run_audit(encoder, tokenizer, make_examples(3), tmp_path, analyzers=["rollout"])
    table = pd.read_parquet(result.examples)
    assert table["prediction"].isna().all() and table["correct"].isna().all() and table["probability"].isna().all()
    assert result.accuracy is None


def test_fresh_clears_only_the_audits_own_files(model, tokenizer, tmp_path) -> None:
    run_audit(model, tokenizer, make_examples(4), tmp_path, batch_size=2, analyzers=["rollout"])
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "parts" / "keep.parquet").write_text("mine")
    assert any(path.name.startswith("part-") for path in (tmp_path / "parts").iterdir())
    AuditDir(tmp_path).clear()
    left = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file())
    assert left == ["notes.txt", "parts/keep.parquet"]


def test_parts_without_manifest_are_refused(model, tokenizer, tmp_path) -> None:
    run_audit(model, tokenizer, make_examples(4), tmp_path, batch_size=2)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(InputError, match="no manifest.json"):
        run_audit(model, tokenizer, make_examples(4), tmp_path, batch_size=2)


def test_a_long_text_stops_the_audit_naming_its_row(model, tokenizer, tmp_path) -> None:
    examples = make_examples(8)
    examples[5] = Example(row=5, text=" ".join(WORDS * 2), label=None)
    with pytest.raises(InputError) as caught:
        run_audit(model, tokenizer, examples, tmp_path, batch_size=2)
    message = str(caught.value)
    assert "example row 5 has 26 tokens" in message and "max_length=16" in message and "\n" not in message
    assert not (tmp_path / "manifest.json").exists() and not (tmp_path / "parts").exists()  # stopped before any batch

    truncated = run_audit(model, tokenizer, examples, tmp_path / "cut", batch_size=2,
                          options=AuditOptions(max_length=16))
    table = pd.read_parquet(truncated.examples).set_index("row")
    assert bool(table.loc[5, "truncated"]) and table.loc[5, "n_tokens"] == 16
    assert not table.drop(index=5)["truncated"].any()
    with pytest.raises(InputError, match="max_length=17 exceeds the model's limit of 16"):
        run_audit(model, tokenizer, examples, tmp_path / "over", options=AuditOptions(max_length=17))


def test_a_label_naming_no_class_is_refused_before_any_batch_naming_its_line(model, tokenizer, tmp_path) -> None:
    examples = [Example(e.row, e.text, "class 1", line=e.row + 2) for e in make_examples(4)]
    examples[2] = Example(2, examples[2].text, "yes", line=9)
    with pytest.raises(InputError) as caught:
        run_audit(model, tokenizer, examples, tmp_path, analyzers=["rollout"], options=AuditOptions(input_file=None))
    assert str(caught.value).startswith("example row 2: 'yes' is neither a class name nor a class index")
    assert not (tmp_path / "manifest.json").exists()
    data = tmp_path / "data.jsonl"
    data.write_text("")
    with pytest.raises(InputError, match=r"^data.jsonl line 9: 'yes' is neither"):
        run_audit(model, tokenizer, examples, tmp_path, analyzers=["rollout"], options=AuditOptions(input_file=data))


def test_refusals(model, tokenizer, tmp_path) -> None:
    examples = make_examples(4)
    with pytest.raises(AnalyzerError, match="Did you mean 'rollout'"):
        run_audit(model, tokenizer, examples, tmp_path, analyzers=["rolout"])
    with pytest.raises(AnalyzerError, match="not among the analyzers run"):
        run_audit(model, tokenizer, examples, tmp_path, analyzers=["rollout"], params={"flow": {}})
    with pytest.raises(ConfigError, match="batch_size"):
        run_audit(model, tokenizer, examples, tmp_path, batch_size=0)
    with pytest.raises(InputError, match="row 1 appears twice"):
        run_audit(model, tokenizer, [examples[1], examples[1]], tmp_path)
    with pytest.raises(InputError, match="example row 7 has no text"):
        run_audit(model, tokenizer, [*examples, Example(row=7, text="  ")], tmp_path)
    with pytest.raises(InputError, match="no examples"):
        run_audit(model, tokenizer, [], tmp_path)
    torch.manual_seed(0)
    training = EncoderClassifier(_config(tokenizer, dropout=0.1))  # a fresh module is in training mode
    with pytest.raises(ConfigError, match=r"model\.eval\(\)"):
        run_audit(training, tokenizer, examples, tmp_path)
    assert not (tmp_path / "manifest.json").exists()


def test_encoder_decoder_models_are_refused(tokenizer, tmp_path) -> None:
    torch.manual_seed(0)
    seq2seq = EncoderDecoder(_config(tokenizer)).eval()
    with pytest.raises(InputError, match="encoder-decoder model cannot take alone"):
        run_audit(seq2seq, tokenizer, make_examples(2), tmp_path)


def test_user_params_are_kept_and_recorded(model, tokenizer, tmp_path) -> None:
    result = run_audit(
        model, tokenizer, make_examples(3), tmp_path, analyzers=["rollout"],
        params={"rollout": {"head_fusion": "max", "rows": "all"}},
    )
    params = json.loads(json.loads(result.manifest.read_text())["components"]["params"])
    assert params["rollout"]["head_fusion"] == "max" and params["rollout"]["rows"] == "all"
    default = run_audit(model, tokenizer, make_examples(3), tmp_path / "d", analyzers=["rollout"])
    params = json.loads(json.loads(default.manifest.read_text())["components"]["params"])
    assert params["rollout"]["rows"] == "readout"  # the audit reads only the readout rows


def test_the_audit_counts_examples_through_the_librarys_progress_hook(model, tokenizer, tmp_path, capsys) -> None:
    """The library draws nothing (it drew its own tqdm bar): it opens one "audit" stage on the hook it is given and
    advances it per example, resumed examples first."""
    opened: list[tuple[str, int, str]] = []
    counted: list[int] = []

    def stage(description: str, total: int, unit: str):
        opened.append((description, total, unit))
        return counted.append

    run_audit(model, tokenizer, make_examples(5), tmp_path / "a", batch_size=2, analyzers=["rollout"], progress=stage)
    assert opened == [("audit", 5, "example")] and counted == [0, 2, 2, 1]
    opened.clear()
    counted.clear()
    run_audit(model, tokenizer, make_examples(5), tmp_path / "a", batch_size=2, analyzers=["rollout"], progress=stage)
    assert opened == [("audit", 5, "example")] and counted == [5]  # all resumed
    run_audit(model, tokenizer, make_examples(5), tmp_path / "b", batch_size=2, analyzers=["rollout"])
    assert capsys.readouterr().err == ""
