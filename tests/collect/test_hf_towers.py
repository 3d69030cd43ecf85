"""Types `interpret models` used to leave `unknown` for reasons of its own: a model class looked up by the
config's name in the wrong mapping (so the config class was "built" as a model), a tower transformers exports no
class for, a tower that keeps transformers' default main input "input_ids" while taking `pixel_values`, and a
depth or pose head whose image size lives in its `backbone_config`.

Each model found this way is captured equal to the eager model's own `output_attentions` (with its own kernel
and with SDPA where it has one), and rollout and a report run on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers as T
from hf_tiny import TEXTS, built_with, eager_copy, model_inputs, word_tokenizer
from transformers.models.idefics2 import modeling_idefics2
from transformers.models.kosmos2 import modeling_kosmos2
from transformers.models.ovis2 import configuration_ovis2, modeling_ovis2

import interpret
from interpret.capture.hf import catalog, generic

TIGHT = 1e-6
_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}


def _dinov2_backbone() -> Any:
    return T.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=32,
                          patch_size=8, out_features=["stage1", "stage2"], reshape_hidden_states=False)


# name -> (model builder, the kernels it is loaded with: SDPA where its class supports it, which transformers
# checks at loading; the image [height, width] or None for text)
MODELS: dict[str, tuple[Callable[[], Any], tuple[str, ...], tuple[int, int] | None]] = {
    # Depth Anything: a DPT head on a DINOv2 backbone; the image size is the backbone config's.
    "depth_anything": (lambda: T.DepthAnythingForDepthEstimation(T.DepthAnythingConfig(
        backbone_config=_dinov2_backbone(), reassemble_hidden_size=32, neck_hidden_sizes=[16, 32],
        fusion_hidden_size=16, head_hidden_size=8, patch_size=8)), ("eager",), (32, 32)),
    # ViTPose: a non-square image (256 × 192 by default) given by the backbone config.
    "vitpose": (lambda: T.VitPoseForPoseEstimation(T.VitPoseConfig(backbone_config=T.VitPoseBackboneConfig(
        **_SIZES, image_size=[32, 24], patch_size=[8, 8], out_indices=[2]))), ("eager",), (32, 24)),
    # Towers transformers exports no class for; their forward takes pixel_values first.
    "idefics2_vision": (lambda: modeling_idefics2.Idefics2VisionTransformer(
        T.Idefics2VisionConfig(**_SIZES, image_size=32, patch_size=8)), ("sdpa", "eager"), (32, 32)),
    "kosmos_2_vision_model": (lambda: modeling_kosmos2.Kosmos2VisionModel(
        T.Kosmos2VisionConfig(**_SIZES, image_size=32, patch_size=8)), ("sdpa", "eager"), (32, 32)),
    "ovis2_vision": (lambda: modeling_ovis2.Ovis2VisionModel(configuration_ovis2.Ovis2VisionConfig(
        **_SIZES, image_size=32, patch_size=8, vocab_size=16, num_visual_indicator_tokens=5)),
        ("sdpa", "eager"), (32, 32)),
    # TrOCR's text decoder: a task model (TrOCRForCausalLM) is the type's only model class.
    "trocr": (lambda: T.TrOCRForCausalLM(T.TrOCRConfig(
        vocab_size=len(word_tokenizer()), d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64,
        max_position_embeddings=64, pad_token_id=0, bos_token_id=2, eos_token_id=3)), ("eager",), None),
}
RUNS = [(name, kernel) for name, (_, kernels, _) in MODELS.items() for kernel in kernels]


def _model(name: str, kernel: str) -> Any:
    return built_with(MODELS[name][0], kernel)



def _inputs(name: str) -> tuple[Any, Any]:
    """Return (processor, inputs): two random images at the model's size, or two texts of different lengths."""
    size = MODELS[name][2]
    if size is None:
        return word_tokenizer(), TEXTS
    return None, torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))


def _output(output: Any) -> torch.Tensor:
    for field in ("logits", "predicted_depth", "heatmaps", "last_hidden_state"):
        if getattr(output, field, None) is not None:
            return getattr(output, field)
    raise AssertionError(f"no output tensor in {type(output).__name__}")


