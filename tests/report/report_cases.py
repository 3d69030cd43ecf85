"""Reports for the report tests: a tiny reference model, payload tokens, and an html.parser walk of the page."""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from html.parser import HTMLParser
from typing import Any

import numpy as np
import torch

import interpret
from interpret.analysis.result import AnalyzerResult, Check, NamedArray, Readout, View
from interpret.decision.decide import decide
from interpret.reference import EncoderClassifier, EncoderDecoder, TransformerConfig
from interpret.reference.vocab import word_tokenizer
from interpret.report import Report, RunInfo, build_report
from interpret.request import Subject
from interpret.trace import Trace

WORDS = "the cat sat on mat a dog saw big small ran".split()

# Tokens that would run or create elements if any layer pasted them into the page as HTML.
PAYLOADS = (
    '</script><script>window.__pwned=1</script>',
    '<img src=x onerror="window.__pwned=1">',
    '"><svg onload=window.__pwned=1>',
    "<!--",
    "&amp;",
    "line\u2028sep\u2029para",
    "</SCRIPT ><!-- <script>",
    "--><script>window.__pwned=1</script><!--",
)


@cache
def tiny_model() -> tuple[EncoderClassifier, Any]:
    """Return a 2-layer, 4-head reference encoder classifier and its word tokenizer."""
    torch.manual_seed(0)
    tokenizer = word_tokenizer(WORDS)
    config = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer), max_positions=64, n_classes=2
    )
    return EncoderClassifier(config).eval(), tokenizer


def trace_of(texts: list[str], payloads: tuple[str, ...] = ()) -> Trace:
    """Return the trace of `texts`; example 0's non-special tokens are replaced by `payloads`, in order."""
    model, tokenizer = tiny_model()
    trace = interpret.collect(model, tokenizer, texts)
    if not payloads:
        return trace
    tokens = [list(row) for row in trace.encoded.tokens]
    plain = [i for i, flag in enumerate(trace.encoded.special[0].tolist()) if not flag]
    assert len(plain) >= len(payloads), "give example 0 a text with a word per payload"
    for position, payload in zip(plain, payloads):
        tokens[0][position] = payload
    return dataclasses.replace(trace, encoded=dataclasses.replace(trace.encoded, tokens=tokens))


def report_of(trace: Trace, *, signed: bool = False, **kwargs: Any) -> Report:
    """Return the report of rollout (per layer) and flow on `trace`, and `signed_result` too if asked."""
    model, tokenizer = tiny_model()
    decided = tuple(decide(model, trace, tokenizer))
    targets = [decision.target for decision in decided]
    results = [
        interpret.analyze(trace, "rollout", params={"per_layer": True}, targets=targets),
        interpret.analyze(trace, "flow", params={"solver": "scipy"}, targets=targets),
    ]
    if signed:
        results.append(signed_result(trace))
    run = RunInfo.from_trace(trace, decisions=decided, seed=0, wall_seconds=0.5)
    return build_report(trace, results, run, **kwargs)


def payload_report(*, signed: bool = False, **kwargs: Any) -> Report:
    """Return a report whose first example's tokens are every payload of PAYLOADS."""
    text = " ".join(WORDS[: len(PAYLOADS)])
    return report_of(trace_of([text, "a dog ran"], PAYLOADS), signed=signed, **kwargs)


def signed_result(trace: Trace) -> AnalyzerResult:
    """Return a made-up analyzer result with signed scores that asks for the views rollout and flow do not.

    head_score [batch, layer, head] (a head map: head grid of one cell per head, and a table, which the report
    draws as a [layer × head] heat table per example), layer_score [batch, layer] (a line with a single series,
    and a sortable table), attr [batch, key] (a signed readout: a diverging token strip).
    """
    batch, pos = trace.encoded.batch, trace.encoded.pos
    layers, heads = trace.meta.n_layers, trace.meta.n_heads
    generator = np.random.default_rng(0)
    arrays = {
        "head_score": NamedArray(generator.normal(size=(batch, layers, heads)), ("batch", "layer", "head")),
        "layer_score": NamedArray(generator.normal(size=(batch, layers)), ("batch", "layer")),
        "attr": NamedArray(generator.normal(size=(batch, pos)), ("batch", "key")),
    }
    views = (
        View("head_grid", "head_score", "Head scores [layer × head]"),
        View("table", "head_score", "Head scores by layer and head"),
        View("table", "layer_score", "Layer scores, sortable"),
        View("line", "layer_score", "Score by layer"),
        View("token_strip", "attr", "Signed attribution"),
    )
    return AnalyzerResult(
        analyzer="signed_demo", version="0", params={}, arrays=arrays, views=views,
        checks={"delta": Check(0.5, 0.01, "made-up residual, out of tolerance on purpose", "warning")},
        readout_of=Readout("attr", signed=True),
    )


