"""Adapter for speech models on raw waveforms: the wav2vec2 family (wav2vec 2.0, HuBERT, data2vec-audio,
UniSpeech, UniSpeech-SAT, Wav2Vec2-Conformer, WavLM, SEW, SEW-D, OmniASR), and the encoder-decoders whose decoder
reads text (`decoder_inputs`): Moonshine, and SpeechEncoderDecoderModel (a wav2vec2-family encoder with any text
decoder cross-attending to it; its frame count and mask are its encoder's, `get_encoder()`).

What it adds over the generic adapter: the input. These models read raw audio, `input_values` [batch,
samples], and a convolutional feature encoder turns it into frames (20 ms apart for the released models) that
the transformer attends over; those frames are the positions, named `audio_0`, `audio_1`, .... Raw clips
(1-D arrays or tensors) are made into `input_values` by the feature extractor that `interpret.load` returned,
called at its own sampling rate, so normalisation and padding are the checkpoint's; when the extractor returns
a sample-level attention mask it is given to the model, and a padded clip's frames beyond its own are padding.
The frame count and each example's frame mask come from the model's own `_get_feat_extract_output_lengths`
and `_get_feature_vector_attention_mask`. The probe pass feeds a short zero waveform of a few frames.
Everything else (the transformer stack, projections, MLPs, norms, Wav2Vec2-Conformer's rotary or relative
position bias, which its kernel receives) is the generic adapter's.

A padded clip's frames equal the clip's alone where the model itself ignores padding (wav2vec 2.0, HuBERT,
UniSpeech, UniSpeech-SAT with a layer-norm feature encoder; a group-norm one normalises over the padding too,
and its extractor returns no mask: the model then reads the clips padded with silence, all frames real); data2vec-audio's stacked positional convolutions
and the Conformer's convolution module read the padded frames, so there the model's own numbers (and thus the
patterns) of a padded clip differ from the clip alone, as they do in the model's batched inference.

WavLM computes its attention with torch's `F.multi_head_attention_forward`, its gated relative position bias as
the mask, and returns the weights averaged over heads; the capture follows that function's own body
(`own_code._OPENED`), so each head's pattern is what the function applied, and `hook_z` is refused (the function
applies the output projection from its weights, never calling the module).

SEW and SEW-D attend over the feature encoder's frames average-pooled `squeeze_factor` at a time (a partial last
group dropped), so there a position is that many frames (`pooled_lengths`), real where any of its frames is: the
frame mask max-pooled as the model pools it (`pooled_mask`). SEW-D's attention is DeBERTa's disentangled one,
computed in the module's own code; the generic adapter records its softmax there (`own_code`).
Moonshine states no frame mask function: its encoder takes every 384th sample's mask (the product of its
convolutions' strides), so a padded clip's real frames are those that start inside it (`strided_mask`), which
its attention follows.
A model whose forward takes a `padding_mask` (OmniASR, after the audio codecs' convention) takes its waveform
channels-first, [batch, 1, samples], with the sample mask under that name; `Encoded.input_values` stays
[batch, samples] (a channels-first extractor's mono channel is dropped) and the run adds the channel back.
Wav2Vec2-BERT reads log-mel features: the `features` adapter serves it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from interpret.arrays import to_numpy
from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.layout import run_model
from interpret.capture.hf.media import decoder_text
from interpret.capture.hf.structure import ADAPTERS_HINT
from interpret.capture.sites import Capturable
from interpret.errors import InputError, UnsupportedModelError
from interpret.inputs import Encoded

NAME = "speech"
PROBE_FRAMES = 3  # the probe's waveform is the shortest power of two long enough for this many frames


def build(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable of a raw-waveform speech model: an encoder (bare, or with a task head) or an
    encoder-decoder whose decoder reads text (Moonshine)."""
    layout = generic.layout_of(model, inputs=_probe_inputs)
    squeeze = _squeeze(model)
    frames = partial(frame_lengths, model) if squeeze == 1 else partial(pooled_lengths, model, squeeze)
    mask = partial(frame_mask, model) if squeeze == 1 else partial(pooled_mask, model, squeeze)
    encoder_decoder = layout.kind == "encoder-decoder"
    prepare = partial(prepare_waveforms, frames=frames, frame_mask=mask, dtype=_feature_encoder(model).weight.dtype,
                      encoder_decoder=encoder_decoder, decoder_limit=layout.max_positions if encoder_decoder else None)
    made = generic.capturable(model, replace(layout, max_positions=None), adapter=NAME, prepare=prepare)
    return replace(made, run=partial(_run_channels, model)) if _channels_first(model) else made


