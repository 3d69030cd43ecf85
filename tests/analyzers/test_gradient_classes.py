"""Classes side by side in one report (interpret.report.classes): each row equals Captum's LayerIntegratedGradients
called directly for that class, the contrast row is the difference of its two classes' rows (IG is linear in the
score), the HTML (parsed) draws one row of token chips per class on one diverging scale centred on 0 with a word
row under each, the sections show word chips stating their aggregation, and the JSON and CSV exports hold every
row's scores."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from captum.attr import LayerIntegratedGradients
from gradient_cases import _classifier_forward, baseline_ids, minilm
from hf_tiny import TEXTS, tiny_config, word_tokenizer

import interpret
from interpret.api import explain
from interpret.report.classes import ClassComparison, shown_rows
from interpret.request import Subject

STEPS = 20
SUBWORD_TEXT = "An unbelievably heartwarming documentary."  # WordPiece splits two of its words


def _tiny_three_classes() -> tuple[Any, Any]:
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.num_labels = 3
    config.id2label = {0: "red", 1: "green", 2: "blue"}
    config.label2id = {"red": 0, "green": 1, "blue": 2}
    model = transformers.BertForSequenceClassification(config).eval().double()
    with torch.no_grad():  # a random tiny BERT's logits hardly move (attributions ~1e-5): scale the classifier so
        model.classifier.weight.mul_(1000.0)  # that the 1e-5 comparisons below compare something
    return model, word_tokenizer()


@pytest.fixture(scope="module")
def three() -> tuple[Any, Any, Any]:
    model, tokenizer = _tiny_three_classes()
    report = explain(model, tokenizer, TEXTS, ["integrated_gradients"], params={"integrated_gradients": {"steps": STEPS}},
                     target=Subject("green", contrast="blue", compare=["green", "blue"]), evidence=False)
    return model, tokenizer, report


def _captum(model: Any, tokenizer: Any, target: torch.Tensor) -> np.ndarray:
    """IG of logit[target] per token [batch, pos], Captum called directly on a plain forward (pad baseline)."""
    trace = interpret.collect(model, tokenizer, TEXTS)
    ids, mask = trace.encoded.input_ids, trace.encoded.attention_mask
    method = LayerIntegratedGradients(_classifier_forward(model), model.get_input_embeddings())
    attr = method.attribute(ids, baselines=baseline_ids(trace, tokenizer.pad_token_id),
                            additional_forward_args=(mask, target), n_steps=STEPS)
    return attr.sum(-1).detach().cpu().numpy()


def test_each_row_is_that_class_attribution_and_the_contrast_their_difference(three) -> None:
    model, tokenizer, report = three
    (comparison,) = report.classes
    assert comparison.analyzer == "integrated_gradients"
    assert comparison.roles == ("prediction", "asked", "asked", "contrast")  # blue is asked: no second blue row
    trace = interpret.collect(model, tokenizer, TEXTS)
    with torch.no_grad():
        predicted = model(input_ids=trace.encoded.input_ids, attention_mask=trace.encoded.attention_mask).logits.argmax(-1)
    names = ["red", "green", "blue"]
    assert [labels[0] for labels in comparison.labels] == [names[i] for i in predicted.tolist()]
    assert all(labels[1:] == ("green", "blue", "green vs blue") for labels in comparison.labels)
    for row, target in ((0, predicted), (1, torch.tensor([1, 1])), (2, torch.tensor([2, 2]))):
        np.testing.assert_allclose(comparison.scores[:, row], _captum(model, tokenizer, target), atol=1e-5, rtol=0)
    np.testing.assert_allclose(comparison.scores[:, 3], comparison.scores[:, 1] - comparison.scores[:, 2], atol=1e-5, rtol=0)
    # the contrast row is the report's own explanation (green rather than blue), reused rather than run again
    np.testing.assert_array_equal(comparison.scores[:, 3], report.results[0].readout)
    assert np.abs(comparison.scores[:, 1] - comparison.scores[:, 2]).max() > 1e-2  # the classes really differ


class _Chips(HTMLParser):
    """Collects, per table of class rows or word rows, its caption and rows of chips (class, data-* attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, Any]] = []
        self.example: int | None = None
        self._depth: list[str] = []
        self._in_caption = False
        self._in_chip = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "div" and ("example-summary" in classes or "example-words" in classes):
            self.example = int(a["data-example"] or 0)
        if tag == "table" and ({"class-rows", "word-rows"} & set(classes)):
            self.tables.append({"kind": classes[0], "example": self.example, "caption": "", "rows": [],
                                "analyzer": a.get("data-analyzer") or a.get("data-section"), "hidden": None})
        elif tag == "caption" and self.tables:
            self._in_caption = True
        elif tag == "tr" and self.tables and ({"class-row", "word-row"} & set(classes)):
            self.tables[-1]["rows"].append({"kind": classes[0], "role": a.get("data-role"), "label": a.get("data-label"),
                                            "index": a.get("data-index"), "chips": []})
        elif tag == "span" and "cchip" in classes:
            self.tables[-1]["rows"][-1]["chips"].append({"level": classes[1], "text": "", **{
                key[5:]: value for key, value in a.items() if key.startswith("data-")}})
            self._in_chip = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption":
            self._in_caption = False
        if tag == "span":
            self._in_chip = False

    def handle_data(self, data: str) -> None:
        if self._in_caption:
            self.tables[-1]["caption"] += data
        elif self._in_chip:
            self.tables[-1]["rows"][-1]["chips"][-1]["text"] += data