def encoder_decoder_trace() -> Trace:
    """Return a trace of a tiny reference encoder-decoder (2 examples, padded on both sides)."""
    torch.manual_seed(0)
    tokenizer = word_tokenizer(WORDS)
    config = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, n_decoder_layers=2, d_mlp=64, vocab_size=len(tokenizer), max_positions=32
    )
    model = EncoderDecoder(config).eval()
    return interpret.collect(model, tokenizer, ["the cat sat", "a dog saw the mat"], decoder_inputs=["a", "the cat"])


class Page(HTMLParser):
    """The parts of an HTML page the tests look at: elements, attributes, scripts, styles and text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self.text: list[str] = []
        self._open: tuple[str, dict[str, str | None]] | None = None
        self._raw: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._open, self._raw = (tag, dict(attrs)), []

    def handle_endtag(self, tag: str) -> None:
        if self._open is not None and tag == self._open[0]:
            body = "".join(self._raw)
            if tag == "script":
                self.scripts.append((self._open[1], body))
            else:
                self.styles.append(body)
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._raw.append(data)
        else:
            self.text.append(data)

    def data_block(self, element_id: str = "report-data") -> dict[str, Any]:
        """Return the parsed JSON of the <script type="application/json"> with this id."""
        for attrs, body in self.scripts:
            if attrs.get("id") == element_id:
                assert attrs.get("type") == "application/json"
                return json.loads(body)
        raise AssertionError(f"no JSON block #{element_id}")

    def raw_data_block(self, element_id: str = "report-data") -> str:
        """Return the JSON block's text as it stands in the page."""
        return next(body for attrs, body in self.scripts if attrs.get("id") == element_id)

    def csp(self) -> str:
        """Return the content of the Content-Security-Policy meta tag."""
        for tag, attrs in self.tags:
            if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "content-security-policy":
                return attrs.get("content") or ""
        raise AssertionError("no Content-Security-Policy meta tag")


FIRST_LOOK_ANALYZERS = ("rollout", "flow", "attention_entropy")


def explained(
    texts: list[str], analyzers: tuple[str, ...] = FIRST_LOOK_ANALYZERS, ids: list[str] | None = None, evidence: bool = True,
) -> Report:
    """Return `interpret.explain`'s report on the tiny model (with evidence: each readout against random)."""
    model, tokenizer = tiny_model()
    return interpret.explain(model, tokenizer, texts, list(analyzers), target=Subject(ids=ids), evidence=evidence)


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclasses.dataclass
class Element:
    """One element of a parsed page, with its children (elements and text)."""

    tag: str
    attrs: dict[str, str | None]
    children: list[Any] = dataclasses.field(default_factory=list)

    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()

    def text(self) -> str:
        """Return the text inside, whitespace collapsed."""
        return " ".join("".join(c if isinstance(c, str) else c.text() for c in self.children).split())

    def find_all(self, tag: str, cls: str | None = None) -> list[Element]:
        """Return every descendant <tag> (with class `cls`, when given), in document order."""
        found = []
        for child in self.children:
            if isinstance(child, Element):
                if child.tag == tag and (cls is None or cls in child.classes()):
                    found.append(child)
                found.extend(child.find_all(tag, cls))
        return found


def parse_tree(html: str) -> Element:
    """Return the page as an Element tree (html.parser; every element the templates open, they close)."""
    root = Element("#root", {})
    stack = [root]

    class Builder(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            node = Element(tag, dict(attrs))
            stack[-1].children.append(node)
            if tag not in _VOID:
                stack.append(node)

        def handle_endtag(self, tag: str) -> None:
            for depth in range(len(stack) - 1, 0, -1):
                if stack[depth].tag == tag:
                    del stack[depth:]
                    return

        def handle_data(self, data: str) -> None:
            stack[-1].children.append(data)

    builder = Builder(convert_charrefs=True)
    builder.feed(html)
    builder.close()
    return root
