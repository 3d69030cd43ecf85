"""Text-image dual encoders beyond CLIP and SigLIP: AltCLIP (an XLM-R text tower), Chinese-CLIP (a BERT text
tower), CLIPSeg, MetaCLIP 2, OWL-ViT, OWLv2, BLIP, AIMv2 and the vision-text dual encoder assembled from any two
towers (ViT and BERT here). Each runs a text stack and a vision stack in one forward;
the dual adapter captures the text tower as the main stack and the vision tower as `vision.` on the image side.

Each is captured equal to its eager model's own `output_attentions` (text and vision towers, with SDPA where its
class has it), leaves the model's output untouched, and runs rollout; `interpret models` lists each as supported
by the dual adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import TEXTS, assert_listed, built_with, dual_patterns, eager_copy, model_inputs, word_tokenizer

import interpret

TIGHT = 1e-6
IMAGE = 32
_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}


def _dual(config: Any, text: dict[str, Any] | None = None, **extra: Any) -> Callable[[], Any]:
    """Return a builder of a tiny dual encoder: `config(text_config=..., vision_config=...)`."""
    tokenizer = word_tokenizer()
    text_config = {**_SIZES, "vocab_size": len(tokenizer), "max_position_embeddings": 64, "pad_token_id": 0,
                   **(text or {})}
    vision_config = {**_SIZES, "image_size": IMAGE, "patch_size": 8}
    return lambda: config(text_config=text_config, vision_config=vision_config, **extra)


def _assembled() -> Any:
    """A vision-text dual encoder assembled from a ViT and a BERT."""
    config = T.VisionTextDualEncoderConfig.from_vision_text_configs(
        T.ViTConfig(**_SIZES, image_size=IMAGE, patch_size=8),
        T.BertConfig(**_SIZES, vocab_size=len(word_tokenizer()), pad_token_id=0), projection_dim=16)
    return T.VisionTextDualEncoderModel(config)


# model type -> (model builder, the kernels it runs with: SDPA where its class supports it)
MODELS: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "altclip": (lambda: T.AltCLIPModel(_dual(T.AltCLIPConfig, {"project_dim": 16}, projection_dim=16)()),
                ("eager",)),
    "chinese_clip": (lambda: T.ChineseCLIPModel(_dual(T.ChineseCLIPConfig, projection_dim=16)()), ("eager",)),
    "clipseg": (lambda: T.CLIPSegModel(_dual(T.CLIPSegConfig, projection_dim=16)()), ("sdpa", "eager")),
    "metaclip_2": (lambda: T.MetaClip2Model(_dual(T.MetaClip2Config, projection_dim=16)()), ("sdpa", "eager")),
    "owlvit": (lambda: T.OwlViTModel(_dual(T.OwlViTConfig, projection_dim=16)()), ("sdpa", "eager")),
    "owlv2": (lambda: T.Owlv2Model(_dual(T.Owlv2Config, projection_dim=16)()), ("sdpa", "eager")),
    "blip": (lambda: T.BlipModel(_dual(T.BlipConfig, {"encoder_hidden_size": 32}, projection_dim=16)()),
             ("eager",)),
    "aimv2": (lambda: T.Aimv2Model(_dual(T.Aimv2Config, projection_dim=16)()), ("sdpa", "eager")),
    "vision-text-dual-encoder": (lambda: _assembled(), ("sdpa", "eager")),
}
CLASS_TOKEN = {"aimv2": False}  # AIMv2's vision tower has no class token: its positions are the patches
RUNS = [(name, kernel) for name, (_, kernels) in MODELS.items() for kernel in kernels]


def _model(name: str, kernel: str) -> Any:
    build, kernels = MODELS[name]
    return built_with(build, kernel if kernel in kernels else kernels[0])


def _inputs() -> dict[str, Any]:
    """Two texts of different lengths (the second padded) with two random images."""
    images = torch.randn(2, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))
    return {"text": TEXTS, "images": images}


def _scores(output: Any) -> torch.Tensor:
    return output.logits_per_image


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_both_towers_equal_the_eager_output_attentions_and_the_output_is_untouched(name: str, kernel: str) -> None:
    model = _model(name, kernel)
    trace = interpret.collect(model, word_tokenizer(), _inputs(), names="*")
    with torch.no_grad():
        plain = model(**model_inputs(trace.encoded))
    assert torch.equal(_scores(trace.output), _scores(plain))
    reference = dual_patterns(eager_copy(model), trace.encoded)
    assert len(reference) == 4 and trace.meta.n_layers == 2 and trace.meta.adapter == "dual"
    assert sorted(trace.names("*hook_pattern")) == sorted(reference)
    for hook, expected in reference.items():
        torch.testing.assert_close(trace[hook], expected, atol=TIGHT, rtol=0)
    # The vision tower attends over its class token and every patch of the 32 × 32 image in 8 × 8 patches.
    specials = ["[CLS]"] if CLASS_TOKEN.get(name, True) else []
    assert trace.encoded.image.pos == len(specials) + (IMAGE // 8) ** 2
    assert trace.encoded.image.tokens[0][:2] == [*specials, "patch_0_0", "patch_0_1"][:2]


@pytest.mark.parametrize("name", ["altclip", "owlv2", "blip"])
def test_rollout_runs_on_the_text_tower(name: str) -> None:
    model = _model(name, "eager")
    trace = interpret.collect(model, word_tokenizer(), _inputs())
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape[0] == 2 and np.isfinite(rollout).all() and (rollout >= 0).all()
    mask = trace.encoded.attention_mask.numpy().astype(bool)
    assert (rollout[~mask] == 0).all() and (rollout[mask] > 0).any()


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_interpret_models_lists_each_as_supported_by_the_dual_adapter(model_type: str) -> None:
    assert_listed(model_type, "dual", "encoder",
                  ("vision.blocks.{i}.attn.hook_pattern", "blocks.{i}.attn.hook_pattern"))


def _classifier(name: str) -> Any:
    """A tiny image classifier of a dual encoder's type: its vision tower and a class head, no text tower."""
    text = {**_SIZES, "vocab_size": len(word_tokenizer())}
    if name == "siglip2":
        config = T.Siglip2Config(text_config=text, vision_config={**_SIZES, "num_patches": 16, "patch_size": 8},
                                 num_labels=3)
        return T.Siglip2ForImageClassification(config)
    config_class, model_class = {"clip": (T.CLIPConfig, T.CLIPForImageClassification),
                                 "siglip": (T.SiglipConfig, T.SiglipForImageClassification)}[name]
    return model_class(config_class(text_config=text, vision_config={**_SIZES, "image_size": IMAGE, "patch_size": 8},
                                    num_labels=3))


