"""DecompX (`decompx`): against a plain statement of the paper's equations (tests/decomp/decompx_statement.py),
adding up to the model's own logit on every family it covers and on the default model, contrastive targets,
the same readout alone and in a padded batch, and one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from decompx_statement import bert_classifier, language_model, mean_l2_head
from hf_tiny import DECODER_TEXTS, TEXTS, tiny_config, word_tokenizer

import interpret
from interpret.analysis.run import run_context
from interpret.decision.decide import TargetRequest, decide
from interpret.errors import AnalyzerError
from interpret.models.sentiment_head import SentimentHead
from interpret.plugins.decompx import DecompX

NAMES = list(DecompX.requires)
CLASSIFIERS = {
    "bert": "BertForSequenceClassification", "roberta": "RobertaForSequenceClassification",
    "distilbert": "DistilBertForSequenceClassification", "electra": "ElectraForSequenceClassification",
}
LANGUAGE_MODELS = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                   "mistral": "MistralForCausalLM"}
# transformers computes these families' RMSNorms (and, in the eager kernel, their softmax) in float32 whatever
# the model's dtype, so the model's own numbers are only float32-exact there: the decomposition, float64
# throughout, agrees with them within that rounding.
FLOAT32_INSIDE = ("llama", "qwen2", "mistral")


def _model(family: str, cls: str, implementation: str = "sdpa", labels: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    config = tiny_config(family)
    config._attn_implementation = implementation
    config.num_labels = labels
    if family == "gpt2":
        config.pad_token_id = 0
    model = getattr(transformers, cls)(config).double().eval()
    with torch.no_grad():  # random biases and norm weights (the initialisation's zeros would split nothing), and
        for parameter in model.parameters():  # weights five times the initial scale, so attention is not uniform
            parameter.add_(0.2 * torch.randn_like(parameter)) if parameter.dim() == 1 else parameter.mul_(5.0)
    return model


def _decompx(model: torch.nn.Module, texts: list[str], head: torch.nn.Module | None = None, tokenizer=None, **request):
    tokenizer = tokenizer or word_tokenizer()
    trace = interpret.collect(model, tokenizer, texts, names=NAMES)
    targets = [d.target for d in decide(model, trace, tokenizer, TargetRequest(**request), head)]
    return interpret.analyze(trace, "decompx", model=model, tokenizer=tokenizer, head=head, targets=targets), trace, targets


def _real_scores(model: torch.nn.Module, trace, targets, head: torch.nn.Module | None = None) -> np.ndarray:
    """Return each example's target logit (minus the contrast's) from a fresh forward pass of the model."""
    encoded = trace.encoded
    with torch.no_grad():
        out = model(input_ids=encoded.input_ids, attention_mask=encoded.attention_mask)
        logits = head(out.last_hidden_state, encoded.attention_mask) if head is not None else out.logits
    scores = []
    for b, target in enumerate(targets):
        row = logits[b] if logits.dim() == 2 else logits[b, target.positions[0]]
        scores.append(float(row[target.ids[0]] - (row[target.contrast[0]] if target.contrast else 0.0)))
    return np.array(scores)


def _random_head(d_model: int) -> SentimentHead:
    torch.manual_seed(1)
    return SentimentHead(torch.randn(2, d_model), torch.randn(2)).double()


def test_bert_classifier_matches_the_statement() -> None:
    model = _model("bert", "BertForSequenceClassification", "eager")
    result, trace, targets = _decompx(model, TEXTS)
    for b, target in enumerate(targets):
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().cpu().numpy()
        want = bert_classifier(model, trace, b, target.ids[0]).cpu().numpy()
        np.testing.assert_allclose(result["readout"][b, real], want, rtol=1e-9, atol=1e-12 * np.abs(want).max())
        assert np.all(np.delete(result["readout"][b], real) == 0.0)


def test_default_head_matches_the_statement() -> None:
    model = _model("bert", "BertModel", "eager")
    head = _random_head(model.config.hidden_size)
    result, trace, targets = _decompx(model, TEXTS, head=head)
    for b, target in enumerate(targets):
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().cpu().numpy()
        want = mean_l2_head(model, trace, b, head, target.ids[0]).cpu().numpy()
        np.testing.assert_allclose(result["readout"][b, real], want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_language_model_matches_the_statement(family: str) -> None:
    model = _model(family, LANGUAGE_MODELS[family], "eager")
    result, trace, targets = _decompx(model, DECODER_TEXTS)
    for b, target in enumerate(targets):
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().cpu().numpy()
        want = language_model(model, trace, b, target.ids[0]).cpu().numpy()
        # float64 throughout: each share to 1e-9 of itself. Float32 inside: a rounding of the model's own float32
        # numbers is a few units of 6e-8 of the largest share, not of each one (a GPU's float32 kernels round
        # differently from the CPU's: 1.6e-8 of the largest share seen on an H200 at a share 100× smaller).
        tolerance = 1e-6 if family in FLOAT32_INSIDE else 1e-9
        floor = (1.0 if family in FLOAT32_INSIDE else 1e-3) * tolerance * np.abs(want).max()
        np.testing.assert_allclose(result["readout"][b, real], want, rtol=tolerance, atol=floor)


@pytest.mark.parametrize("family", [*CLASSIFIERS, *LANGUAGE_MODELS, "gpt2-classifier"])
def test_adds_up_to_the_model_on_every_family(family: str) -> None:
    if family == "gpt2-classifier":
        model, texts = _model("gpt2", "GPT2ForSequenceClassification"), DECODER_TEXTS
    elif family in CLASSIFIERS:
        model, texts = _model(family, CLASSIFIERS[family]), TEXTS
    else:
        model, texts = _model(family, LANGUAGE_MODELS[family]), DECODER_TEXTS
    result, trace, targets = _decompx(model, texts)
    want = _real_scores(model, trace, targets)
    tolerance = 1e-6 if family in FLOAT32_INSIDE else 1e-10
    np.testing.assert_allclose(result["readout"].sum(-1), want, rtol=tolerance, atol=tolerance * np.abs(want).max())
    assert result.checks["embedding_error"].value < tolerance
    assert result.checks["decomposition_error"].value < tolerance
    assert result.checks["linearisation_error"].value < 1e-12


def test_a_continuation_adds_up_over_its_steps() -> None:
    model, tokenizer = _model("gpt2", "GPT2LMHeadModel"), word_tokenizer()
    trace = interpret.collect(model, tokenizer, ["the cat sat"], names=NAMES, continuations=["on the mat"])
    target = decide(model, trace, tokenizer, TargetRequest())[0].target
    result = interpret.analyze(trace, "decompx", model=model, tokenizer=tokenizer, targets=[target])
    with torch.no_grad():
        logits = model(input_ids=trace.encoded.input_ids, attention_mask=trace.encoded.attention_mask).logits[0]
    want = float(sum(logits[position, token] for position, token in zip(target.positions, target.ids)))
    assert len(target.ids) == 3 and abs(result["readout"].sum() - want) <= 1e-10 * abs(want)


@pytest.fixture(scope="module")
def minilm():
    from interpret.models.default_model import load_default

    model, tokenizer, head = load_default("cpu")
    return model.double(), tokenizer, head.double()


def test_adds_up_on_the_default_model(minilm) -> None:
    model, tokenizer, head = minilm
    texts = ["The staff were friendly and the room was spotless.", "Cold food, rude waiter."]
    result, trace, targets = _decompx(model, texts, head=head, tokenizer=tokenizer)
    want = _real_scores(model, trace, targets, head)
    np.testing.assert_allclose(result["readout"].sum(-1), want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
    assert result.checks["embedding_error"].value < 1e-10  # the L2-normalised sentence embedding
    np.testing.assert_allclose(result["score"], want, rtol=1e-12)


def test_contrast_is_the_logit_difference(minilm) -> None:
    model, tokenizer, head = minilm
    texts = ["The staff were friendly but the room was dirty."]
    positive, trace, _ = _decompx(model, texts, head=head, tokenizer=tokenizer, target="positive")
    negative, _, _ = _decompx(model, texts, head=head, tokenizer=tokenizer, target="negative")
    versus, _, targets = _decompx(model, texts, head=head, tokenizer=tokenizer, target="positive", contrast="negative")
    np.testing.assert_allclose(versus["readout"], positive["readout"] - negative["readout"], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(versus["readout"].sum(-1), _real_scores(model, trace, targets, head), rtol=1e-10)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_an_example_reads_the_same_alone_and_in_a_padded_batch(family: str) -> None:
    model = _model(family, CLASSIFIERS.get(family, LANGUAGE_MODELS.get(family, "")))
    texts = TEXTS if family == "bert" else DECODER_TEXTS
    batch, trace, _ = _decompx(model, [*texts, "the cat sat on the mat ! a dog saw the red blue mat"])
    for b, text in enumerate(texts):
        alone, alone_trace, _ = _decompx(model, [text])
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().cpu().numpy()
        np.testing.assert_allclose(batch["readout"][b, real], alone["readout"][0], rtol=1e-10, atol=1e-14)


def test_refuses_heads_and_kinds_it_does_not_decompose() -> None:
    tokenizer = word_tokenizer()
    with pytest.raises(AnalyzerError, match="decomposes sequence-classification heads") as raised:
        _decompx(_model("bert", "BertForMaskedLM"), TEXTS)
    assert "\n" not in str(raised.value)
    bart = _model("bart", "BartForConditionalGeneration")
    trace = interpret.collect(bart, tokenizer, TEXTS, names=["*attn.hook_pattern"], decoder_inputs=TEXTS)
    with pytest.raises(AnalyzerError, match="decomposes text encoders and decoders; this is a encoder-decoder model"):
        DecompX().run(trace, DecompX.Params(), run_context(trace, bart, tokenizer))


@pytest.mark.parametrize("family", ["bert-default-head", "gpt2"])
def test_a_batch_of_mixed_lengths_reads_each_example_as_alone(family: str, monkeypatch) -> None:
    """Decomposed together (one pass over the chunk, padding masked), each example's shares equal its shares
    alone to float64 rounding and add up to its own logit, shorter and longer examples alike."""
    from interpret.plugins import decompx

    if family == "gpt2":
        model, head, texts = _model("gpt2", "GPT2LMHeadModel"), None, [*DECODER_TEXTS, "the cat"]
    else:
        model = _model("bert", "BertModel")
        head, texts = _random_head(model.config.hidden_size), ["a dog", *TEXTS, "the cat sat on the mat ! a dog saw the red blue mat"]
    calls, body = [], decompx._body
    monkeypatch.setattr(decompx, "_body", lambda *args: calls.append(args[2]) or body(*args))  # a spy
    batch, trace, targets = _decompx(model, texts, head=head)
    assert len(calls) == 1 and sorted(calls[0].examples.tolist()) == list(range(len(texts)))  # one pass for the whole batch
    np.testing.assert_allclose(batch["readout"].sum(-1), _real_scores(model, trace, targets, head), rtol=1e-10)
    for b, text in enumerate(texts):
        alone, _, _ = _decompx(model, [text], head=head)
        real = torch.nonzero(trace.encoded.attention_mask[b]).flatten().cpu().numpy()
        np.testing.assert_allclose(batch["readout"][b, real], alone["readout"][0], rtol=1e-12, atol=1e-14 * np.abs(alone["readout"]).max())
        assert np.all(np.delete(batch["readout"][b], real) == 0.0)
    monkeypatch.setattr(decompx, "CHUNK_BYTES", 1)  # one example per chunk, longest first: the same shares
    calls.clear()
    chunked, _, _ = _decompx(model, texts, head=head)
    assert [len(chunk.examples) for chunk in calls] == [1] * len(texts)
    np.testing.assert_allclose(chunked["readout"], batch["readout"], rtol=1e-12, atol=1e-14 * np.abs(batch["readout"]).max())


def test_the_model_is_identified_once_while_its_weights_stay(monkeypatch) -> None:
    """The modules are identified on the first call and reused; a weight changed in place, or a parameter
    replaced, makes the next call identify them again (so it decomposes the model as it now is); the cache
    goes with the model."""
    import gc

    from interpret.plugins import decompx

    model = _model("bert", "BertForSequenceClassification")
    identified, blocks = [], decompx._blocks
    monkeypatch.setattr(decompx, "_blocks", lambda *args: identified.append(1) or blocks(*args))  # a spy
    _decompx(model, TEXTS)
    _decompx(model, TEXTS[:1])
    assert len(identified) == 1
    with torch.no_grad():
        model.bert.encoder.layer[0].intermediate.dense.weight.mul_(1.5)
    result, trace, targets = _decompx(model, TEXTS)
    assert len(identified) == 2
    np.testing.assert_allclose(result["readout"].sum(-1), _real_scores(model, trace, targets), rtol=1e-10)
    layer = model.bert.encoder.layer[1].attention.self.value
    layer.weight = torch.nn.Parameter(layer.weight.detach() * 0.5)
    result, trace, targets = _decompx(model, TEXTS)
    assert len(identified) == 3
    np.testing.assert_allclose(result["readout"].sum(-1), _real_scores(model, trace, targets), rtol=1e-10)
    held = len(decompx._IDENTIFIED)
    del model, result, trace
    gc.collect()
    assert len(decompx._IDENTIFIED) == held - 1