@pytest.mark.parametrize(("name", "kernel"), RUNS, ids=[f"{n}-{k}" for n, k in RUNS])
def test_patterns_equal_the_eager_output_attentions_and_the_output_is_untouched(name: str, kernel: str) -> None:
    model = _model(name, kernel)
    processor, inputs = _inputs(name)
    trace = interpret.collect(model, processor, inputs, names="*")
    with torch.no_grad():
        reference = eager_copy(model)(**model_inputs(trace.encoded), output_attentions=True)
        plain = model(**model_inputs(trace.encoded))
    assert torch.equal(_output(trace.output), _output(plain))
    assert len(reference.attentions) == trace.meta.n_layers == 2
    mask = trace.encoded.attention_mask.bool()
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    for layer, attention in enumerate(reference.attentions):
        expected = attention.float().masked_fill(~keep, 0)
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], expected, atol=TIGHT, rtol=0)
    if MODELS[name][2] is not None:  # every patch is a position: the image [height, width] / patch size
        height, width = MODELS[name][2]
        assert trace.encoded.pos >= (height // 8) * (width // 8)


@pytest.mark.parametrize("name", ["depth_anything", "idefics2_vision", "trocr"])
def test_rollout_and_a_report_run(name: str, tmp_path) -> None:
    model = _model(name, MODELS[name][1][0])
    processor, inputs = _inputs(name)
    trace = interpret.collect(model, processor, inputs)
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert np.isfinite(rollout).all() and (rollout >= 0).all() and rollout.shape[0] == 2
    report = interpret.explain(model, processor, inputs, analyzers=["rollout"])
    path = tmp_path / f"{name}.html"
    report.render(path)
    assert path.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html>")


def test_the_model_class_of_a_type_is_a_model_never_its_config() -> None:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni

    def found(model_type: str) -> Any:
        return catalog._model_class(CONFIG_MAPPING[model_type], MODEL_MAPPING_NAMES, model_type)

    assert found("bert") is T.BertModel
    assert found("trocr") is T.TrOCRForCausalLM  # not TrOCRConfig, from CONFIG_MAPPING_NAMES
    assert found("depth_anything") is T.DepthAnythingForDepthEstimation
    assert found("qwen2_5_omni_audio_encoder") is modeling_qwen2_5_omni.Qwen2_5OmniAudioEncoder  # not exported
    assert found("kosmos_2_vision_model") is modeling_kosmos2.Kosmos2VisionTransformer  # a base before a task model
    assert found("sam_mask_decoder") is None  # a part built by its parent model only


def test_a_tower_is_probed_on_the_input_its_forward_takes() -> None:
    tower = modeling_idefics2.Idefics2VisionTransformer(T.Idefics2VisionConfig(**_SIZES, image_size=32, patch_size=8))
    assert tower.main_input_name == "input_ids"  # transformers' default, which its forward does not take
    assert generic._main_input(tower) == "pixel_values"
    assert generic._main_input(T.BertModel(T.BertConfig(**_SIZES, vocab_size=16))) == "input_ids"


@pytest.mark.parametrize(
    ("model_type", "status", "fragment"),
    [
        ("depth_anything", "supported", ""),
        ("vitpose", "supported", ""),
        ("trocr", "supported", ""),
        ("idefics2_vision", "supported", ""),
        ("flava_multimodal_model", "unsupported", "takes 'hidden_states'"),  # the two towers' outputs, joined
        ("upernet", "unsupported", "no attention layers"),  # its default backbone is a ResNet
    ],
)
def test_interpret_models_says_what_each_type_now_is(model_type: str, status: str, fragment: str) -> None:
    row = catalog.describe(model_type)
    assert row.status == status and fragment in row.reason, row
    assert row.model_class and not row.model_class.endswith("Config")


def test_an_image_model_without_sizes_in_its_config_or_backbone_is_refused_in_one_line() -> None:
    from interpret.errors import UnsupportedModelError

    def holding(config: Any) -> torch.nn.Module:
        module = torch.nn.Module()
        module.config = config
        return module

    with pytest.raises(UnsupportedModelError, match="ResNetConfig sets no image_size and patch_size") as err:
        generic.vision_sizes(holding(T.ResNetConfig()))
    assert "\n" not in str(err.value)
    depth = holding(T.DepthAnythingConfig(backbone_config=_dinov2_backbone()))
    assert generic.vision_sizes(depth) == ((32, 32), (8, 8), 3)  # the backbone's


def _pixtral() -> Any:
    return T.PixtralVisionModel(T.PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                      num_attention_heads=4, head_dim=8, image_size=32, patch_size=8))


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_a_tower_that_packs_a_batch_into_one_sequence_is_captured_as_a_batch(kernel: str) -> None:
    """Pixtral's vision encoder concatenates the patches of every image of a batch into one sequence (a
    block-diagonal mask keeps them apart): its adapter unpacks a batch into [batch, ...] tensors, each image's
    pattern equal to its eager model's own for that image alone; without the adapter the generic adapter's batch
    is refused in one line rather than named as if it were one image's positions."""
    from interpret.capture.engine import capture, select_sites

    model = built_with(_pixtral, kernel)
    pixels = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    trace = interpret.collect(model, None, pixels, names="*")
    assert (trace.meta.adapter, trace.encoded.pos, trace.output.last_hidden_state.shape) == ("pixtral", 16, (3, 16, 32))
    for image in range(3):
        with torch.no_grad():
            reference = eager_copy(model)(pixel_values=pixels[image:image + 1], output_attentions=True).attentions
        for layer, attention in enumerate(reference):
            torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"][image], attention[0].float(),
                                       atol=TIGHT, rtol=0)
        alone = interpret.collect(model, None, pixels[image:image + 1], names="*")
        for name in alone.names():
            torch.testing.assert_close(trace[name][image], alone[name][0], atol=TIGHT, rtol=0, msg=name)
    plain = generic.build(model, None)
    encoded = plain.prepare(None, pixels[:2])  # type: ignore[misc]
    with pytest.raises(interpret.errors.CaptureError, match=r"came out of the model as \[1, 4, 32, 32\].*batch 2") as err:
        capture(plain, encoded, select_sites(plain, None, None))
    assert "\n" not in str(err.value)


