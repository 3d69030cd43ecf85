"""The generic adapter: any transformers model whose attention goes through transformers' attention
interface, made capturable from the model itself, with no per-family code.

It runs one probe forward pass of three token positions (or one image) on the model (`probe.observe`),
derives the stacks, attentions, projections, MLPs and norms from what the pass did (`structure`), and builds
the canonical sites over them (`layout`). The layout is kept per model object, so the probe runs once per
model. A model on the `meta` device is probed there (no memory, no values): that is how `interpret models`
describes every model type transformers ships without building one.

Family adapters build on this one and declare only what they add (`interpret models` shows it).
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Literal

import torch
from torch import nn

from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.layout import build_capturable, forward_parameters, run_model
from interpret.capture.hf.media import pair, prepare_images
from interpret.capture.hf.pooling import text_pooling
from interpret.capture.hf.probe import Probe, observe
from interpret.capture.hf.structure import ADAPTERS_HINT, ModelLayout, has_attention_code, model_layout, no_attention
from interpret.capture.sites import Capturable, model_device
from interpret.errors import ConfigError, InterpretError, UnsupportedModelError
from interpret.inputs import Encoded, as_encoded

NAME = "generic"
PROBE_TOKENS = 3  # encoder side; the decoder side gets 2, so cross attention (query 2, key 3) stands out
PROBE_DECODER_TOKENS = 2
# The probe's image where the config sets no image_size (convolutional networks, detectors): enough to see
# whether any attention runs at all, so that a network without attention is refused as such; one with
# attention but no patch grid is still refused by `vision_sizes` when its input is prepared.
PROBE_IMAGE_SIZE = 224

# Per model object (weakly held): {(probe inputs, discovery): layout}, so each adapter probes a model once.
_LAYOUTS: weakref.WeakKeyDictionary[nn.Module, dict[tuple[Any, Any, bool], ModelLayout]] = weakref.WeakKeyDictionary()


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of `model` from its own structure (sites as in `layout`); a text tower loaded alone
    that reads its row's last position (SigLIP's: `interpret.capture.hf.pooling`) has its texts padded on the
    left, so that it reads each text's last token, as it does alone."""
    layout = layout_of(model)
    pooling = text_pooling(model, paired=False)
    if pooling is None or pooling.padding_side is None:
        return capturable(model, layout)
    prepare = partial(_padded_text, kind=layout.kind, max_positions=layout.max_positions, side=pooling.padding_side)
    return capturable(model, layout, prepare=prepare)


def _padded_text(
    tokenizer: Any | None, inputs: Any, *, kind: str, max_positions: int | None, side: Literal["left"], **given: Any
) -> Encoded:
    """Return `as_encoded`'s Encoded of a text model's inputs, texts padded on `side`."""
    return as_encoded(tokenizer, inputs, kind=kind, max_positions=max_positions, padding_side=side, **given)


def layout_of(
    model: nn.Module,
    inputs: Callable[[nn.Module, bool], dict[str, Any]] | None = None,
    discover: Callable[[nn.Module, Probe], ModelLayout] | None = None,
    packed: bool = False,
) -> ModelLayout:
    """Return the layout of `model`, probing it on its first use (kept while the model lives).

    inputs: builds the probe's inputs (model, with_mask) when the family needs its own; discover: turns the
    probe into a layout when the family needs its own (default `structure.model_layout`); packed: the model's
    hidden states are [pos, ...] with a batch's examples packed into one sequence (`probe.observe`).
    """
    key = (inputs or probe_inputs, discover or _discover, packed)
    known = _LAYOUTS.setdefault(model, {})
    if key not in known:
        known[key] = key[1](model, run_probe(model, key[0], packed))
    return known[key]


def _discover(model: nn.Module, probe: Probe) -> ModelLayout:
    return model_layout(model, probe, vision=_main_input(model) in ("pixel_values", "pixel_values_videos"))


_NO_ATTENTION_CODE = "its modeling code computes no softmax and calls no attention kernel"
# transformers' checks whether a padding mask may be dropped (every position real: SDPA then runs unmasked) read the
# mask's values, which the meta device does not hold (T5Gemma's, NLLB-MoE's encoder masks)
_MASK_SKIPS = ("_ignore_bidirectional_mask_sdpa", "_ignore_causal_mask_sdpa")


@contextlib.contextmanager
def _masks_always_built() -> Iterator[None]:
    """Within, transformers never drops a mask for being all ones: it builds it, which changes no output (the mask
    then masks nothing) and reads no value, so a probe on the meta device runs past that check."""
    from transformers import masking_utils

    kept = {name: getattr(masking_utils, name) for name in _MASK_SKIPS if callable(getattr(masking_utils, name, None))}
    for name in kept:
        setattr(masking_utils, name, _never_skip)
    try:
        yield
    finally:
        for name, function in kept.items():
            setattr(masking_utils, name, function)


def _never_skip(*args: Any, **kwargs: Any) -> bool:
    return False


