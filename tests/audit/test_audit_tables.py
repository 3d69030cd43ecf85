"""Audit tables, statistics and summary on a tiny reference classifier: columns, dtypes, ranks, accuracy."""

from __future__ import annotations

import base64
import hashlib
import html
import re

import numpy as np
import pandas as pd
import pytest
import torch

import interpret
from interpret.audit import AuditResult, run_audit
from interpret.audit import tables as tables_mod
from interpret.audit.stats import head_sums
from interpret.audit.summary import summary_html
from interpret.models.default_model import CentroidHead
from interpret.plugins.attention_entropy import attention_entropy
from interpret.reading.datasets import Example
from interpret.reference import Encoder, EncoderClassifier, TransformerConfig
from interpret.reference.vocab import word_tokenizer

WORDS = "the cat sat on mat a dog saw good bad red blue".split()
XSS = "</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(WORDS)


@pytest.fixture(scope="module")
def model(tokenizer) -> EncoderClassifier:
    torch.manual_seed(0)
    config = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer), max_positions=32, n_classes=2
    )
    return EncoderClassifier(config).eval()


def make_examples(n: int, labelled: bool = True) -> list[Example]:
    """Return n deterministic examples of 1..6 words; every other one labelled when `labelled`."""
    out = []
    for i in range(n):
        words = [WORDS[(3 * i + 5 * j) % len(WORDS)] for j in range(1 + i % 6)]
        label = ("class 0" if i % 3 else "class 1") if labelled and i % 2 == 0 else None
        out.append(Example(row=i, text=" ".join(words), label=label))
    return out


@pytest.fixture(scope="module")
def audited(model, tokenizer, tmp_path_factory) -> tuple[AuditResult, pd.DataFrame, pd.DataFrame, list[Example]]:
    examples = make_examples(11)
    result = run_audit(model, tokenizer, examples, tmp_path_factory.mktemp("audit"), batch_size=4,
                       analyzers=["rollout", "flow", "attention_entropy", "integrated_gradients"])
    return result, pd.read_parquet(result.tokens), pd.read_parquet(result.examples), examples


def _documented(section: str) -> dict[str, str]:
    """Return column → dtype as the tables module docstring lists them under `section —`."""
    doc = tables_mod.__doc__ or ""
    block = doc.split(f"{section} —", 1)[1].split("\n\n", 1)[0]
    return dict(re.findall(r"^\s{4}(\w+)\s+(\w+)\s{2,}", block, flags=re.MULTILINE))


def test_documented_columns_and_dtypes_match_the_tables(audited) -> None:
    _, tokens, examples, _ = audited
    assert _documented("tokens") == tables_mod.TOKEN_DTYPES
    assert _documented("skipped") == tables_mod.SKIPPED_DTYPES
    documented = _documented("examples")
    per_analyzer = {key: value for key, value in documented.items() if key.startswith("NAME_")}
    assert {k: v for k, v in documented.items() if k not in per_analyzer} == tables_mod.EXAMPLE_DTYPES
    assert {k.removeprefix("NAME_"): v for k, v in per_analyzer.items()} == tables_mod.ANALYZER_DTYPES
    assert {c: str(t) for c, t in tokens.dtypes.items()} == tables_mod.TOKEN_DTYPES
    readouts = ["rollout", "flow", "integrated_gradients"]  # attention_entropy has no readout: heads.csv only
    assert {c: str(t) for c, t in examples.dtypes.items()} == tables_mod.example_dtypes(readouts)
    assert set(tokens["analyzer"]) == set(readouts)
    assert list(examples["row"]) == list(range(11))
    assert tokens[["row", "analyzer", "position"]].equals(
        tokens[["row", "analyzer", "position"]].sort_values(["row", "analyzer", "position"]).reset_index(drop=True)
    )


def test_csv_holds_the_same_rows(audited) -> None:
    result, tokens, examples, _ = audited
    assert all(path.is_file() and path.parent == result.out_dir for path in result.paths)
    assert {path.name for path in result.paths} == {
        "tokens.parquet", "tokens.csv", "examples.parquet", "examples.csv", "heads.csv", "summary.html", "manifest.json",
        "drivers.parquet", "drivers.csv", "counterfactuals.csv",  # drivers are checked by default (issue 27)
    }
    assert len(pd.read_csv(result.tokens_csv)) == len(tokens)
    assert list(pd.read_csv(result.examples_csv).columns) == list(examples.columns)