def test_a_pixtral_batch_of_one_keeps_its_gradients_and_a_larger_batch_refuses_them_in_one_line() -> None:
    from interpret.capture.api import capturable_for
    from interpret.capture.engine import capture, select_sites
    from interpret.errors import NoGradientError

    model = built_with(_pixtral, "sdpa")
    capturable = capturable_for(model)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    sites = select_sites(capturable, ["*hook_pattern", "*hook_resid_post"], None)
    tensors, output, _ = capture(capturable, capturable.prepare(None, pixels[:1]), sites, grad=True)  # type: ignore[misc]
    grads = torch.autograd.grad(output.last_hidden_state.sum(), [tensors["blocks.0.attn.hook_pattern"],
                                                                 tensors["blocks.0.hook_resid_post"]])
    assert all(grad.abs().sum() > 0 for grad in grads)
    with pytest.raises(NoGradientError, match="no gradient with respect to them") as err:
        capture(capturable, capturable.prepare(None, pixels), sites, grad=True)  # type: ignore[misc]
    assert "\n" not in str(err.value)


def test_interpret_models_lists_pixtral_under_its_adapter() -> None:
    row = catalog.describe("pixtral")
    assert (row.status, row.adapter, row.kind) == ("supported", "pixtral", "vision"), row


def test_per_example_head_gates_act_on_each_pixtral_images_own_rows() -> None:
    from interpret.capture.gates import head_gates

    model = built_with(_pixtral, "sdpa")
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    gates = torch.rand(2, 2, 4, generator=torch.Generator().manual_seed(7))
    with head_gates(model, gates):
        gated = interpret.collect(model, None, pixels).output.last_hidden_state
    for image in range(2):
        with head_gates(model, gates[image]):
            alone = interpret.collect(model, None, pixels[image:image + 1]).output.last_hidden_state
        torch.testing.assert_close(gated[image], alone[0], atol=TIGHT, rtol=0)