def run_probe(model: nn.Module, inputs: Callable[[nn.Module, bool], dict[str, Any]], packed: bool = False) -> Probe:
    """Return the probe of one forward pass; on the meta device retry with an attention mask if the maskless
    pass reads values (a few models inspect the ids for padding when no mask is given)."""
    _refuse_without_forward(model)
    _refuse_without_language(model)
    meta = model_device(model).type == "meta"
    attempts = (False, True) if meta else (False,)
    failure: Exception | None = None
    given: dict[str, Any] = {}
    for with_mask in attempts:
        try:
            given = inputs(model, with_mask)
            with _masks_always_built() if meta else contextlib.nullcontext():
                return observe(model, given, packed)
        except InterpretError:
            raise
        except Exception as err:  # a model's own error on the probe input: reported below in one line
            failure = err
    assert failure is not None
    if not has_attention_code(model):  # whatever input it wanted, it has no attention to capture
        raise UnsupportedModelError(no_attention(model, _NO_ATTENTION_CODE)) from None
    message = " ".join(str(failure).split())[:160]
    pixels = given.get("pixel_values")
    if packed:  # a packed model's input (patches, audio frames), whatever it is called
        on = "the packed input of one example"
    elif isinstance(pixels, torch.Tensor):
        on = f"a {pixels.shape[-2]}×{pixels.shape[-1]} image"
    else:
        on = f"{PROBE_TOKENS} positions"
    raise UnsupportedModelError(
        f"a probe forward pass of {type(model).__name__} on {on} failed"
        f" ({type(failure).__name__}: {message}); {ADAPTERS_HINT} that feeds it valid inputs."
    ) from None


def _refuse_without_forward(model: nn.Module) -> None:
    """Refuse, saying what to capture instead, a model class with no forward pass of its own: one that holds
    models run one after another (Bark, Qwen2.5-Omni: capture one of them), or one used through its own methods
    (a VQ-VAE's encode and decode)."""
    if type(model).forward is not nn.Module.forward:
        return
    held = [name for name, child in model.named_children() if hasattr(child, "config") and hasattr(child, "forward")
            and type(child).forward is not nn.Module.forward]
    instead = (f"it holds the models {', '.join(held)}, run one after another: capture one of them (e.g."
               f" model.{held[0]})" if held else "it is used through its own methods (encode, decode, ...), and a"
               " capture records what a forward pass computes")
    raise UnsupportedModelError(f"{type(model).__name__} has no forward pass of its own; {instead}.")


def _refuse_without_language(model: nn.Module) -> None:
    """Refuse, saying how to set it, a model with an adapter module per language and no language chosen (X-MOD,
    whose checkpoints leave `default_language` unset: its forward pass would stop at that)."""
    config = getattr(model, "config", None)
    languages = getattr(config, "languages", None)
    if not hasattr(model, "set_default_language") or not languages or getattr(config, "default_language", "") is not None:
        return
    raise ConfigError(
        f"{type(model).__name__} runs a different adapter per language and none is chosen: call"
        f" model.set_default_language(LANGUAGE) with one of {', '.join(map(str, languages))} before capturing it."
    )


def probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    """Return the probe's inputs: 3 token ids (2 more on a decoder side), or one image at the config's size."""
    device = model_device(model)
    config = model.config
    main = _main_input(model)
    if main == "pixel_values":
        vision = _vision_config(config)
        size = pair(getattr(vision, "image_size", None) or PROBE_IMAGE_SIZE)
        image = {"pixel_values": torch.zeros(1, _channels(vision), *size, device=device, dtype=_dtype(model))}
        if reads_image_then_text(model):  # a decoder reading the image (TrOCR): a few token ids
            image["decoder_input_ids"] = torch.ones(1, PROBE_DECODER_TOKENS, dtype=torch.long, device=device)
            image.update(cache_off(model))
        return image
    if main != "input_ids":
        if not has_attention_code(model):  # a codec's waveform: no probe needed to know it has no attention
            raise UnsupportedModelError(no_attention(model, _NO_ATTENTION_CODE))
        raise UnsupportedModelError(
            f"{type(model).__name__} takes {main!r}, which the generic adapter cannot make (it feeds token ids or"
            f" pixel values); {ADAPTERS_HINT} that prepares this input."
        )
    vocab = int(getattr(config.get_text_config(), "vocab_size", 0) or PROBE_TOKENS + 1)
    ids = (torch.arange(1, PROBE_TOKENS + 1, device=device) % vocab)[None]
    inputs: dict[str, Any] = {"input_ids": ids}
    if with_mask:
        inputs["attention_mask"] = torch.ones_like(ids)
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = ids[:, :PROBE_DECODER_TOKENS]
    inputs.update(cache_off(model))
    return inputs


def cache_off(model: nn.Module) -> dict[str, Any]:
    """Return {"use_cache": False} for a probe of a model that takes it, except on the meta device: there a
    cache keeps transformers from inspecting position ids for packed sequences (which reads values)."""
    if "use_cache" not in forward_parameters(model) or model_device(model).type == "meta":
        return {}
    return {"use_cache": False}


