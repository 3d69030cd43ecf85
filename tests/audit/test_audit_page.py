"""The audit summary page is drawn by the report's templates and stylesheet: interpret/audit holds no HTML or
CSS of its own, the page keeps the report's safety (escaping, hashed style, no script, nothing loaded), and odd
tokens are shown the report's way (cut on screen with the whole token on hover, isolated from their neighbours)."""

from __future__ import annotations

import ast
import base64
import hashlib
import html
import re
from pathlib import Path

import pandas as pd

import interpret.audit
from interpret.audit.summary import summary_html
from interpret.audit.tables import TOKEN_DTYPES, example_dtypes
from interpret.report import assets

AUDIT_PACKAGE = Path(interpret.audit.__file__).parent
_TAG = re.compile(r"<\s*/?\s*(!doctype|[a-z][a-z0-9-]*)(\s|>|/)", re.IGNORECASE)
_CSS_RULE = re.compile(r"[#.a-z][^{};]*\{[^{}]*\b[a-z-]+\s*:\s*[^{};]+;?[^{}]*\}", re.IGNORECASE)
_ATTRIBUTE = re.compile(r"\b(style|class|href|src)\s*=\s*[\"']", re.IGNORECASE)


def _strings(path: Path) -> list[tuple[int, str]]:
    """Return (line, text) of every string literal in a module except docstrings (f-string pieces included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.add(id(first.value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_html_or_css_strings_remain_in_interpret_audit() -> None:
    modules = sorted(AUDIT_PACKAGE.glob("*.py"))
    assert {path.name for path in modules} >= {"summary.py", "runner.py", "tables.py"}
    found = [
        f"{path.name}:{line}: {text[:60]!r}"
        for path in modules
        for line, text in _strings(path)
        if _TAG.search(text) or _CSS_RULE.search(text) or _ATTRIBUTE.search(text)
    ]
    assert found == []


def test_the_checker_would_see_html_and_css(tmp_path: Path) -> None:
    module = tmp_path / "page.py"
    module.write_text('"""<p>a docstring may show markup</p>"""\nA = "<td class=x>"\nB = ".h1 { background: red; }"\n'
                      'C = f"<tr>{A}</tr>"\n')
    hits = [text for _, text in _strings(module) if _TAG.search(text) or _CSS_RULE.search(text)]
    assert hits == ["<td class=x>", ".h1 { background: red; }", "<tr>", "</tr>"]


def _tables(token: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    tokens = pd.DataFrame({"row": [0, 0], "id": ["e0"] * 2, "analyzer": ["rollout"] * 2, "position": [0, 1],
                           "token": ["[CLS]", token], "is_special": [True, False], "score": [0.25, 0.75],
                           "rank": [None, 1]}).astype(TOKEN_DTYPES)
    examples = pd.DataFrame({
        "row": [0], "id": ["e0"], "text": [f"x {token}"], "text_pair": [None], "label": ["pos"], "prediction": ["neg"], "probability": [0.6], "score": [float("nan")],
        "correct": [False], "target": ["neg"], "target_source": ["prediction"], "n_tokens": [2], "truncated": [False],
        "rollout_top_token": [token], "rollout_top_position": [1], "rollout_top_score": [0.75],
        "rollout_special_share": [0.25],
    }).astype(example_dtypes(["rollout"]))
    heads = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "entropy": [0.5, 1.0, 1.5, 2.0]})
    return tokens, examples, heads


def test_the_page_is_the_reports_template_and_style() -> None:
    tokens, examples, heads = _tables("cat")
    page = summary_html(tokens, examples, heads, ["rollout"], 0.0, {"model": "tiny <model>", "seed": "0"})
    style = re.search(r"<style>(.*?)</style>", page, flags=re.DOTALL).group(1)
    assert style.startswith(assets.style())  # the report's stylesheet, then the audit's rules
    assert "table.heat .h10" in style
    digest = base64.b64encode(hashlib.sha256(style.encode("utf-8")).digest()).decode("ascii")
    policy = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1))
    assert f"style-src 'sha256-{digest}'" in policy and "script-src 'none'" in policy and "default-src 'none'" in policy
    assert '<meta name="generator" content="transformer-audit' in page and "<script" not in page
    assert '<dl class="facts">' in page and "tiny &lt;model&gt;" in page
    assert re.findall(r'<td class="num h(\d+)">', page) == ["0", "3", "7", "10"]
    assert "0 of 1 labelled examples" in page


def test_odd_tokens_are_cut_and_isolated() -> None:
    long_token = "a" * 6000
    for token, shown in ((long_token, long_token), ("abc\u202edef", "abc\\u202edef")):  # a bidi control escaped
        tokens, examples, heads = _tables(token)
        page = summary_html(tokens, examples, heads, ["rollout"], None, {})
        chip = f'<bdi class="tok" title="{shown}">{shown}</bdi>'
        assert chip in page and "\u202e" not in page  # shown cut by the stylesheet (.chip .tok: max-width 40ch), whole on hover
    assert ".chip .tok { display: inline-block; max-width: 40ch;" in assets.style()
