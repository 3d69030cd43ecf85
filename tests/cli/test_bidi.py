"""Bidirectional controls in user-controlled strings (texts, ids, labels, model and file names) cannot reorder
what a reader sees: on the report page, the heads page and the command line's stdout each is escaped as
`\\u202e`, in text, in `<option>`, in attributes a browser shows (title), while the data the page's scripts read
keeps the raw strings."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
import transformers
from cli_runner import run
from hf_tiny import tiny_config, word_tokenizer

from interpret.reading.text import BIDI_CONTROLS

RLO, LRI = "\u202e", "\u2066"  # right-to-left override; left-to-right isolate
NEGATIVE, POSITIVE = f"neg{RLO}ative", f"pos{LRI}itive"


class _Page(HTMLParser):
    """Every string a browser can show: text outside scripts and styles, and attribute values other than data-*
    (never displayed); the scripts' texts by id."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.html, self.text, self.attributes, self.scripts = html, [], [], {}
        self._in: tuple[str, str] | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes += [value for name, value in attrs if value and not name.startswith("data-")]
        if tag in ("script", "style"):
            self._in = (tag, dict(attrs).get("id") or "")
            self.scripts.setdefault(self._in[1], "")

    def handle_endtag(self, tag: str) -> None:
        if self._in is not None and tag == self._in[0]:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is None:
            self.text.append(data)
        else:
            self.scripts[self._in[1]] += data

    def raw_bidi(self) -> list[str]:
        return [text for text in [*self.text, *self.attributes] if any(char in BIDI_CONTROLS for char in text)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT classifier whose class names hold an RLO and an LRI, in a folder whose name holds an RLO."""
    torch.manual_seed(0)
    tokenizer = word_tokenizer()
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.id2label, config.label2id = {0: NEGATIVE, 1: POSITIVE}, {NEGATIVE: 0, POSITIVE: 1}
    directory = tmp_path_factory.mktemp("bidi") / f"model{RLO}dir"
    transformers.BertForSequenceClassification(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bidi-data") / f"data{RLO}.jsonl"
    rows = [{"id": f"a{RLO}1", "text": f"the cat {RLO}sat on the mat", "label": NEGATIVE}, {"id": "b2", "text": "a dog saw red", "label": POSITIVE}]
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def test_the_report_page_and_stdout_escape_every_bidi_control(model_dir: Path, data: Path, tmp_path: Path) -> None:
    out = tmp_path / f"report{RLO}.html"
    result = run("report", "--model", str(model_dir), "--input", str(data), "--target", NEGATIVE, "--contrast", POSITIVE,
                 "-a", "rollout", "--no-evidence", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    # stdout: each decision line and the path, escaped
    assert not any(char in BIDI_CONTROLS for char in result.stdout)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("example 0 (id a\\u202e1): prediction ")
    assert "explaining neg\\u202eative (p=" in lines[0] and ") rather than pos\\u2066itive (p=" in lines[0]
    assert lines[-1] == f"wrote {str(out).replace(RLO, chr(92) + 'u202e')}"

    page = _Page(out.read_text(encoding="utf-8"))
    assert page.raw_bidi() == []
    options = re.findall(r"<option[^>]*>(.*?)</option>", page.html, flags=re.DOTALL)
    assert options[0].startswith("a\\u202e1: the cat \\u202esat on the mat") and options[1].startswith("b2: ")
    explaining = re.search(r"<dt>Explaining</dt><dd><strong class=\"target\">(.*?)</dd>", page.html).group(1)
    assert explaining.startswith("neg\\u202eative</strong> (probability ")
    assert ") rather than <strong class=\"contrast\">pos\\u2066itive</strong> (probability " in explaining
    assert "model\\u202edir" in re.search(r"<title>(.*?)</title>", page.html).group(1)  # the model as loaded
    # what the scripts read is the raw data: the JSON block, written with JSON escapes
    assert not any(char in BIDI_CONTROLS for char in page.scripts["report-data"])
    assert json.loads(page.scripts["report-data"])["examples"][0]["id"] == f"a{RLO}1"


def test_the_heads_page_escapes_every_bidi_control(model_dir: Path, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "heads.html"
    result = run("heads", "--model", str(model_dir), "--input", str(data), "--fraction", "0.5", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    assert not any(char in BIDI_CONTROLS for char in result.stdout)
    page = _Page(out.read_text(encoding="utf-8"))
    assert page.raw_bidi() == []
    assert "data\\u202e.jsonl" in " ".join(page.text)