def _channels_first(model: nn.Module) -> bool:
    """Whether the model takes its waveform as [batch, channel, samples] with the sample mask as `padding_mask`
    (the audio-codec convention, which OmniASR follows), not [batch, samples] with an `attention_mask`."""
    return "padding_mask" in generic.forward_parameters(model)


def _run_channels(model: nn.Module, encoded: Encoded) -> Any:
    """Run a channels-first model: the mono waveform [batch, samples] as [batch, 1, samples], its sample mask
    [batch, samples] as `padding_mask`."""
    assert encoded.input_values is not None
    mono = replace(encoded, input_values=encoded.input_values[:, None], sample_mask=None)
    extra = {} if encoded.sample_mask is None else {"padding_mask": encoded.sample_mask}
    return run_model(model, mono, disable_cache=False, extra=extra)


def _feature_encoder(model: nn.Module) -> nn.Conv1d:
    """Return the first convolution of the feature encoder: the module that reads the waveform (its device and
    dtype are the input's; a model built on the meta device keeps `masked_spec_embed` on the CPU)."""
    for module in model.modules():
        if isinstance(module, nn.Conv1d):
            return module
    raise UnsupportedModelError(
        f"{type(model).__name__} has no convolutional feature encoder; {ADAPTERS_HINT} that prepares its input."
    )


def _adapter_off(method: Callable[..., Tensor]) -> dict[str, Any]:
    """Return {"add_adapter": False} where `method` takes it: the positions are the frames the transformer
    reads, before the adapter layers some checkpoints stack after it."""
    try:
        return {"add_adapter": False} if "add_adapter" in inspect.signature(method).parameters else {}
    except (TypeError, ValueError):
        return {}


def _method(model: nn.Module, *names: str) -> Callable[..., Tensor] | None:
    """Return the first of the methods `names` that the model, else its encoder (`get_encoder()`: the Parakeet
    encoder of Canary, Cohere ASR and the RNN-T models), defines: a method of the encoder outranks a later name
    of the model's own (Cohere ASR keeps a `_get_feat_extract_output_lengths` its Parakeet encoder never uses)."""
    getter = getattr(model, "get_encoder", None)
    encoder = getter() if callable(getter) else None
    for name in names:
        for holder in (model, encoder):
            method = getattr(holder, name, None) if holder is not None else None
            if callable(method):
                return method
    return None


def frame_lengths(model: nn.Module, samples: Tensor) -> Tensor:
    """Return the positions [batch] the model makes of `samples` [batch] input steps (long: waveform samples, or
    feature frames for a log-mel encoder), by the model's (or its encoder's) own `_get_subsampling_output_length`
    (Parakeet's convolutional subsampling), else `_get_feat_extract_output_lengths` (the wav2vec2 family; one
    that counts a single length as a Python int, Moonshine's, is asked clip by clip)."""
    method = _method(model, "_get_subsampling_output_length", "_get_feat_extract_output_lengths")
    stack = stacking(model) if method is None else None
    if stack is not None:  # the stacking module zero-pads the last group of frames: ceil(frames / stack)
        return torch.div(samples.long() + stack - 1, stack, rounding_mode="floor")
    if method is None:
        raise UnsupportedModelError(
            f"{type(model).__name__} states no output length of its subsampling; {ADAPTERS_HINT} that prepares its"
            " input."
        )
    options = {} if method.__name__ == "_get_subsampling_output_length" else _adapter_off(method)
    samples = samples.long()
    if isinstance(method(samples[:1], **options), Tensor):
        return method(samples, **options).long()
    return torch.tensor([int(method(int(n), **options)) for n in samples.tolist()], dtype=torch.long)


def frame_mask(model: nn.Module, frames: int, sample_mask: Tensor) -> Tensor:
    """Return the position mask [batch, frames] (1 real, 0 padding) of an input mask [batch, steps], by the
    model's (or its encoder's) own `_get_output_attention_mask`, else `_get_feature_vector_attention_mask`; a
    model with neither (Moonshine, Nemotron 3's stacking encoders) reads the mask as its own code does: every
    stride-th input step's (`strided_mask`)."""
    method = _method(model, "_get_output_attention_mask", "_get_feature_vector_attention_mask")
    if method is None:
        return strided_mask(model, frames, sample_mask)
    if method.__name__ == "_get_output_attention_mask":
        return method(sample_mask.long(), target_length=frames).long()
    return method(frames, sample_mask.long(), **_adapter_off(method)).long()


