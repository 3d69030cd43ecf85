"""Collecting from the reference Transformer: names, layers, heads, reduction, padding, budget, hooks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import interpret
from interpret.errors import HookNameError, InputError, MemoryBudgetError
from interpret.hooks import count_hooks
from interpret.reference import DecoderLM, EncoderClassifier, EncoderDecoder, TransformerConfig, from_torch
from interpret.reference.vocab import word_tokenizer

WORDS = "the cat sat on mat a dog saw ! marker red blue".split()


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(WORDS)


@pytest.fixture(scope="module")
def classifier(tokenizer) -> EncoderClassifier:
    torch.manual_seed(0)
    config = TransformerConfig(
        d_model=32, n_heads=4, n_layers=3, d_mlp=64, vocab_size=len(tokenizer), max_positions=32, n_classes=2
    )
    return EncoderClassifier(config).eval()


TEXTS = ["the cat sat on the mat", "a dog saw !"]


def test_default_collect_stacks_every_pattern(classifier, tokenizer) -> None:
    trace = interpret.collect(classifier, tokenizer, TEXTS)
    assert trace.names() == [f"blocks.{i}.attn.hook_pattern" for i in range(3)]
    pattern = trace.stack("attn.hook_pattern")
    batch, pos = trace.encoded.attention_mask.shape
    assert pattern.shape == (2, 3, 4, pos, pos)
    real = trace.encoded.attention_mask.bool()
    row_sums = pattern.sum(-1)  # [batch, layer, head, query]
    assert torch.allclose(row_sums[real[:, None, None, :].expand_as(row_sums)], torch.tensor(1.0), atol=1e-6)
    assert trace.meta.attention == "eager" and trace.meta.kind == "encoder"
    assert trace.meta.layers == (0, 1, 2)


def test_padding_is_masked_out_of_patterns(classifier, tokenizer) -> None:
    trace = interpret.collect(classifier, tokenizer, TEXTS)
    pattern = trace.stack("attn.hook_pattern")
    padded = trace.encoded.padding[1]
    assert padded.any()
    assert (pattern[1][..., padded, :] == 0).all()
    assert (pattern[1][..., :, padded] == 0).all()


def test_outputs_identical_with_and_without_capture(classifier, tokenizer) -> None:
    trace = interpret.collect(classifier, tokenizer, TEXTS, names="*")
    with torch.no_grad():
        plain = classifier.forward_encoded(trace.encoded)
    assert torch.equal(trace.output, plain)
    assert len(trace) == len(classifier.hook_points())


def test_every_activation_has_its_documented_shape(classifier, tokenizer) -> None:
    trace = interpret.collect(classifier, tokenizer, TEXTS, names="*")
    batch, pos = trace.encoded.attention_mask.shape
    sizes = {"batch": batch, "pos": pos, "query": pos, "key": pos, "head": 4, "d_head": 8, "d_model": 32, "d_mlp": 64}
    for name, point in classifier.hook_points().items():
        assert tuple(trace[name].shape) == tuple(sizes[axis] for axis in point.axes.split()), name


def test_no_hook_survives_a_run_or_an_error(classifier, tokenizer) -> None:
    before = count_hooks(classifier)
    interpret.collect(classifier, tokenizer, TEXTS, names="*")
    assert count_hooks(classifier) == before
    out_of_vocab = torch.tensor([[0, 1, 10_000]])
    with pytest.raises(IndexError):
        interpret.collect(classifier, None, out_of_vocab, names="*")
    assert count_hooks(classifier) == before


def test_layers_heads_and_reduce(classifier, tokenizer) -> None:
    full = interpret.collect(classifier, tokenizer, TEXTS).stack("attn.hook_pattern")
    picked = interpret.collect(classifier, tokenizer, TEXTS, layers=[0, -1], heads=[3, 1])
    assert picked.names() == ["blocks.0.attn.hook_pattern", "blocks.2.attn.hook_pattern"]
    assert torch.equal(picked.stack("attn.hook_pattern"), full[:, [0, 2]][:, :, [3, 1]])
    assert picked.meta.heads == (3, 1) and picked.meta.layers == (0, 2)
    mean = interpret.collect(classifier, tokenizer, TEXTS, reduce="mean").stack("attn.hook_pattern")
    assert mean.shape[2] == 1
    assert torch.allclose(mean, full.mean(2, keepdim=True), atol=1e-7)
    peak = interpret.collect(classifier, tokenizer, TEXTS, reduce="max").stack("attn.hook_pattern")
    assert torch.equal(peak, full.amax(2, keepdim=True))


def test_globs_select_names(classifier, tokenizer) -> None:
    trace = interpret.collect(classifier, tokenizer, TEXTS, names=["blocks.1.*", "hook_embed"])
    assert "hook_embed" in trace and "blocks.1.attn.hook_q" in trace
    assert not trace.names("blocks.0.*")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"names": ["blocks.*.attn.hook_patern"]}, "Did you mean"),
        ({"layers": [3]}, "layers 0..2"),
        ({"heads": [4]}, "heads 0..3"),
    ],
)
def test_unknown_name_layer_or_head_is_one_line(classifier, tokenizer, kwargs, fragment) -> None:
    with pytest.raises(HookNameError) as err:
        interpret.collect(classifier, tokenizer, TEXTS, **kwargs)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_trace_lookup_of_uncaptured_name(classifier, tokenizer) -> None:
    trace = interpret.collect(classifier, tokenizer, TEXTS)
    with pytest.raises(HookNameError, match="was not captured"):
        trace["blocks.0.attn.hook_q"]


def test_memory_budget_refuses_with_suggestions(classifier, tokenizer) -> None:
    with pytest.raises(MemoryBudgetError, match="reduce='mean'"):
        interpret.collect(classifier, tokenizer, TEXTS, names="*", budget_bytes=1024)


def test_too_long_text_names_the_limit(classifier, tokenizer) -> None:
    long_text = " ".join(["cat"] * 40)
    with pytest.raises(InputError, match="at most 32"):
        interpret.collect(classifier, tokenizer, long_text)
    trace = interpret.collect(classifier, tokenizer, long_text, max_length=32)
    assert trace.encoded.pos == 32 and trace.encoded.truncated == (True,)


def test_empty_text_is_refused(classifier, tokenizer) -> None:
    with pytest.raises(InputError, match="empty"):
        interpret.collect(classifier, tokenizer, "   ")


def test_decoder_lm_patterns_are_causal(tokenizer) -> None:
    config = TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer), max_positions=32)
    model = DecoderLM(config).eval()
    trace = interpret.collect(model, tokenizer, "the cat sat on the mat")
    pattern = trace.stack("attn.hook_pattern")
    upper = torch.ones(pattern.shape[-2:], dtype=torch.bool).triu(1)
    assert trace.meta.kind == "decoder"
    assert (pattern[..., upper] == 0).all()


def test_encoder_decoder_names_and_cross_attention(tokenizer) -> None:
    config = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, n_decoder_layers=2, d_mlp=64, vocab_size=len(tokenizer), max_positions=32
    )
    model = EncoderDecoder(config).eval()
    trace = interpret.collect(model, tokenizer, TEXTS, decoder_inputs=["a dog", "the red blue cat"])
    enc, dec = trace.encoded, trace.encoded.decoder
    assert dec is not None
    assert trace.stack("attn.hook_pattern", prefix="encoder.").shape == (2, 2, 4, enc.pos, enc.pos)
    assert trace.stack("attn.hook_pattern", prefix="decoder.").shape == (2, 2, 4, dec.pos, dec.pos)
    cross = trace.stack("cross_attn.hook_pattern", prefix="decoder.")
    assert cross.shape == (2, 2, 4, dec.pos, enc.pos)
    assert (cross[0][..., enc.padding[0]] == 0).all() and (cross[1][..., dec.padding[1], :] == 0).all()
    with pytest.raises(InputError, match="decoder inputs"):
        interpret.collect(model, tokenizer, TEXTS)


def test_embeddings_into_a_stack_converted_from_pytorch() -> None:
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    torch_encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    ours = from_torch(torch_encoder).eval()
    embeds = torch.randn(2, 5, 16)
    trace = interpret.collect(ours, None, embeds)
    assert trace.stack("attn.hook_pattern").shape == (2, 2, 2, 5, 5)
    with torch.no_grad():
        assert torch.allclose(trace.output, torch_encoder(embeds), atol=1e-5)
