"""docs/architecture.md stays true to the code: its example plugin is the real file, and a plugin written from
that text alone installs through an entry point and runs first time; the contract it documents is the one
the registry checks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from plugin_install import install_plugin, plugin_site

import interpret
from interpret.analysis import registry
from interpret.analysis.contract import Analyzer
from interpret.reference import EncoderClassifier, TransformerConfig
from interpret.reference.vocab import word_tokenizer
from interpret.registration.analyzer_rules import RUN_PARAMETERS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _example() -> str:
    block = DOC.split("<!-- example-plugin -->", 1)[1].split("<!-- /example-plugin -->", 1)[0]
    return re.sub(r"^```python\n|```\s*$", "", block.strip())


def test_the_example_is_the_real_plugin_file() -> None:
    assert _example() == (ROOT / "plugins" / "last_layer_attention.py").read_text(encoding="utf-8")


def test_every_contract_attribute_is_documented() -> None:
    for attribute in Analyzer.__annotations__:
        assert f"{attribute}:" in DOC, attribute
    assert "(self, trace, params, ctx)" in DOC and RUN_PARAMETERS == ("self", "trace", "params", "ctx")


@pytest.fixture
def site(tmp_path: Path):
    with plugin_site(tmp_path, "docs_example") as root:
        yield root


def test_a_plugin_written_from_the_docs_installs_and_runs_first_time(site: Path) -> None:
    source = _example().replace('name = "last_layer_attention"', 'name = "docs_example"')
    install_plugin(site, "docs-example-plugin", "docs_example", source, {"docs_example": "docs_example:LastLayerAttention"},
                   "interpret.analyzers")
    registry.refresh()
    entry = registry.entries()["docs_example"]
    assert not entry.broken and entry.distribution == "docs-example-plugin", entry.error
    torch.manual_seed(0)
    tokenizer = word_tokenizer("the cat sat on mat a dog".split())
    config = TransformerConfig(d_model=16, n_heads=2, n_layers=2, d_mlp=32, vocab_size=len(tokenizer), max_positions=16,
                               pooling="mean")
    model = EncoderClassifier(config).eval()
    trace = interpret.collect(model, tokenizer, ["the cat sat", "a dog"])
    result = interpret.analyze(trace, "docs_example", model=model, tokenizer=tokenizer)
    last = trace["blocks.1.attn.hook_pattern"].double().mean(1).cpu().numpy()  # [batch, query, key]
    for b, n in enumerate(trace.encoded.lengths):
        expected = last[b, :n, :n].mean(0)  # a mean-pooled classifier reads every real row, 1/n each
        np.testing.assert_allclose(result.readout[b, :n], expected, atol=1e-12)
    report = interpret.explain(model, tokenizer, "the cat sat", ["docs_example"])
    assert report.results[0].readout is not None