@pytest.mark.parametrize("name", ["clip", "siglip", "siglip2"])
def test_an_image_classifier_of_a_dual_encoders_type_is_a_vision_model(name: str) -> None:
    """CLIPForImageClassification, SiglipForImageClassification and Siglip2ForImageClassification have a dual
    encoder's config type but hold its vision tower alone: they are captured as vision models (SigLIP 2's as the
    naflex adapter feeds its tower), equal to their eager `output_attentions`, and their class logits are a
    decision the gradient methods explain."""
    from interpret.capture.hf import naflex

    model = built_with(lambda: _classifier(name), "sdpa")
    generator = torch.Generator().manual_seed(1)
    pixel_values = (torch.randn(2, 4, 4, 3 * 8 * 8, generator=generator) if name == "siglip2"
                    else torch.randn(2, 3, IMAGE, IMAGE, generator=generator))
    trace = interpret.collect(model, None, pixel_values)
    assert trace.meta.kind == "vision" and trace.meta.adapter == ("naflex" if name == "siglip2" else "generic")
    feed = naflex.tower_of(model).inputs(pixel_values) if name == "siglip2" else {"pixel_values": pixel_values}
    with torch.no_grad():
        plain = model(**feed)
        eager = eager_copy(model)(**feed, output_attentions=True)
    assert torch.equal(trace.output.logits, plain.logits)
    for layer, expected in enumerate(eager.attentions):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], expected, atol=1e-5, rtol=0)
    report = interpret.explain(model, None, pixel_values[:1])
    assert "attention_x_gradient" in report.run.analyzers and "rollout" in report.run.analyzers