def test_scores_are_the_analyzers_readout_rows(audited, model, tokenizer) -> None:
    _, tokens, _, examples = audited
    batch = examples[4:8]  # the second batch, computed exactly as the audit did
    trace = interpret.collect(model, tokenizer, [e.text for e in batch], names=["*attn.hook_pattern"])
    flow = interpret.analyze(trace, "flow", model=model, tokenizer=tokenizer).readout
    for b, example in enumerate(batch):
        mine = tokens[(tokens["row"] == example.row) & (tokens["analyzer"] == "flow")]
        np.testing.assert_array_equal(mine["score"].to_numpy(), flow[b, mine["position"].to_numpy()])
        assert list(mine["token"]) == [trace.encoded.tokens[b][p] for p in mine["position"]]


def test_special_tokens_are_never_ranked(audited) -> None:
    _, tokens, examples, _ = audited
    special = tokens[tokens["is_special"]]
    assert set(special["token"]) == {"[CLS]", "[SEP]"}
    assert special["rank"].isna().all()
    for (row, analyzer), group in tokens.groupby(["row", "analyzer"]):
        ordinary = group[~group["is_special"]]
        assert sorted(ordinary["rank"].astype(int)) == list(range(1, len(ordinary) + 1))
        by_rank = ordinary.sort_values("rank")
        assert (np.diff(by_rank["score"].to_numpy()) <= 0).all()
        top = by_rank.iloc[0]
        line = examples[examples["row"] == row].iloc[0]
        assert line[f"{analyzer}_top_token"] == top["token"]
        assert line[f"{analyzer}_top_position"] == top["position"]
        assert line[f"{analyzer}_top_score"] == top["score"]
        share = group.loc[group["is_special"], "score"].sum() / group["score"].sum()
        assert line[f"{analyzer}_special_share"] == pytest.approx(share, rel=1e-12)


def test_rank_ties_go_to_the_earlier_position() -> None:
    scores = np.array([0.9, 0.2, 0.5, 0.2, 0.1, 0.3, 0.3, 0.7])
    special = np.array([True, False, False, False, True, False, False, True])
    batch = np.array([0, 0, 0, 0, 0, 1, 1, 1])  # two examples: ranks restart at 1 in each
    position = np.array([0, 1, 2, 3, 4, 0, 1, 2])
    ranks = tables_mod._ranks(batch, position, scores, special)
    assert ranks.tolist() == [0, 2, 1, 3, 0, 1, 2, 0]  # 0: null, a special token


def test_accuracy_on_labelled_examples(audited, model, tokenizer) -> None:
    result, _, examples_table, examples = audited
    encoded = interpret.encode(tokenizer, [e.text for e in examples])
    with torch.no_grad():
        predicted = [f"class {i}" for i in model.forward_encoded(encoded).argmax(-1).tolist()]
    labelled = [(e.label, p) for e, p in zip(examples, predicted) if e.label is not None]
    assert result.accuracy == pytest.approx(sum(label == p for label, p in labelled) / len(labelled))
    assert list(examples_table["prediction"]) == predicted
    assert examples_table["correct"].isna().sum() == len(examples) - len(labelled)
    assert examples_table["label"].isna().sum() == len(examples) - len(labelled)


def test_no_labels_means_no_accuracy(model, tokenizer, tmp_path) -> None:
    result = run_audit(
        model, tokenizer, make_examples(3, labelled=False), tmp_path, analyzers=["rollout"]
    )
    assert result.accuracy is None
    assert pd.read_parquet(result.examples)["correct"].isna().all()
    assert "no labels given" in result.summary.read_text("utf-8")


def test_entropy_known_answers() -> None:
    real = torch.tensor([[True, True, True, True, False]])
    pattern = torch.zeros(1, 1, 2, 5, 5, dtype=torch.float64)
    pattern[0, 0, 0, :4, :4] = 0.25  # uniform over the 4 real keys: log 4
    pattern[0, 0, 1, :4, 0] = 1.0  # all on one key: 0
    pattern[0, 0, :, 4, :] = 0.2  # a padded query row never counts
    np.testing.assert_allclose(attention_entropy(pattern, real)[0, 0].cpu().numpy(), [np.log(4), 0.0])