def _parse(page: bytes) -> _Chips:
    parser = _Chips()
    parser.feed(page.decode("utf-8"))
    return parser


def test_the_html_draws_one_row_per_class_on_one_scale_centred_on_zero(three) -> None:
    _, _, report = three
    (comparison,) = report.classes
    tables = [t for t in _parse(report.page()).tables if t["kind"] == "class-rows"]
    assert [t["example"] for t in tables] == [0, 1]
    for b, table in enumerate(tables):
        rows = [row for row in table["rows"] if row["kind"] == "class-row"]
        drawn = shown_rows(comparison, b)
        assert [row["role"] for row in rows] == [role for _, role in drawn]
        assert [int(row["index"]) for row in rows] == [r for r, _ in drawn]
        assert [row["label"] for row in rows] == [comparison.labels[b][r] for r, _ in drawn]
        example = report.examples[b]
        shown = [p for p, (real, special) in enumerate(zip(example.real, example.special)) if real and not special]
        values = []
        for r, row in ((int(row["index"]), row) for row in rows):
            assert [int(chip["pos"]) for chip in row["chips"]] == shown
            assert [chip["text"] for chip in row["chips"]] == [example.display[p] for p in shown]
            np.testing.assert_array_equal([float(chip["value"]) for chip in row["chips"]], comparison.scores[b, r, shown])
            values += [(float(chip["value"]), chip["level"]) for chip in row["chips"]]
        # one scale for every row: the sign picks the side, the step grows with |value| across rows, and only the
        # largest |value| of the example (over all rows) reaches the last step
        top = max(abs(v) for v, _ in values)
        for value, level in values:
            assert level == "z" or level[0] == ("p" if value > 0 else "n")
        steps = sorted((abs(v), 0 if level == "z" else int(level[1])) for v, level in values)
        assert [s for _, s in steps] == sorted(s for _, s in steps)
        assert all((s == 5) == (abs(v) > 0.8 * top) for v, s in steps)
        assert f"±{top:.4g}" in table["caption"]


def test_the_exports_hold_every_class_row(three, tmp_path: Path) -> None:
    _, _, report = three
    (comparison,) = report.classes
    data = report.to_dict()["classes"][0]
    assert data["roles"] == list(comparison.roles) and data["axes"] == ["batch", "row", "key"]
    np.testing.assert_array_equal(np.asarray(data["scores"]), comparison.scores)
    report.export(tmp_path, figures=False)
    frame = pd.read_csv(tmp_path / "classes.csv")
    tokens = frame[frame["unit"] == "token"]
    real = sum(sum(example.real) for example in report.examples)
    assert len(tokens) == real * len(comparison.roles)
    for line in tokens.itertuples():
        assert line.score == pytest.approx(comparison.scores[line.batch, line.row, line.index], abs=1e-12)
        assert line.label == comparison.labels[line.batch][line.row]
        assert line.text == report.examples[line.batch].tokens[line.index]


