"""Models and plain forward functions for the gradient analyzers' tests: tiny random BERT and GPT-2 built from
configs, and MiniLM with the default sentiment head. Each case's `forward(ids, mask, target)` scores the
model directly (no interpret code in between), so Captum called on it is an independent reference."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Callable

import torch
import transformers
from hf_tiny import TEXTS, tiny_config, tiny_model, word_tokenizer

import interpret

SENTENCES = ["A calm, honest and moving film.", "The soup was cold and the service slow."]


@dataclass
class Case:
    """A model, its tokenizer and head, texts, and a plain score function forward(ids, mask, target) -> [rows]."""

    model: Any
    tokenizer: Any
    texts: list[str]
    forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    head: Any = None
    decoder: bool = False

    def trace(self, texts: list[str] | None = None) -> Any:
        return interpret.collect(self.model, self.tokenizer, texts or self.texts)

    def analyze(self, trace: Any, name: str, **params: Any) -> Any:
        return interpret.analyze(trace, name, model=self.model, tokenizer=self.tokenizer, head=self.head, params=params)

    def targets(self, trace: Any) -> torch.Tensor:
        """Each example's predicted class (or next token), read from the model's own output."""
        with torch.no_grad():
            ids, mask = trace.encoded.input_ids, trace.encoded.attention_mask
            if self.decoder:
                last = mask.sum(1) - 1
                return self.model(input_ids=ids, attention_mask=mask).logits[torch.arange(len(ids)), last].argmax(-1)
            if self.head is not None:
                return self.head(self.model(input_ids=ids, attention_mask=mask).last_hidden_state, mask).argmax(-1)
            return self.model(input_ids=ids, attention_mask=mask).logits.argmax(-1)


def _classifier_forward(model: Any) -> Callable:
    def forward(ids: torch.Tensor, mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=ids, attention_mask=mask).logits
        return logits[torch.arange(len(ids)), target]

    return forward


def _decoder_forward(model: Any) -> Callable:
    def forward(ids: torch.Tensor, mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=ids, attention_mask=mask).logits
        last = mask.sum(1) - 1
        return logits[torch.arange(len(ids)), last, target]

    return forward


def _head_forward(model: Any, head: Any) -> Callable:
    def forward(ids: torch.Tensor, mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return head(model(input_ids=ids, attention_mask=mask).last_hidden_state, mask)[torch.arange(len(ids)), target]

    return forward


def tiny_bert(implementation: str = "sdpa") -> Case:
    """A tiny random BERT sequence classifier (two classes)."""
    torch.manual_seed(0)
    config = tiny_config("bert")
    config._attn_implementation = implementation
    model = transformers.BertForSequenceClassification(config).eval().double()
    return Case(model, word_tokenizer(), list(TEXTS), _classifier_forward(model))


def tiny_gpt2(implementation: str = "sdpa") -> Case:
    model = tiny_model("gpt2", implementation).double()
    return Case(model, word_tokenizer(), list(TEXTS), _decoder_forward(model), decoder=True)


@cache
def _default() -> tuple[Any, Any, Any]:
    from interpret.models.default_model import load_default

    model, tokenizer, head = load_default("cpu")
    return model.double(), tokenizer, head.double()


def minilm() -> Case:
    model, tokenizer, head = _default()
    return Case(model, tokenizer, list(SENTENCES), _head_forward(model, head), head=head)


CASES = {"bert": tiny_bert, "gpt2": tiny_gpt2, "minilm": minilm}


def baseline_ids(trace: Any, fill: int) -> torch.Tensor:
    """The pad baseline written out plainly: real, non-special positions get `fill`, the rest keep their id."""
    ids = trace.encoded.input_ids
    attributed = trace.encoded.attention_mask.bool() & ~trace.encoded.special.bool()
    return torch.where(attributed, torch.full_like(ids, fill), ids)