def stacking(model: nn.Module) -> int | None:
    """Return how many feature frames the model stacks into one position where its input is subsampled by
    stacking (Nemotron 3's audio encoders: a module holding `subsampling_factor` whose `projection` reads that
    many frames of `num_mel_bins` features at once), else None. Such a model counts its positions as
    ceil(frames / stack) (the last group zero-padded) and masks each by its first frame's mask
    (`attention_mask[:, ::stack]`)."""
    mels = getattr(model.config, "num_mel_bins", None)
    for module in model.modules():
        stack, projection = getattr(module, "subsampling_factor", None), getattr(module, "projection", None)
        if (isinstance(stack, int) and stack > 0 and isinstance(projection, nn.Linear) and isinstance(mels, int)
                and projection.in_features == stack * mels):
            return stack
    return None


def strided_mask(model: nn.Module, frames: int, sample_mask: Tensor) -> Tensor:
    """Return the frame mask [batch, frames] a model without a mask function makes of an input mask [batch,
    steps]: the mask of every stride-th step (`attention_mask[..., ::stride][..., :frames]`), the stride its
    stacking (Nemotron 3's encoders, `stacking`), else the product of its convolutions' strides (Moonshine's
    encoder: 64 × 3 × 2 samples for the released models)."""
    stride = stacking(model)
    if stride is None:
        stride = 1
        for module in model.modules():
            if isinstance(module, nn.Conv1d):
                stride *= int(module.stride[0])
    return sample_mask.long()[:, ::stride][:, :frames]


def _squeeze(model: nn.Module) -> int:
    """Return how many feature-encoder frames one transformer position pools (SEW's and SEW-D's
    `squeeze_factor`; 1 for the others)."""
    return int(getattr(model.config, "squeeze_factor", 1) or 1)


def pooled_lengths(model: nn.Module, squeeze: int, samples: Tensor) -> Tensor:
    """Return the transformer positions [batch] SEW makes of `samples` [batch]: the feature encoder's frames
    average-pooled `squeeze` at a time (`nn.AvgPool1d(squeeze, squeeze)`: a partial last group is dropped)."""
    return torch.div(frame_lengths(model, samples), squeeze, rounding_mode="floor")


def pooled_mask(model: nn.Module, squeeze: int, positions: int, sample_mask: Tensor) -> Tensor:
    """Return SEW's position mask [batch, positions] of a sample mask [batch, samples]: the frame mask
    max-pooled `squeeze` at a time as the model pools it (a position is real where any of its frames is)."""
    frames = int(frame_lengths(model, torch.tensor([sample_mask.shape[1]]))[0])
    per_frame = frame_mask(model, frames, sample_mask).float()
    pooled = nn.functional.max_pool1d(per_frame[:, None], kernel_size=squeeze, stride=squeeze)[:, 0]
    return pooled[:, :positions].long()


def probe_samples(model: nn.Module) -> int:
    """Return the probe's input length (waveform samples, or a log-mel encoder's feature frames): the shortest
    power of two that makes `PROBE_FRAMES` positions."""
    samples, squeeze = 1, _squeeze(model)
    while int(frame_lengths(model, torch.tensor([samples]))[0]) < PROBE_FRAMES * squeeze:
        samples *= 2
    return samples


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    """Return the probe's inputs: a zero waveform [1, samples] of a few frames (also on the meta device)."""
    conv = _feature_encoder(model)
    device = conv.weight.device
    values = torch.zeros(1, probe_samples(model), device=device, dtype=conv.weight.dtype)
    channels = _channels_first(model)
    inputs: dict[str, Any] = {"input_values": values[:, None] if channels else values,
                              **decoder_probe(model, device, with_mask)}
    if with_mask:
        inputs["padding_mask" if channels else "attention_mask"] = torch.ones(values.shape, dtype=torch.long,
                                                                               device=device)
    return inputs


