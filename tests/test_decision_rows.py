"""The rows each decision reads are held against the model once (`interpret.analysis.decision_rows`).

A model whose head reads other positions than the ones interpret's pooling names is refused in one line before
any analyzer starts from the wrong rows; a model whose head reads what the pooling names passes, and is checked
once per model object (one gradient pass, not one per batch or analyzer).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers as T
from hf_tiny import TEXTS, pixel_values, tiny_model, word_tokenizer

import interpret
from interpret.analysis.run import run_context
from interpret.errors import AnalyzerError


class _MeanPooledViT(T.ViTForImageClassification):
    """A ViT classifier whose head reads the mean of every position: a class no pooling rule knows."""

    def forward(self, pixel_values: torch.Tensor | None = None, **kwargs: Any) -> Any:
        hidden = self.vit(pixel_values, **kwargs).last_hidden_state
        return T.modeling_outputs.ImageClassifierOutput(logits=self.classifier(hidden.mean(1)))


def _forwards(model: torch.nn.Module) -> list[int]:
    """Count the model's forward passes from now on (the returned list's length)."""
    calls: list[int] = []
    model.register_forward_hook(lambda *args: calls.append(1))
    return calls


def test_a_head_that_reads_other_rows_is_refused_in_one_line() -> None:
    model = _MeanPooledViT(tiny_model("vit").config).eval()
    trace = interpret.collect(model, None, pixel_values(2))
    with pytest.raises(AnalyzerError, match=r"reads positions \[0 … 16\] \(17\) of its last block, but interpret"
                                            r" reads it at \[0\]") as caught:
        interpret.analyze(trace, "rollout", model=model)
    assert "\n" not in str(caught.value)
    with pytest.raises(AnalyzerError, match="rows the decision never reads"):
        interpret.explain(model, None, pixel_values(2), analyzers=["rollout"])
    interpret.analyze(trace, "rollout")  # without the model nothing claims what the decision reads


def test_a_model_is_checked_once() -> None:
    model = tiny_model("bert").eval()
    tokenizer = word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS)
    calls = _forwards(model)
    run_context(trace, model, tokenizer)
    assert len(calls) == 1  # the check's one gradient pass
    run_context(trace, model, tokenizer)
    interpret.analyze(trace, "rollout", model=model, tokenizer=tokenizer)
    assert len(calls) == 1


def test_a_decoder_classifier_is_read_where_it_reads_its_last_token() -> None:
    """GPT-2's classifier reads the last position whose id is not its pad id: a left-padded batch passes."""
    tokenizer = word_tokenizer()
    tokenizer.padding_side = "left"
    config = T.GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=64, num_labels=3,
                          pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = T.GPT2ForSequenceClassification(config).eval()
    trace = interpret.collect(model, tokenizer, TEXTS)
    assert trace.encoded.attention_mask[1, 0] == 0
    readout = interpret.analyze(trace, "rollout", model=model, tokenizer=tokenizer)["readout"]
    assert readout.shape == (2, trace.encoded.pos)


def test_a_decoder_classifier_whose_pad_id_ends_the_text_reads_the_token_before_it() -> None:
    """GPT-2's classifier finds its last token as the rightmost id that is not `config.pad_token_id`: with the pad
    id set to [SEP], which ends every text, it reads the token before [SEP], and so does the decision."""
    tokenizer = word_tokenizer()
    sep = tokenizer.sep_token_id
    config = T.GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=64, num_labels=3,
                          pad_token_id=sep)
    torch.manual_seed(0)
    model = T.GPT2ForSequenceClassification(config).eval()
    trace = interpret.collect(model, tokenizer, TEXTS[:1])
    assert int(trace.encoded.input_ids[0, -1]) == sep
    context = run_context(trace, model, tokenizer)  # the check passes: the head reads what the pooling names
    assert context.targets[0].pooling == ((trace.encoded.pos - 2, 1.0),)
