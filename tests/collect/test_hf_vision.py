"""ViT input preparation: pixel values or PIL images through the image processor, patch token names."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_tiny import image_processor, pixel_values, tiny_model
from PIL import Image

import interpret
from interpret.errors import InputError


@pytest.fixture(scope="module")
def vit():
    return tiny_model("vit")


def test_images_through_the_processor_equal_their_pixel_values(vit) -> None:
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)) for _ in range(2)]
    processor = image_processor()
    trace = interpret.collect(vit, processor, images)
    expected = processor(images=images, return_tensors="pt")["pixel_values"]
    assert torch.equal(trace.encoded.pixel_values.cpu(), expected)
    assert trace.encoded.tokens[0][:3] == ["[CLS]", "patch_0_0", "patch_0_1"] and trace.encoded.tokens[1][-1] == "patch_3_3"
    assert trace.encoded.special[:, 0].all() and not trace.encoded.special[:, 1:].any()
    assert trace.stack("attn.hook_pattern").shape == (2, 2, 4, 17, 17)
    assert trace.meta.kind == "vision"
    single = interpret.collect(vit, processor, images[0])
    torch.testing.assert_close(single["blocks.1.attn.hook_pattern"], trace["blocks.1.attn.hook_pattern"][:1])


@pytest.mark.parametrize(
    ("inputs", "processor", "fragment"),
    [
        (torch.randn(2, 3, 8, 8), None, "[batch, 3, 16, 16]"),
        (torch.randn(3, 16, 16), None, "[batch, 3, 16, 16]"),
        ("a cat", None, "not text"),
        ([Image.new("RGB", (16, 16))], None, "image processor"),
    ],
)
def test_bad_image_input_is_one_line(vit, inputs, processor, fragment) -> None:
    with pytest.raises(InputError) as err:
        interpret.collect(vit, processor, inputs)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_decoder_inputs_are_refused_for_a_vision_model(vit) -> None:
    with pytest.raises(InputError, match="vision"):
        interpret.collect(vit, None, pixel_values(), decoder_inputs="a cat")
