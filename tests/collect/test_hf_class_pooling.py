"""Where an image or audio classifier's decision reads its sequence: the positions its class head reads, as its
own code does.

An image classifier's head reads its class token (ViT), both its class and distillation tokens (DeiT with its
distillation head, and AST's), the mean of its patches (CLIPForImageClassification, BEiT with mean pooling), the
class token beside the mean of the patches (DINOv2, registers skipped), or the mean of every position (SigLIP,
I-JEPA, Swin; the real frames of wav2vec 2.0 and its kin). Tested against a plain statement of the model's
dependence: the gradient of the class logit with respect to the last block's output is non-zero exactly at the
positions the decision's pooling names; the weights are the head's own where it is a mean (1/n each), ½ for each
of two parts the head joins (DeiT, AST, DINOv2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import IMAGE_SIZE, PATCH_SIZE, built_with, last_layer, pixel_values, read_positions, tiny_model

import interpret
from interpret.decision.decide import decide

_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
_VISION = {**_SIZES, "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE, "num_labels": 3}
PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2


def _dual_classifier(config: Any, model: Any) -> Callable[[], Any]:
    return lambda: model(config(text_config=_SIZES, vision_config={**_SIZES, "image_size": IMAGE_SIZE,
                                                                   "patch_size": PATCH_SIZE}, num_labels=3))


# name -> (builder, the pooling it declares as ((position, weight), ...) over its positions)
MODELS: dict[str, tuple[Callable[[], Any], tuple[tuple[int, float], ...]]] = {
    "vit": (lambda: tiny_model("vit"), ((0, 1.0),)),
    "deit-with-teacher": (lambda: tiny_model("deit"), ((0, 0.5), (1, 0.5))),
    "dinov2": (lambda: tiny_model("dinov2"), ((0, 0.5), *((p, 0.5 / PATCHES) for p in range(1, PATCHES + 1)))),
    "dinov2-with-registers": (
        lambda: T.Dinov2WithRegistersForImageClassification(T.Dinov2WithRegistersConfig(
            **{**_VISION, "mlp_ratio": 2}, num_register_tokens=2)),
        ((0, 0.5), *((p, 0.5 / PATCHES) for p in range(3, PATCHES + 3)))),
    "clip-classifier": (_dual_classifier(T.CLIPConfig, T.CLIPForImageClassification),
                        tuple((p, 1 / PATCHES) for p in range(1, PATCHES + 1))),
    "siglip-classifier": (_dual_classifier(T.SiglipConfig, T.SiglipForImageClassification),
                          tuple((p, 1 / PATCHES) for p in range(PATCHES))),
    "beit-mean-pooling": (lambda: T.BeitForImageClassification(T.BeitConfig(**_VISION, use_mean_pooling=True)),
                          tuple((p, 1 / PATCHES) for p in range(1, PATCHES + 1))),
    "beit-class-token": (lambda: T.BeitForImageClassification(T.BeitConfig(**_VISION, use_mean_pooling=False)),
                         ((0, 1.0),)),
    "ijepa": (lambda: T.IJepaForImageClassification(T.IJepaConfig(**_VISION)),
              tuple((p, 1 / PATCHES) for p in range(PATCHES))),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_decision_reads_where_the_class_head_reads(name: str) -> None:
    build, declared = MODELS[name]
    model = built_with(build, "eager")
    pixels = pixel_values(2)
    trace = interpret.collect(model, None, pixels)
    decisions = decide(model, trace)
    for decision in decisions:
        positions = [position for position, _ in decision.target.pooling]
        assert positions == [position for position, _ in declared]
        np.testing.assert_allclose([w for _, w in decision.target.pooling], [w for _, w in declared], atol=1e-12)
    classes = torch.tensor([decision.target.ids[0] for decision in decisions])
    read = read_positions(last_layer(model), lambda: model(pixel_values=pixels).logits.gather(1, classes[:, None])[:, 0])
    assert read == [[position for position, _ in declared]] * 2
    readout = interpret.analyze(trace, "rollout", model=model)["readout"]
    expected = interpret.analyze(trace, "rollout", params={"readout": tuple(p for p, _ in declared)})["readout"]
    if len({w for _, w in declared}) == 1:  # equal weights: the named rows, equally weighted, are the same readout
        np.testing.assert_allclose(readout, expected, atol=1e-12)


@pytest.mark.parametrize("family", ["swin", "swinv2", "donut-swin"])
def test_a_swin_classifier_reads_the_mean_of_its_positions(family: str) -> None:
    """Swin's pooler averages its last stage's tokens (`AdaptiveAvgPool1d`): the decision weighs every position of
    the patch grid it is read on equally."""
    from hf_tiny import SWIN_IMAGE_SIZE

    model = tiny_model(family, "eager")
    trace = interpret.collect(model, None, pixel_values(1, size=SWIN_IMAGE_SIZE))
    pooling = decide(model, trace)[0].target.pooling
    n = trace.encoded.pos
    assert [p for p, _ in pooling] == list(range(n)) and all(w == pytest.approx(1 / n) for _, w in pooling)


@pytest.mark.parametrize("family", ["wav2vec2", "hubert", "unispeech-sat"])
def test_an_audio_classifier_reads_the_mean_of_its_real_frames(family: str) -> None:
    """wav2vec 2.0's, HuBERT's and UniSpeech-SAT's heads average the frames their padding mask keeps: the decision
    weighs each real frame 1/n, and the logit depends on exactly those frames' last hidden states."""
    from hf_tiny import audio_clips, feature_extractor, model_inputs, tiny_speech

    model = tiny_speech(family, "eager")
    trace = interpret.collect(model, feature_extractor(), audio_clips())
    decisions = decide(model, trace)
    real = [torch.nonzero(row).flatten().tolist() for row in trace.encoded.attention_mask]
    assert [[p for p, _ in d.target.pooling] for d in decisions] == real
    assert all(w == pytest.approx(1 / len(r)) for d, r in zip(decisions, real) for _, w in d.target.pooling)
    classes = torch.tensor([d.target.ids[0] for d in decisions])
    inputs = model_inputs(trace.encoded)
    read = read_positions(last_layer(model), lambda: model(**inputs).logits.gather(1, classes[:, None])[:, 0])
    assert read == real