def test_head_statistics_against_a_plain_loop(model, tokenizer) -> None:
    texts = ["the cat sat on the mat", "a dog", "good bad red"]
    trace = interpret.collect(model, tokenizer, texts, names=["*attn.hook_pattern"])
    stats = head_sums([interpret.analyze(trace, "attention_entropy")])
    pattern = trace.stack("attn.hook_pattern").double()
    expected_entropy = torch.zeros(2, 4, dtype=torch.float64)
    expected_special = torch.zeros(2, 4, dtype=torch.float64)
    for b in range(len(texts)):
        real = trace.encoded.attention_mask[b].bool()
        special = trace.encoded.special[b][real]
        p = pattern[b][:, :, real][:, :, :, real]  # [layer, head, n, n]
        expected_entropy += torch.special.entr(p).sum(-1).mean(-1)
        expected_special += p[..., special].sum(-1).mean(-1)
    np.testing.assert_allclose(stats.sums["entropy"], expected_entropy.cpu().numpy(), rtol=1e-10)
    np.testing.assert_allclose(stats.sums["special_attention"], expected_special.cpu().numpy(), rtol=1e-10)
    assert stats.weights == {"entropy": 3.0, "special_attention": 3.0}


def test_heads_csv_and_summary_page(audited) -> None:
    result, _, _, _ = audited
    heads = pd.read_csv(result.heads)
    assert list(heads.columns) == ["layer", "head", "entropy", "special_attention"]
    assert len(heads) == 2 * 4
    page = result.summary.read_text("utf-8")
    for needed in ("Audit summary", "accuracy", "Attention entropy", "tokens most often ranked first", "rollout", "flow"):
        assert needed in page


def test_summary_escapes_labels_and_tokens_and_loads_nothing(tokenizer, tmp_path) -> None:
    # A label is a class name of the model (interpret.decision.labels), so the hostile label is a class of the head.
    torch.manual_seed(0)
    encoder = Encoder(TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer),
                                        max_positions=32, n_classes=2)).eval()
    head = CentroidHead(torch.randn(2, 32), (XSS, "other"))
    examples = [Example(row=i, text=f"the cat {XSS}", label=XSS) for i in range(2)]
    result = run_audit(encoder, tokenizer, examples, tmp_path, analyzers=["rollout"], head=head)
    tokens = pd.read_parquet(result.tokens)
    tokens["token"] = tokens["token"].where(tokens["rank"] != 1, XSS)  # as if the tokenizer had such a token
    heads = pd.read_csv(result.heads)
    examples_table = pd.read_parquet(result.examples)
    for page in (result.summary.read_text("utf-8"), summary_html(tokens, examples_table, heads, ["rollout"], 0.5, {})):
        assert "<img" not in page and "</script>" not in page and "<script" not in page
        assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
        assert not re.search(r"(src|href)\s*=\s*[\"']?\s*(https?:)?//", page, flags=re.IGNORECASE)
        assert " style=" not in page  # colours are classes, so the policy can pin the one style block by hash
        style = re.search(r"<style>(.*?)</style>", page, flags=re.DOTALL).group(1)
        digest = base64.b64encode(hashlib.sha256(style.encode("utf-8")).digest()).decode("ascii")
        policy = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1))
        assert f"style-src 'sha256-{digest}'" in policy and "default-src 'none'" in policy


def test_summary_of_tables_without_predictions() -> None:
    tokens = pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in tables_mod.TOKEN_DTYPES.items()})
    examples = pd.DataFrame(
        {name: pd.Series(dtype=dtype) for name, dtype in tables_mod.example_dtypes(["rollout"]).items()}
    )
    heads = pd.DataFrame({"layer": [0], "head": [0], "entropy": [1.0], "special_attention": [0.5]})
    page = summary_html(tokens, examples, heads, ["rollout"], None, {"model_id": "m"})
    assert "no token was ranked" in page
