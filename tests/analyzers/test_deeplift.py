"""`deeplift`: Captum's DeepLIFT returned where it sums to F(x) − F(baseline) (summation-to-delta), and refused in
one line where it does not: on every transformer family, whose functional GELU, norms, softmax and attention
products Captum's rules do not reach. The positive path runs on a toy token model made of the modules Captum
covers, through a plain runner (the analyzer needs only the score, the embedding layer and the targets)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from captum.attr import LayerDeepLift
from hf_tiny import DECODER_TEXTS, TEXTS, tiny_config, word_tokenizer
from torch import nn

import interpret
from interpret.analysis import RunContext
from interpret.analysis.runner import Forward
from interpret.errors import AnalyzerError
from interpret.inputs import encode
from interpret.target import Target
from interpret.trace import Trace, TraceMeta


class Toy(nn.Module):
    """Embedding, Linear, `act`, Linear, Tanh, summed over real positions: a score per example [rows]."""

    def __init__(self, vocab: int, act: nn.Module) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, 8)
        self.first, self.act, self.second, self.squash = nn.Linear(8, 16), act, nn.Linear(16, 1), nn.Tanh()

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (self.squash(self.second(self.act(self.first(self.embed(ids)))))[..., 0] * mask).sum(-1)


class PlainRunner:
    """What RunContext asks of a runner, for the toy: each row's score, the embedding layer and its output."""

    def __init__(self, model: Toy, encoded) -> None:
        self.model, self.encoded = model, encoded

    def score(self, encoded, forward=Forward()) -> torch.Tensor:
        rows = forward.examples if forward.examples is not None else torch.arange(encoded.batch)
        mask = encoded.attention_mask[rows].double()
        hidden = self.model.embed(forward.input_ids) if forward.inputs_embeds is None else forward.inputs_embeds
        m = self.model
        return (m.squash(m.second(m.act(m.first(hidden))))[..., 0] * mask).sum(-1)

    def embedding_layer(self, side="main") -> nn.Module:
        return self.model.embed

    def embeddings(self, encoded, *, input_ids=None, examples=None) -> torch.Tensor:
        return self.model.embed(input_ids if input_ids is not None else encoded.input_ids)


def _toy_run(act: nn.Module, baseline: str = "pad"):
    tokenizer = word_tokenizer()
    encoded = encode(tokenizer, TEXTS)
    model = Toy(len(tokenizer), act).double().eval()
    meta = TraceMeta(model_id="toy", kind="encoder", n_layers=0, n_heads=0)
    trace = Trace(tensors={}, encoded=encoded, meta=meta)
    targets = tuple(Target("class", ids=(0,), pooling=((0, 1.0),)) for _ in TEXTS)
    ctx = RunContext(targets=targets, model=model, tokenizer=tokenizer, runner=PlainRunner(model, encoded))  # type: ignore[arg-type]
    return interpret.analyze(trace, "deeplift", params={"baseline": baseline}, context=ctx), model, encoded, tokenizer


@pytest.mark.parametrize("baseline", ["pad", "zero"])
def test_returns_deeplift_where_captum_covers_every_nonlinearity(baseline: str) -> None:
    result, model, encoded, tokenizer = _toy_run(nn.ReLU(), baseline)
    runner = PlainRunner(model, encoded)
    assert result.checks["summation_to_delta"].value < 1e-9
    np.testing.assert_allclose(result["readout"].sum(-1), result["gap"], rtol=1e-9)
    if baseline == "pad":  # the analyzer's numbers are Captum's LayerDeepLift on the embedding layer, called directly
        special = encoded.special.bool()
        baseline_ids = torch.where(special, encoded.input_ids, torch.full_like(encoded.input_ids, tokenizer.pad_token_id))

        class Scored(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, ids, rows):
                return runner.score(encoded, Forward(input_ids=ids, examples=rows))

        attr = LayerDeepLift(Scored(), model.embed).attribute(
            encoded.input_ids, baselines=baseline_ids, additional_forward_args=(torch.arange(2),))
        np.testing.assert_allclose(result["readout"], attr.detach().sum(-1).cpu().numpy() * ~special.cpu().numpy(), rtol=1e-12, atol=1e-15)


def test_refuses_the_gradient_fallback_of_an_uncovered_nonlinearity() -> None:
    with pytest.raises(AnalyzerError, match="does not add up") as raised:
        _toy_run(nn.GELU())  # not among Captum's rules: plain gradients there
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(("family", "cls", "texts"), [
    ("bert", "BertForSequenceClassification", TEXTS),
    ("distilbert", "DistilBertForSequenceClassification", TEXTS),
    ("gpt2", "GPT2LMHeadModel", DECODER_TEXTS),
    ("llama", "LlamaForCausalLM", DECODER_TEXTS),
])
def test_refuses_every_transformer_family_in_one_line(family: str, cls: str, texts: list[str]) -> None:
    torch.manual_seed(0)
    config = tiny_config(family)
    config.num_labels = 2
    model = getattr(transformers, cls)(config).double().eval()
    with torch.no_grad():  # weights at five times the initial scale, so the model is far from linear
        for parameter in model.parameters():
            parameter.mul_(5.0) if parameter.dim() > 1 else None
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, texts, names=["*attn.hook_pattern"])
    with pytest.raises(AnalyzerError, match=f"on {cls} Captum's DeepLIFT does not add up") as raised:
        interpret.analyze(trace, "deeplift", model=model, tokenizer=tokenizer)
    assert "\n" not in str(raised.value) and "integrated_gradients" in str(raised.value)


def test_refuses_the_default_model() -> None:
    from interpret.models.default_model import load_default

    model, tokenizer, head = load_default("cpu")
    trace = interpret.collect(model, tokenizer, ["The soup was cold and the waiter rude."], names=["*attn.hook_pattern"])
    with pytest.raises(AnalyzerError, match="on BertModel Captum's DeepLIFT does not add up"):
        interpret.analyze(trace, "deeplift", model=model, tokenizer=tokenizer, head=head)
