"""An encoder-decoder that reads an image (`VisionEncoderDecoderModel`: TrOCR's ViT encoder under a text decoder)
through the generic adapter: the image's class token and patches on the encoder side, the decoder's text from
`decoder_inputs`. Every self-, decoder and cross pattern equals the eager model's own `output_attentions`, the
logits are the model's, a missing decoder input is refused in one line, rollout and a report run, and `interpret
models` lists the type as supported."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers as T
from hf_tiny import (
    TEXTS, assert_encoder_decoder_patterns, assert_listed, built_with, eager_copy, tiny_model, word_tokenizer,
)

import interpret
from interpret.evidence.causality import TITLE, later_weight
from interpret.errors import InputError

IMAGE, PATCH = 32, 8


def _trocr() -> Any:
    encoder = T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                          image_size=IMAGE, patch_size=PATCH)
    decoder = T.TrOCRConfig(vocab_size=len(word_tokenizer()), d_model=32, decoder_layers=2, decoder_attention_heads=4,
                            decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0, decoder_start_token_id=2)
    config = T.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id = 2, 0
    return T.VisionEncoderDecoderModel(config)


def _images(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))


def test_patches_then_text_equal_the_eager_output_attentions() -> None:
    model, tokenizer = built_with(_trocr, "eager"), word_tokenizer()
    decoder = torch.tensor([[2, 5, 6, 7], [2, 8, 9, 0]])
    trace = interpret.collect(model, tokenizer, _images(), decoder_inputs=decoder)
    assert (trace.meta.kind, trace.meta.adapter) == ("encoder-decoder", "generic")
    assert trace.encoded.tokens[0][:2] == ["[CLS]", "patch_0_0"] and trace.encoded.pos == 1 + (IMAGE // PATCH) ** 2
    assert trace.encoded.decoder.tokens[0][:2] == ["[CLS]", tokenizer.convert_ids_to_tokens(5)]
    feed = {"pixel_values": _images(), "decoder_input_ids": trace.encoded.decoder.input_ids,
            "decoder_attention_mask": trace.encoded.decoder.attention_mask}
    with torch.no_grad():
        plain = model(**feed)
        eager = eager_copy(model)(**feed, output_attentions=True)
    assert torch.equal(trace.output.logits, plain.logits)
    assert_encoder_decoder_patterns(trace, eager, 1e-6)


def test_under_sdpa_the_capture_records_the_attention_trocr_really_computes() -> None:
    """Loaded with SDPA, TrOCR's decoder computes its attention in its own code, and transformers builds it no
    causal mask (it leaves causality to SDPA's `is_causal`, which that code never calls): each position attends to
    the ones after it, and the logits differ from the eager model's. The capture records what the model computes
    (z = pattern · values in every block, weight on later positions), not what the eager model would, and the
    report says so in a note (`evidence.causality`); the eager model and a causal decoder get none."""
    model, tokenizer = built_with(_trocr, "sdpa"), word_tokenizer()
    trace = interpret.collect(model, tokenizer, _images(), decoder_inputs=torch.tensor([[2, 5, 6, 7], [2, 8, 9, 10]]),
                              names="*")
    for layer in range(2):
        pattern = trace[f"decoder.blocks.{layer}.attn.hook_pattern"]
        assert float(pattern.triu(1).sum()) > 0.1  # later positions are attended to
        mixed = torch.einsum("bhqk,bkhd->bqhd", pattern, trace[f"decoder.blocks.{layer}.attn.hook_v"])
        torch.testing.assert_close(mixed, trace[f"decoder.blocks.{layer}.attn.hook_z"], atol=1e-5, rtol=0)
    rows = [float(trace[f"decoder.blocks.{layer}.attn.hook_pattern"].triu(1).sum(-1).max()) for layer in range(2)]
    assert later_weight(trace) == (max(rows), rows.index(max(rows)))
    subject = interpret.Subject(decoder_inputs=torch.tensor([[2, 5, 6]]))
    notes = dict(interpret.explain(model, tokenizer, _images(batch=1), target=subject, evidence=False).run.notes)
    assert "self-attention puts up to" in notes[TITLE] and "attn_implementation=\"eager\"" in notes[TITLE]
    eager = interpret.explain(built_with(_trocr, "eager"), tokenizer, _images(batch=1), target=subject, evidence=False)
    assert TITLE not in dict(eager.run.notes)
    causal = interpret.collect(tiny_model("llama", tokenizer=tokenizer), tokenizer, TEXTS[:2])
    assert causal.layers("attn.hook_pattern") and later_weight(causal) == (0.0, None)


def test_a_missing_decoder_input_is_refused_and_rollout_and_a_report_run(tmp_path: Any) -> None:
    model, tokenizer = built_with(_trocr, "sdpa"), word_tokenizer()
    with pytest.raises(InputError, match="needs decoder inputs") as error:
        interpret.collect(model, tokenizer, _images())
    assert "\n" not in str(error.value)
    report = interpret.explain(model, tokenizer, _images(batch=1),
                               target=interpret.Subject(decoder_inputs=torch.tensor([[2, 5, 6]])))
    assert "rollout" in report.run.analyzers and report.run.kind == "encoder-decoder"
    assert "patch_3_3" in report.render(tmp_path / "trocr.html").read_text(encoding="utf-8")


def test_interpret_models_lists_it() -> None:
    assert_listed("vision-encoder-decoder", "generic", "encoder-decoder",
                  ("decoder.blocks.{i}.cross_attn.hook_pattern",))