@pytest.mark.parametrize("how", ["sum", "max"])
def test_word_chips_state_their_aggregation_and_add_up_the_subwords(how: str) -> None:
    case = minilm()
    report = explain(case.model, case.tokenizer, [SUBWORD_TEXT], ["integrated_gradients"], head=case.head,
                     params={"integrated_gradients": {"steps": 8, "words": how}}, target=Subject(compare=["negative"]),
                     evidence=False)
    tokens = report.examples[0].tokens
    assert any(token.startswith("##") for token in tokens)
    readout = report.results[0].readout[0]
    word_ids = case.tokenizer(SUBWORD_TEXT)["input_ids"] and case.tokenizer(SUBWORD_TEXT).word_ids()
    expected_words: dict[int, list[int]] = {}
    for position, word in enumerate(word_ids):
        if word is not None:
            expected_words.setdefault(word, []).append(position)
    reduce = np.sum if how == "sum" else np.max
    parsed = _parse(report.page()).tables
    (section,) = [t for t in parsed if t["kind"] == "word-rows"]
    assert section["analyzer"] == "integrated_gradients" and section["example"] == 0
    assert f"the {how} of its subword tokens" in section["caption"]
    chips = section["rows"][0]["chips"]
    assert [(int(c["start"]), int(c["stop"])) for c in chips] == [(p[0], p[-1] + 1) for p in expected_words.values()]
    assert [c["text"] for c in chips] == ["".join(report.examples[0].display[p] for p in ps) for ps in expected_words.values()]
    np.testing.assert_allclose([float(c["value"]) for c in chips], [reduce(readout[ps]) for ps in expected_words.values()],
                               atol=1e-12, rtol=0)
    # the class rows carry a word row under each class, stating the same aggregation
    (classes,) = [t for t in parsed if t["kind"] == "class-rows"]
    word_rows = [row for row in classes["rows"] if row["kind"] == "word-row"]
    assert [row["role"] for row in word_rows] == ["prediction", "asked"]
    assert f"word rows: {how} of the word's subword tokens" in classes["caption"]
    np.testing.assert_allclose([float(c["value"]) for c in word_rows[1]["chips"]],
                               [reduce(report.classes[0].scores[0, 1, ps]) for ps in expected_words.values()], atol=1e-12, rtol=0)


def test_targets_of_several_tokens_get_a_note_instead_of_class_rows() -> None:
    from gradient_cases import tiny_gpt2

    case = tiny_gpt2()
    report = explain(case.model, case.tokenizer, ["the cat sat"], ["integrated_gradients"],
                     target=Subject(continuation=["on the mat"], compare=[]), params={"integrated_gradients": {"steps": 4}},
                     evidence=False)
    assert report.classes == ()
    assert any(label == "Classes side by side" and "several tokens" in text for label, text in report.run.notes)


def test_an_asked_class_that_is_the_prediction_is_drawn_once() -> None:
    comparison = ClassComparison(
        analyzer="integrated_gradients", roles=("prediction", "asked", "asked"),
        labels=(("positive", "negative", "positive"), ("negative", "negative", "positive")),
        scores=np.zeros((2, 3, 4)), words=None, words_how=None, word_start=None, word_stop=None,
    )
    assert shown_rows(comparison, 0) == [(0, "prediction, asked"), (1, "asked")]
    assert shown_rows(comparison, 1) == [(0, "prediction, asked"), (2, "asked")]


def test_a_class_asked_by_index_and_by_name_is_computed_once() -> None:
    model, tokenizer = _tiny_three_classes()
    report = explain(model, tokenizer, TEXTS[:1], ["integrated_gradients"], params={"integrated_gradients": {"steps": 4}},
                     target=Subject(compare=["green", 1, "blue", 2]), evidence=False)
    (comparison,) = report.classes
    assert comparison.roles == ("prediction", "asked", "asked")
    assert comparison.labels[0][1:] == ("green", "blue")