def prepare_waveforms(
    processor: Any | None,
    inputs: Any,
    *,
    max_length: int | None = None,
    decoder_inputs: Any | None = None,
    frames: Callable[[Tensor], Tensor],
    frame_mask: Callable[[int, Tensor], Tensor],
    dtype: torch.dtype = torch.float32,
    features: int | None = None,
    encoder_decoder: bool = False,
    decoder_limit: int | None = None,
) -> Encoded:
    """Return the Encoded of audio: input_values [batch, samples] (float, in the model's dtype), the sample
    mask [batch, samples] when the feature extractor returned one, and the positions: the frames [batch, frame]
    after the feature encoder, `audio_{i}`, padding frames masked.

    inputs: raw waveforms [batch, samples] as the model takes them (a float tensor or array), or one clip or a
        list of clips (1-D float arrays or tensors) with the feature extractor `interpret.load` returned, or an
        Encoded made by this function. frames: samples [batch] -> frames [batch]; frame_mask: (frames, sample
        mask [batch, samples]) -> frame mask [batch, frames] (the model's own, `frame_lengths` / `frame_mask`).
    features: for a log-mel encoder, the size of one feature frame: the input is then `input_features` [batch,
        frame, features] (a float tensor or array, or clips with the feature extractor), its frame mask the
        `sample_mask`, and the positions the frames after the model's own subsampling.
    encoder_decoder: the model also has a text decoder (Speech2Text): `decoder_inputs` (text with the
        processor's tokenizer, or token ids) are its side, at most `decoder_limit` positions.
    """
    if max_length is not None:
        raise InputError("max_length does not apply to audio (positions are frames of the waveform); cut the clips.")
    if decoder_inputs is not None and not encoder_decoder:
        raise InputError("decoder inputs do not apply to a speech encoder; drop them.")
    if decoder_inputs is None and encoder_decoder and not isinstance(inputs, Encoded):
        raise InputError("this speech encoder-decoder needs decoder inputs; pass decoder_inputs= (text or token ids).")
    field = "input_values" if features is None else "input_features"
    if isinstance(inputs, Encoded):
        if getattr(inputs, field) is None:
            raise InputError(f"this Encoded has no {field}; a speech encoder needs audio.")
        return inputs
    values, sample_mask = waveforms(processor, inputs) if features is None else feature_frames(processor, inputs, features)
    samples = sample_mask.sum(-1) if sample_mask is not None else torch.full((values.shape[0],), values.shape[1])
    made = frames(samples)
    if int(made.min()) < 1:
        short, unit = int(samples[int(made.argmin())]), "samples" if features is None else "feature frames"
        raise InputError(
            f"a clip of {short} {unit} is too short for one frame of this model's feature encoder; give longer audio."
        )
    total = int(frames(torch.tensor([values.shape[1]]))[0])
    if sample_mask is None:
        mask = torch.ones(values.shape[0], total, dtype=torch.long)
    else:
        mask = frame_mask(total, sample_mask)
    names = [f"audio_{i}" for i in range(total)]
    decoder = decoder_text(processor, decoder_inputs, decoder_limit, values.shape[0]) if encoder_decoder else None
    return Encoded(
        attention_mask=mask,
        tokens=[list(names) for _ in range(values.shape[0])],
        special=mask == 0,
        sample_mask=sample_mask,
        decoder=decoder,
        **{field: values.to(dtype)},
    )


def decoder_probe(model: nn.Module, device: torch.device, with_mask: bool) -> dict[str, Any]:
    """Return the decoder side of a speech encoder-decoder's probe inputs (a few token ids), or {} for an encoder."""
    if not getattr(model.config, "is_encoder_decoder", False):
        return {}
    ids = torch.ones(1, generic.PROBE_DECODER_TOKENS, dtype=torch.long, device=device)
    inputs = {"decoder_input_ids": ids, **generic.cache_off(model)}
    if with_mask:
        inputs["decoder_attention_mask"] = torch.ones_like(ids)
    return inputs


_WHAT = "pass raw audio: a float waveform [batch, samples], or a list of 1-D float clips with the feature extractor"


def waveforms(processor: Any | None, inputs: Any) -> tuple[Tensor, Tensor | None]:
    """Return (input_values [batch, samples] float, sample mask [batch, samples] or None) from a waveform
    tensor or array, or from clips and the feature extractor (padded to the longest clip, at its sampling rate)."""
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError(f"a speech encoder takes audio, not text; {_WHAT} interpret.load returned.")
    if isinstance(inputs, (Tensor, np.ndarray)) and inputs.ndim == 2:
        values = torch.as_tensor(inputs)
        if not values.is_floating_point():
            raise InputError(
                f"the waveform is {values.dtype}, not float; convert integer samples to floats in [-1, 1]."
            )
        if values.shape[0] < 1 or values.shape[1] < 1:
            raise InputError(f"the waveform has shape {tuple(values.shape)}; {_WHAT} interpret.load returned.")
        return values.cpu(), None
    if isinstance(inputs, Tensor) or (isinstance(inputs, np.ndarray) and inputs.ndim != 1):
        raise InputError(
            f"audio of shape {tuple(inputs.shape)} is not understood; {_WHAT} interpret.load returned"
            " (one clip: [1, samples])."
        )
    out = extract(processor, clips(inputs, _WHAT))
    if "input_values" not in out:
        raise InputError(
            f"{type(getattr(processor, 'feature_extractor', processor)).__name__} returned {', '.join(out)}, not"
            " input_values; this model needs a raw-audio"
            " feature extractor (Wav2Vec2FeatureExtractor)."
        )
    values = out["input_values"]
    if values.dim() == 3 and values.shape[1] == 1:  # a channels-first extractor's mono [batch, 1, samples]
        values = values[:, 0]
    mask = out.get("attention_mask", out.get("padding_mask"))
    return values.float(), None if mask is None else mask.long()