def test_the_audio_spectrogram_transformer_reads_its_two_tokens() -> None:
    """AST's pooler is the mean of its class and distillation tokens ((h[:, 0] + h[:, 1]) / 2)."""
    from test_hf_spectrogram import SAMPLING_RATE, _clips, _extractor, _model

    model = _model("eager")
    values = _extractor()(_clips(), sampling_rate=SAMPLING_RATE, return_tensors="pt")["input_values"]
    trace = interpret.collect(model, None, values)
    decisions = decide(model, trace)
    assert [d.target.pooling for d in decisions] == [((0, 0.5), (1, 0.5))] * 2
    classes = torch.tensor([d.target.ids[0] for d in decisions])
    read = read_positions(last_layer(model), lambda: model(input_values=values).logits.gather(1, classes[:, None])[:, 0])
    assert read == [[0, 1]] * 2


@pytest.mark.parametrize(("pooling", "reads"), [("late", "mean"), ("mean", "mean"), ("bos", "first")])
def test_eurobert_reads_as_its_classifier_pooling_says(pooling: str, reads: str) -> None:
    """EuroBERT's classifier pools by `classifier_pooling`: "bos" the first token, "mean" the mean of the real
    tokens' states, "late" (its default) the mean of the real tokens' logits; the logit depends on exactly the
    positions the decision reads."""
    from hf_tiny import TEXTS, model_inputs, word_tokenizer

    tokenizer = word_tokenizer()
    config = T.EuroBertConfig(**_SIZES, vocab_size=len(tokenizer), num_key_value_heads=4, pad_token_id=0,
                              classifier_pooling=pooling, num_labels=3)
    model = built_with(lambda: T.EuroBertForSequenceClassification(config), "eager")
    trace = interpret.collect(model, tokenizer, TEXTS)
    decisions = decide(model, trace, tokenizer)
    real = [torch.nonzero(row).flatten().tolist() for row in trace.encoded.attention_mask]
    expected = real if reads == "mean" else [r[:1] for r in real]
    assert [[p for p, _ in d.target.pooling] for d in decisions] == expected
    classes = torch.tensor([d.target.ids[0] for d in decisions])
    inputs = model_inputs(trace.encoded)
    assert read_positions(last_layer(model), lambda: model(**inputs).logits.gather(1, classes[:, None])[:, 0]) == expected
