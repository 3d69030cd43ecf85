"""Reference models: exact hook names, shapes, causality, padding, input errors, and capture by `collect`."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import interpret
from interpret.errors import ConfigError, InputError
from interpret.hooks import count_hooks, hook_session
from interpret.inputs import from_embeds
from interpret.reference import (
    Decoder,
    DecoderLM,
    Encoder,
    EncoderClassifier,
    EncoderDecoder,
    TransformerConfig,
    word_tokenizer,
)

BLOCK = [
    "hook_resid_pre",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_attn_scores",
    "attn.hook_pattern",
    "attn.hook_lse",
    "attn.hook_z",
    "hook_attn_out",
    "hook_resid_mid",
    "mlp.hook_pre",
    "mlp.hook_post",
    "hook_mlp_out",
    "hook_resid_post",
]
CROSS = [
    "cross_attn.hook_q",
    "cross_attn.hook_k",
    "cross_attn.hook_v",
    "cross_attn.hook_attn_scores",
    "cross_attn.hook_pattern",
    "cross_attn.hook_lse",
    "cross_attn.hook_z",
    "hook_cross_attn_out",
    "hook_resid_mid2",
]
DECODER_BLOCK = BLOCK[:10] + CROSS + BLOCK[10:]
WORDS = "the cat sat on a mat dog ran".split()


def config(**overrides: object) -> TransformerConfig:
    values: dict[str, object] = {
        "d_model": 16,
        "n_heads": 4,
        "n_layers": 2,
        "vocab_size": 13,
        "max_positions": 16,
    }
    values.update(overrides)
    return TransformerConfig(**values)  # type: ignore[arg-type]


def blocks(prefix: str, n: int, names: list[str]) -> list[str]:
    return [f"{prefix}blocks.{i}.{name}" for i in range(n) for name in names]


def test_encoder_hook_names() -> None:
    assert list(Encoder(config()).hook_points()) == ["hook_embed", "hook_pos_embed", *blocks("", 2, BLOCK)]
    assert list(Encoder(config(positions="none")).hook_points()) == ["hook_embed", *blocks("", 2, BLOCK)]


def test_classifier_and_lm_hook_names() -> None:
    classifier = EncoderClassifier(config())
    assert list(classifier.hook_points()) == [
        "hook_embed",
        "hook_pos_embed",
        *blocks("", 2, BLOCK),
        "hook_pooled",
    ]
    assert list(DecoderLM(config()).hook_points()) == ["hook_embed", "hook_pos_embed", *blocks("", 2, BLOCK)]


def test_encoder_decoder_hook_names() -> None:
    model = EncoderDecoder(config(n_decoder_layers=1))
    assert list(model.hook_points()) == [
        "encoder.hook_embed",
        "encoder.hook_pos_embed",
        *blocks("encoder.", 2, BLOCK),
        "decoder.hook_embed",
        "decoder.hook_pos_embed",
        *blocks("decoder.", 1, DECODER_BLOCK),
    ]
    assert model.n_layers == 2 and model.kind == "encoder-decoder"
    assert list(Decoder(config(vocab_size=None, positions="none")).hook_points()) == [
        "decoder.hook_embed",
        *blocks("decoder.", 2, DECODER_BLOCK),
    ]


def test_kinds_and_layer_counts() -> None:
    assert (Encoder.kind, EncoderClassifier.kind, DecoderLM.kind, Decoder.kind, EncoderDecoder.kind) == (
        "encoder",
        "encoder",
        "decoder",
        "encoder-decoder",
        "encoder-decoder",
    )
    assert Encoder(config(n_layers=3)).n_layers == 3
    assert Decoder(config(n_decoder_layers=4)).n_layers == 4


def test_output_shapes() -> None:
    ids = torch.randint(0, 13, (2, 5))
    assert Encoder(config())(ids).shape == (2, 5, 16)
    assert EncoderClassifier(config(n_classes=3))(ids).shape == (2, 3)
    assert DecoderLM(config())(ids).shape == (2, 5, 13)
    model = EncoderDecoder(config())
    assert model(ids, decoder_input_ids=torch.randint(0, 13, (2, 4))).shape == (2, 4, 13)
    hidden = EncoderDecoder(config(vocab_size=None))
    assert hidden(inputs_embeds=torch.randn(2, 5, 16), decoder_inputs_embeds=torch.randn(2, 3, 16)).shape == (
        2,
        3,
        16,
    )


def test_decoder_lm_is_causal() -> None:
    model = DecoderLM(config()).eval()
    ids = torch.randint(0, 13, (1, 6))
    changed = ids.clone()
    changed[0, 4] = (ids[0, 4] + 1) % 13
    before, after = model(ids), model(changed)
    torch.testing.assert_close(before[:, :4], after[:, :4], atol=1e-6, rtol=0)
    assert not torch.allclose(before[:, 4:], after[:, 4:])


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_classifier_ignores_padding(pooling: str) -> None:
    model = EncoderClassifier(config(pooling=pooling)).eval()
    ids = torch.tensor([[2, 5, 6, 3]])
    padded = torch.tensor([[2, 5, 6, 3, 0, 0]])
    torch.testing.assert_close(
        model(ids), model(padded, torch.tensor([[1, 1, 1, 1, 0, 0]])), atol=1e-6, rtol=0
    )


def test_input_errors() -> None:
    with pytest.raises(InputError, match="no embedding layer"):
        Encoder(config(vocab_size=None))(torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(InputError, match="exactly one of"):
        Encoder(config())(torch.zeros(1, 3, dtype=torch.long), inputs_embeds=torch.zeros(1, 3, 16))
    with pytest.raises(InputError, match="needs decoder inputs"):
        EncoderDecoder(config()).forward_encoded(
            interpret.inputs.from_ids(torch.zeros(1, 3, dtype=torch.long))
        )
    with pytest.raises(ConfigError, match="vocab_size"):
        DecoderLM(config(vocab_size=None))


def test_replacing_a_hook_output_changes_the_model_output() -> None:
    model = EncoderClassifier(config()).eval()
    ids = torch.randint(0, 13, (2, 5))
    plain = model(ids)
    with hook_session() as session:
        session.add(model.blocks[1].hook_attn_out, lambda mod, args, out: out)
        torch.testing.assert_close(model(ids), plain, atol=0, rtol=0)
        session.add(model.blocks[1].hook_attn_out, lambda mod, args, out: torch.zeros_like(out))
        ablated = model(ids)
    assert count_hooks(model) == 0
    assert not torch.allclose(ablated, plain)


def test_collect_encoder_classifier() -> None:
    tokenizer = word_tokenizer(WORDS, model_max_length=16)
    model = EncoderClassifier(config(vocab_size=len(tokenizer))).eval()
    trace = interpret.collect(model, tokenizer, ["the cat sat on the mat", "a dog"], names=["*"])
    assert trace.meta.kind == "encoder" and trace.meta.n_layers == 2
    assert trace["blocks.1.attn.hook_pattern"].shape == (2, 4, 8, 8)
    assert trace["blocks.0.mlp.hook_post"].shape == (2, 8, 64)
    assert trace["hook_pooled"].shape == (2, 16)
    assert trace.stack("attn.hook_pattern").shape == (2, 2, 4, 8, 8)
    torch.testing.assert_close(trace.output, model(trace.encoded.input_ids, trace.encoded.attention_mask))
    assert count_hooks(model) == 0


def test_collect_encoder_decoder_cross_attention() -> None:
    tokenizer = word_tokenizer(WORDS, model_max_length=16)
    model = EncoderDecoder(config(vocab_size=len(tokenizer), n_decoder_layers=1)).eval()
    trace = interpret.collect(
        model,
        tokenizer,
        ["the cat sat on the mat", "a dog"],
        decoder_inputs=["a cat", "the dog ran"],
        names=["*hook_pattern", "decoder.blocks.0.cross_attn.hook_k"],
    )
    cross = trace["decoder.blocks.0.cross_attn.hook_pattern"]
    assert cross.shape == (2, 4, 5, 8)  # [batch, head, query = decoder pos, key = encoder pos]
    assert (cross[1, :, :, 4:] == 0).all()  # padded encoder positions get no attention
    assert trace["decoder.blocks.0.attn.hook_pattern"].shape == (2, 4, 5, 5)
    assert trace["decoder.blocks.0.cross_attn.hook_k"].shape == (2, 8, 4, 4)


def test_collect_converted_decoder_reads_memory_from_the_main_side() -> None:
    model = Decoder(config(vocab_size=None, positions="none")).eval()
    memory, target = torch.randn(2, 7, 16), torch.randn(2, 3, 16)
    trace = interpret.collect(model, None, memory, decoder_inputs=target, names=["*pattern"])
    assert trace["decoder.blocks.1.cross_attn.hook_pattern"].shape == (2, 4, 3, 7)
    expected = model(inputs_embeds=target, memory=memory)
    torch.testing.assert_close(trace.output, expected)
    with pytest.raises(InputError, match="memory"):
        model.forward_encoded(from_embeds(memory))


def _rows_sum_to_one(pattern: Tensor) -> None:
    torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]), atol=1e-6, rtol=0)


def test_windowed_causal_lm_patterns() -> None:
    model = DecoderLM(config(window=1)).eval()
    trace = interpret.collect(model, None, torch.randint(0, 13, (1, 6)), names=["blocks.0.attn.hook_pattern"])
    pattern = trace["blocks.0.attn.hook_pattern"][0]
    _rows_sum_to_one(pattern)
    query, key = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
    outside = (key > query) | (key < query - 1)
    assert (pattern[:, outside] == 0).all() and (pattern[:, ~outside] > 0).all()