_FEATURES = "pass log-mel features [batch, frame, feature] as the model takes them, or a list of 1-D float clips with" \
            " the feature extractor"


def feature_frames(processor: Any | None, inputs: Any, size: int) -> tuple[Tensor, Tensor | None]:
    """Return (input_features [batch, frame, size] float, frame mask [batch, frame] or None) from a features
    tensor or array (every frame real), or from clips and the feature extractor (padded to the longest clip)."""
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError(f"a speech encoder takes audio, not text; {_FEATURES} interpret.load returned.")
    mask = None
    if isinstance(inputs, (Tensor, np.ndarray)) and inputs.ndim == 3:
        values = torch.as_tensor(inputs).cpu()
    elif isinstance(inputs, Tensor) or (isinstance(inputs, np.ndarray) and inputs.ndim != 1):
        raise InputError(f"audio of shape {tuple(inputs.shape)} is not understood; {_FEATURES} interpret.load returned.")
    else:
        out = extract(processor, clips(inputs, _FEATURES))
        values, mask = out.get("input_features"), out.get("attention_mask")
        if values is None or values.dim() != 3:
            raise InputError(
                f"{type(getattr(processor, 'feature_extractor', processor)).__name__} returned {', '.join(out)}, not"
                " input_features [batch, frame, feature]; this model needs its own log-mel feature extractor."
            )
    if values.shape[-1] != size or not values.is_floating_point() or values.shape[0] < 1 or values.shape[1] < 1:
        raise InputError(
            f"the features have shape {tuple(values.shape)} ({values.dtype}); this model takes float"
            f" [batch, frame, {size}]: use its own feature extractor."
        )
    return values.float(), None if mask is None else mask.long()


def clips(inputs: Any, what: str) -> list[np.ndarray]:
    """Return `inputs` (one 1-D clip, or a list of clips: arrays or tensors) as float32 arrays, or say in one
    line what to pass (`what`)."""
    given = [inputs] if isinstance(inputs, np.ndarray) else list(inputs) if isinstance(inputs, (list, tuple)) else None
    if not given:
        raise InputError(f"audio inputs of type {type(inputs).__name__} are not understood; {what} interpret.load returned.")
    arrays = []
    for i, clip in enumerate(given):
        array = to_numpy(clip) if isinstance(clip, Tensor) else np.asarray(clip)
        if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.floating):
            raise InputError(
                f"clip {i} has shape {array.shape} ({array.dtype}); each clip must be a non-empty 1-D float array"
                " (mono samples in [-1, 1])."
            )
        arrays.append(array.astype(np.float32))
    return arrays


def extract(processor: Any | None, arrays: list[np.ndarray]) -> Any:
    """Return what the model's own feature extractor makes of the clips `arrays`, at its sampling rate and padded
    to the longest clip (an extractor of fixed-length inputs pads or cuts to its own length)."""
    extractor = getattr(processor, "feature_extractor", processor)
    if extractor is None or not callable(extractor) or getattr(extractor, "sampling_rate", None) is None:
        raise InputError(
            "raw audio clips need the model's feature extractor; pass the one interpret.load returned, or the"
            " model's input_values as it takes them."
        )
    return extractor(arrays, sampling_rate=extractor.sampling_rate, padding="longest", return_tensors="pt")


ADAPTER = HFAdapter(
    model_types=("wav2vec2", "hubert", "data2vec-audio", "unispeech", "unispeech-sat", "wav2vec2-conformer", "wavlm",
                 "sew", "sew-d", "moonshine", "omniasr_audio", "omniasr_ctc", "speech-encoder-decoder"),
    build=build,
    adds="audio input: raw waveforms, positions the feature encoder's frames (audio_i); the text decoder of"
         " Moonshine and of SpeechEncoderDecoderModel",
)