def capturable(
    model: nn.Module,
    layout: ModelLayout,
    *,
    adapter: str = NAME,
    prepare: Callable[..., Any] | None = None,
    unsupported: Mapping[str, str] | None = None,
    pixels: Callable[[Any], Mapping[str, Any]] | None = None,
) -> Capturable:
    """Return the Capturable of `model` laid out as `layout` (prepare: the family's own input preparation; pixels:
    how its pixel values are fed, `layout.run_model`)."""
    if prepare is None and layout.kind == "vision":
        prepare = vision_prepare(model, layout)
    elif prepare is None and reads_image_then_text(model):  # TrOCR: the image, then the decoder's text
        prepare = vision_prepare(model, layout)
        layout = replace(layout, max_positions=None)  # the decoder's limit is its own side's
    run = runner(model, layout, pixels)
    return build_capturable(
        model,
        model,
        layout.stacks,
        kind=layout.kind,
        run=run,
        max_positions=layout.max_positions,
        adapter=adapter,
        prepare=prepare,
        unsupported=unsupported,
    )


def runner(
    model: nn.Module, layout: ModelLayout, pixels: Callable[[Any], Mapping[str, Any]] | None = None,
) -> Callable[[Any], Any]:
    """Return how the collector runs `model` on an Encoded: no key/value cache, position ids that follow a
    left padding, pixel values fed by `pixels` where given (`layout.run_model`)."""
    return partial(run_model, model, disable_cache="use_cache" in forward_parameters(model),
                   position_offset=layout.position_offset, pixels=pixels)


def vision_sizes(model: nn.Module) -> tuple[tuple[int, int], tuple[int, int], int]:
    """Return (image size, patch size, channels) from the (vision) config."""
    config = model.config
    vision = _vision_config(config)
    image_size, patch_size = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    if image_size is None or patch_size is None:
        raise UnsupportedModelError(
            f"{type(config).__name__} sets no image_size and patch_size, so the image input cannot be sized;"
            f" {ADAPTERS_HINT}."
        )
    return pair(image_size), pair(patch_size), _channels(vision)


def _vision_config(config: Any) -> Any:
    """Return the config that describes the image input: the vision sub-config where there is one, else the
    backbone's (a depth or pose head on a ViT backbone), else the encoder's of an encoder-decoder reading images
    (VisionEncoderDecoderModel: TrOCR, Donut), else the config itself."""
    encoder = getattr(config, "encoder", None) if getattr(config, "is_encoder_decoder", False) else None
    encoder = encoder if hasattr(encoder, "image_size") else None
    return getattr(config, "vision_config", None) or getattr(config, "backbone_config", None) or encoder or config


def _channels(vision: Any) -> int:
    return int(getattr(vision, "num_channels", 3) or 3)


def vision_prepare(model: nn.Module, layout: ModelLayout) -> Callable[..., Any]:
    """Return the input preparation of a vision model: its special tokens (those the probe saw beyond the
    patches: the class token, a distillation token, registers) then the patches."""
    image_size, patch_size, channels = vision_sizes(model)
    patches = (image_size[0] // patch_size[0]) * (image_size[1] // patch_size[1])
    positions = layout.positions
    extra = positions - patches
    if extra < 0:
        raise UnsupportedModelError(
            f"{type(model).__name__} attends over {positions} positions, fewer than its {patches} patches (pooled"
            f" or windowed attention); {ADAPTERS_HINT} that maps its positions to the image."
        )
    specials = ["[CLS]", *(f"[SPECIAL_{i}]" for i in range(1, extra))][:extra]
    decoder = reads_image_then_text(model)
    return partial(prepare_images, image_size=image_size, patch_size=patch_size, channels=channels, specials=specials,
                   decoder=decoder, decoder_limit=layout.max_positions if decoder else None)


def reads_image_then_text(model: nn.Module) -> bool:
    """Whether `model` is an encoder-decoder reading an image (VisionEncoderDecoderModel: TrOCR): its input is
    `pixel_values` and its forward takes `decoder_input_ids` (DETR's decoder reads object queries instead)."""
    return _main_input(model) == "pixel_values" and "decoder_input_ids" in forward_parameters(model)


def _main_input(model: nn.Module) -> str:
    """Return the input `model` is run on: its `main_input_name`, unless its forward has no such parameter (a
    tower that keeps transformers' default "input_ids" while taking `pixel_values`), then the forward's first."""
    main = str(getattr(model, "main_input_name", "input_ids"))
    parameters = forward_parameters(model)
    if not parameters or main in parameters:
        return main
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return next((name for name, parameter in parameters.items() if parameter.kind in positional), main)


def _dtype(model: nn.Module) -> torch.dtype:
    for param in model.parameters():
        if param.is_floating_point():
            return param.dtype
    return torch.float32


ADAPTER = HFAdapter(model_types=(), build=build, adds="")
