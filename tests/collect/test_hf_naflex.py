"""Vision towers fed the patches of each image's own grid through the `naflex` adapter: SigLIP 2's NaFlex tower,
Gemma 4's and Pix2Struct's, images [batch, row, column, patch_dim], one position per patch in raster order.

Their patterns equal their eager `output_attentions` (SigLIP 2's also a plain statement of its attention:
softmax(q·kᵀ/√d) over the image's patches, q and k from its own projections of the normalised residual stream);
SDPA's equal eager's; the output is the model's own on the same patches; the processor's patches are read back
exactly (its padding patches are not positions, and the output on the real ones is the one the padded input gives);
a batch captures what each image captures alone; rollout and a report run; mixed grids, text, wrong shapes and a
grid that does not divide into Gemma 4's pooling windows are refused in one line; `interpret models` lists each as
supported by the adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import assert_each_alone, assert_listed, built_with

import interpret
from interpret.capture.hf import naflex
from interpret.errors import InputError

TIGHT = 1e-6
RECOMPUTED = 1e-5  # under SDPA the pattern is recomputed from q and k in float32 (the bound)
PATCH = 4
DIM = 3 * PATCH * PATCH
SIZES = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "patch_size": PATCH}
BUILDS: dict[str, Callable[[], Any]] = {
    "siglip2_vision_model": lambda: T.Siglip2VisionModel(T.Siglip2VisionConfig(**SIZES, num_patches=16)),
    "gemma4_vision": lambda: T.Gemma4VisionModel(T.Gemma4VisionConfig(
        **SIZES, num_key_value_heads=4, head_dim=8, pooling_kernel_size=2, position_embedding_size=32)),
    "pix2struct_vision_model": lambda: T.Pix2StructVisionModel(T.Pix2StructVisionConfig(
        hidden_size=32, d_ff=64, d_kv=8, num_hidden_layers=2, num_attention_heads=4, patch_embed_hidden_size=DIM,
        seq_len=64)),
}
# model type -> (its image processor, the grid and padded length it gives a 12 × 20 image)
PROCESSORS: dict[str, tuple[Callable[[], Any], tuple[int, int], int]] = {
    "siglip2_vision_model": (lambda: T.Siglip2ImageProcessorPil(patch_size=PATCH, max_num_patches=30), (4, 7), 30),
    "gemma4_vision": (lambda: T.Gemma4ImageProcessorPil(patch_size=PATCH, max_soft_tokens=70, pooling_kernel_size=2),
                      (12, 20), 280),
    "pix2struct_vision_model": (lambda: T.Pix2StructImageProcessorPil(patch_size={"height": PATCH, "width": PATCH},
                                                                      max_patches=30), (4, 7), 30),
}
GRID = (4, 6)  # rows × columns of the random patches: multiples of Gemma 4's pooling window


def _tower(model_type: str, kernel: str) -> Any:
    return built_with(BUILDS[model_type], kernel)


def _patches(batch: int = 2, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *GRID, DIM, generator=generator)


def _images(shapes: tuple[tuple[int, int], ...] = ((12, 20), (12, 20))) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for shape in shapes]


def _plain_siglip2(model: Any, pixel_values: torch.Tensor, layer: int) -> torch.Tensor:
    """softmax(q·kᵀ/√d) of block `layer`, from the block's own input (an eager run's hidden states)."""
    with torch.no_grad():
        out = model(**naflex.tower_of(model).inputs(pixel_values), output_hidden_states=True)
    block = model.encoder.layers[layer]
    hidden = block.layer_norm1(out.hidden_states[layer])
    heads, d_head = model.config.num_attention_heads, model.config.hidden_size // model.config.num_attention_heads
    q = block.self_attn.q_proj(hidden).unflatten(-1, (heads, d_head)).transpose(1, 2)
    k = block.self_attn.k_proj(hidden).unflatten(-1, (heads, d_head)).transpose(1, 2)
    return torch.softmax(q @ k.transpose(-1, -2) / d_head**0.5, dim=-1)


@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_patterns_equal_eager_and_the_output_is_untouched(model_type: str, kernel: str) -> None:
    model, pixel_values = _tower(model_type, kernel), _patches()
    trace = interpret.collect(model, None, pixel_values)
    assert trace.encoded.tokens[0][:7] == [*(f"patch_0_{col}" for col in range(6)), "patch_1_0"]
    assert trace.meta.attention == ("eager" if kernel == "eager" else "recomputed")
    with torch.no_grad():
        plain = model(**naflex.tower_of(model).inputs(pixel_values))
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    eager = _tower(model_type, "eager")
    with torch.no_grad():
        weights = eager(**naflex.tower_of(eager).inputs(pixel_values), output_attentions=True).attentions
    tolerance = TIGHT if kernel == "eager" else RECOMPUTED
    for layer in range(2):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"]
        assert pattern.shape == (2, 4, 24, 24)
        torch.testing.assert_close(pattern, weights[layer], atol=tolerance, rtol=0)
        if model_type == "siglip2_vision_model":
            torch.testing.assert_close(pattern, _plain_siglip2(eager, pixel_values, layer), atol=RECOMPUTED, rtol=0)


@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_a_batch_captures_what_each_image_captures_alone(model_type: str) -> None:
    assert_each_alone(_tower(model_type, "sdpa"), _patches(batch=3), RECOMPUTED)


@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_images_are_read_by_the_processor_exactly_and_its_padding_is_no_position(model_type: str) -> None:
    make, grid, padded_length = PROCESSORS[model_type]
    model, processor, images = _tower(model_type, "eager"), make(), _images()
    real = grid[0] * grid[1]
    made = processor(images=images, return_tensors="pt")
    patches = made["flattened_patches"][..., 2:] if "flattened_patches" in made else made["pixel_values"]
    assert patches.shape[1] == padded_length > real
    trace = interpret.collect(model, processor, images)
    assert trace.encoded.pixel_values.shape == (2, *grid, DIM) and trace.encoded.pos == real
    assert trace.encoded.tokens[0][-1] == f"patch_{grid[0] - 1}_{grid[1] - 1}"
    assert torch.equal(trace.encoded.pixel_values.reshape(2, real, -1), patches[:, :real].float())
    if model_type != "gemma4_vision":  # Gemma 4's vision model takes no `image_position_ids` by that name
        with torch.no_grad():
            padded = model(**made)
        torch.testing.assert_close(trace.output.last_hidden_state, padded.last_hidden_state[:, :real], atol=1e-5, rtol=0)
        if model_type == "siglip2_vision_model":  # its attention-pooling head reads the real patches only
            torch.testing.assert_close(trace.output.pooler_output, padded.pooler_output, atol=1e-5, rtol=0)
    else:
        with torch.no_grad():
            padded = model(pixel_values=made["pixel_values"], pixel_position_ids=made["image_position_ids"])
        torch.testing.assert_close(trace.output.last_hidden_state, padded.last_hidden_state, atol=1e-5, rtol=0)
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, real) and np.isfinite(rollout).all() and (rollout >= 0).all()


@pytest.mark.parametrize(
    ("model_type", "inputs", "match"),
    [("siglip2_vision_model", "a cat", "takes images, not text"),
     ("siglip2_vision_model", torch.zeros(2, 3, 5, 7), r"patches \[batch, row, column, 48\]"),
     ("siglip2_vision_model", ((12, 20), (20, 12)), r"2 different patch grids \(4×7, 7×4\)"),
     ("gemma4_vision", ((12, 20), (16, 16)), r"2 different patch grids \(12×20, 16×16\)"),
     ("gemma4_vision", torch.zeros(1, 3, 4, DIM), r"3 × 4 patches does not divide into the tower's 2 × 2 pooling")],
)
def test_text_wrong_shapes_and_mixed_grids_are_refused_in_one_line(model_type: str, inputs: Any, match: str) -> None:
    images = _images(inputs) if isinstance(inputs, tuple) else inputs
    with pytest.raises(InputError, match=match) as error:
        interpret.collect(_tower(model_type, "eager"), PROCESSORS[model_type][0](), images)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_the_default_report_runs(model_type: str, tmp_path: Any) -> None:
    report = interpret.explain(_tower(model_type, "sdpa"), None, _patches(batch=1))
    assert report.run.kind == "vision" and "rollout" in report.run.analyzers
    assert "patch_3_5" in report.render(tmp_path / "tower.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_interpret_models_lists_it(model_type: str) -> None:
    assert_listed(model_type, "naflex", "vision")


def _siglip2_dual() -> Any:
    from hf_tiny import word_tokenizer

    text = {**SIZES, "vocab_size": len(word_tokenizer()), "max_position_embeddings": 64, "pad_token_id": 0}
    text.pop("patch_size")
    return T.Siglip2Model(T.Siglip2Config(text_config=text, vision_config={**SIZES, "num_patches": 16}))


@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_siglip2_dual_encoder_captures_both_towers_equal_to_eager(kernel: str) -> None:
    """SigLIP 2 as a dual encoder (the `dual` adapter): its text tower the main stack, its NaFlex vision tower the
    `vision.` stack on the image side, read as the naflex adapter reads it."""
    from hf_tiny import TEXTS, eager_copy, model_inputs, word_tokenizer

    model = built_with(_siglip2_dual, kernel)
    trace = interpret.collect(model, word_tokenizer(), {"text": TEXTS[:2], "images": _patches()}, names="*")
    assert trace.meta.adapter == "dual" and trace.encoded.image.pos == 24
    assert trace.encoded.image.tokens[0][:2] == ["patch_0_0", "patch_0_1"]
    text = {key: value for key, value in model_inputs(trace.encoded).items() if key != "pixel_values"}
    assert "position_ids" in text  # its text tower reads the last position: the shorter text is padded on the left
    feed = {**text, **naflex.tower_of(model).inputs(trace.encoded.image.pixel_values)}
    with torch.no_grad():
        plain = model(**feed)
        eager = eager_copy(model)(**feed, output_attentions=True)
    assert torch.equal(trace.output.logits_per_image, plain.logits_per_image)
    text_mask = trace.encoded.attention_mask.bool()
    keep = text_mask[:, None, :, None] & text_mask[:, None, None, :]
    tolerance = TIGHT if kernel == "eager" else RECOMPUTED
    for layer in range(2):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"],
                                   eager.text_model_output.attentions[layer].masked_fill(~keep, 0), atol=tolerance, rtol=0)
        torch.testing.assert_close(trace[f"vision.blocks.{layer}.attn.hook_pattern"],
                                   eager.vision_model_output.attentions[layer], atol=tolerance, rtol=0)
    assert_listed("siglip2", "dual", "encoder", ("vision.blocks.{i}.attn.hook_pattern",))


def _pix2struct() -> Any:
    from hf_tiny import word_tokenizer

    text = {"vocab_size": len(word_tokenizer()), "hidden_size": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
            "num_heads": 4, "pad_token_id": 0, "decoder_start_token_id": 0}
    vision = {"hidden_size": 32, "d_ff": 64, "d_kv": 8, "num_hidden_layers": 2, "num_attention_heads": 4,
              "patch_embed_hidden_size": DIM, "seq_len": 64}
    return T.Pix2StructForConditionalGeneration(T.Pix2StructConfig(text_config=text, vision_config=vision))


@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_pix2struct_encoder_decoder_reads_patches_then_text(kernel: str, tmp_path: Any) -> None:
    """Pix2Struct (the encoder-decoder of DePlot and MatCha): the naflex-fed image encoder's patches, then the
    decoder's text; every self-, decoder and cross pattern equals the eager model's own, the logits are the model's,
    and rollout and a report run on it."""
    from hf_tiny import assert_encoder_decoder_patterns, eager_copy, word_tokenizer

    model, tokenizer = built_with(_pix2struct, kernel), word_tokenizer()
    decoder = torch.tensor([[2, 5, 6], [2, 7, 8]])
    trace = interpret.collect(model, tokenizer, _patches(), decoder_inputs=decoder)
    assert trace.meta.kind == "encoder-decoder" and trace.meta.adapter == "naflex"
    assert trace.encoded.pos == 24 and trace.encoded.decoder.pos == 3
    feed = {**naflex.tower_of(model).inputs(trace.encoded.pixel_values),
            "decoder_input_ids": trace.encoded.decoder.input_ids,
            "decoder_attention_mask": trace.encoded.decoder.attention_mask}
    with torch.no_grad():
        plain = model(**feed)
        eager = eager_copy(model)(**feed, output_attentions=True)
    assert torch.equal(trace.output.logits, plain.logits)
    assert_encoder_decoder_patterns(trace, eager, TIGHT if kernel == "eager" else RECOMPUTED)
    with pytest.raises(InputError, match="needs decoder inputs"):
        interpret.collect(model, tokenizer, _patches())
    report = interpret.explain(model, tokenizer, _patches(batch=1),
                               target=interpret.Subject(decoder_inputs=torch.tensor([[2, 5, 6]])))
    assert "rollout" in report.run.analyzers
    report.render(tmp_path / "pix2struct.html")
