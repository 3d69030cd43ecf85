"""Adapter for the Qwen audio encoders that cut log-mel features into chunks: Qwen2.5-Omni's, Qwen3-Omni's and
Qwen3-ASR's.

What it adds over the generic adapter: the input, and a batch axis. These encoders take every clip's log-mel
frames joined into one tensor [mel, frames of all clips] with `feature_lens` [clips], cut each clip into chunks of
2 × `n_window` frames, run their convolutions per chunk (Qwen2.5-Omni: one stride-2 convolution; Qwen3-Omni and
Qwen3-ASR: three, and a 13-position chunk), restart the position embeddings in every chunk, and join the chunks'
frames into one sequence [positions of all clips, d_model] with no batch axis (Qwen3-ASR takes the batch [batch,
mel, frame] padded to whole chunks with its frame mask instead, and joins the real frames the same way). Each block's attention runs its
kernel once per window of that sequence (`cu_seqlens`: a chunk for Qwen2.5-Omni, `n_window_infer` frames for the
Qwen3 encoders), never across clips. The positions of a clip are its frames after the convolutions, named
`audio_0`, `audio_1`, ... (the model's own `_get_feat_extract_output_lengths` counts them).

Input: `Encoded.input_features` [batch, mel, frame], every clip of the batch as long (real frames only: the feature
extractor's padding is cut off, and clips of different lengths are refused: explain them one at a time); raw audio
is read by the model's feature extractor, or features are given as such a tensor. The run joins the clips and
passes their lengths.

Capture: the same transforms as the packed vision towers (`packed.unpacked`): the probe reads [positions, ...]
tensors as one clip's, a hidden tensor [batch × pos, ...] is unflattened to [batch, pos, ...], and a block's
per-window kernel calls are placed on each clip's [pos, pos] diagonal (a key outside the query's window:
probability 0, score the float32 minimum). Those are tensors the model never reads, so a capture with gradients
is refused; the methods that need none (rollout, attention entropy) run.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter
from interpret.capture.hf.media import audio_side, feature_extractor
from interpret.capture.hf.packed import unpacked
from interpret.capture.sites import Capturable
from interpret.errors import CaptureError, InputError
from interpret.inputs import Encoded

NAME = "chunked"
_PROBE_FRAMES = 32  # one window of every encoder: a few positions after its convolutions


@dataclass(frozen=True)
class AudioEncoder:
    """How an encoder reads its features: mel bins, frames per chunk (2 × n_window), the name messages give it,
    and its positions per clip of a given number of frames."""

    mels: int
    chunk: int
    family: str
    model: nn.Module
    masked: bool = False

    def inputs(self, features: Tensor) -> dict[str, Tensor]:
        """Return the encoder's keyword arguments for features [batch, mel, frame]: the clips joined along the
        frames [mel, batch × frame] with their lengths [batch]; or, for an encoder that takes a batch padded to
        whole chunks with its frame mask (Qwen3-ASR), those [batch, mel, chunks × chunk] and [batch, chunks × chunk]."""
        batch, mels, frames = features.shape
        if self.masked:
            padded = -(-frames // self.chunk) * self.chunk
            mask = torch.zeros(batch, padded, dtype=torch.long, device=features.device)
            mask[:, :frames] = 1
            return {"input_features": nn.functional.pad(features, (0, padded - frames)), "input_features_mask": mask}
        return {"input_features": features.permute(1, 0, 2).reshape(mels, batch * frames),
                "feature_lens": torch.full((batch,), frames, dtype=torch.long, device=features.device)}

    def positions(self, frames: int) -> int:
        """Return the positions (frames after the convolutions) of one clip of `frames` feature frames, as the
        model's own `_get_feat_extract_output_lengths` counts them."""
        lengths = torch.tensor([frames])
        own = getattr(self.model, "_get_feat_extract_output_lengths", None)
        if own is not None:  # Qwen2.5-Omni: (after the convolution, after the pooling that follows the blocks)
            counted = own(lengths)
            counted = counted[0] if isinstance(counted, tuple) else counted
        else:  # the Qwen3 encoders: a function of their modeling module, given the chunk's half
            counted = sys.modules[type(self.model).__module__]._get_feat_extract_output_lengths(lengths, self.chunk // 2)
        return int(counted[0])


def encoder_of(model: nn.Module) -> AudioEncoder:
    """Return how `model` reads its features, from its config."""
    config = model.config
    masked = "input_features_mask" in generic.forward_parameters(model)
    return AudioEncoder(int(config.num_mel_bins), 2 * int(config.n_window), type(model).__name__, model, masked)


def build(model: nn.Module, processor: Any | None) -> Capturable:
    """Return the Capturable of a chunked audio encoder: one position per frame after its convolutions."""
    encoder = encoder_of(model)
    layout = generic.layout_of(model, inputs=_probe_inputs, packed=True)  # probed once per model
    base = generic.capturable(model, layout, adapter=NAME, prepare=partial(prepare, encoder,
                                                                             processor_default=processor))
    return unpacked(base, run=partial(_run, model, encoder))


def prepare(
    encoder: AudioEncoder, processor: Any | None, inputs: Any = None, *, max_length: int | None = None,
    decoder_inputs: Any | None = None, processor_default: Any | None = None,
) -> Encoded:
    """Return the Encoded of audio: input_features [batch, mel, frame], positions `audio_{i}`. `inputs`: such a
    tensor, an Encoded, or raw audio clips read by the feature extractor."""
    if decoder_inputs is not None or max_length is not None:
        raise InputError(f"{encoder.family} is an audio encoder alone: drop decoder_inputs= and max_length=.")
    if isinstance(inputs, Encoded):
        if inputs.input_features is None or inputs.input_features.dim() != 3:
            raise InputError(f"this Encoded has no input_features; {encoder.family} needs audio features or raw audio.")
        return inputs
    if isinstance(inputs, str) or (isinstance(inputs, Sequence) and any(isinstance(x, str) for x in inputs)):
        raise InputError(f"{encoder.family} takes audio, not text; pass log-mel features [batch, {encoder.mels},"
                         " frame] or raw audio arrays.")
    features = inputs if isinstance(inputs, Tensor) else _extracted(processor or processor_default, inputs, encoder)
    if features.dim() != 3 or features.shape[1] != encoder.mels or not features.is_floating_point():
        raise InputError(f"audio features have shape {tuple(features.shape)} ({features.dtype}); {encoder.family}"
                         f" takes float [batch, {encoder.mels}, frame].")
    return audio_side(features, encoder.positions(int(features.shape[-1])))


def _extracted(processor: Any | None, clips: Any, encoder: AudioEncoder) -> Tensor:
    """Return log-mel features [batch, mel, frame] of raw audio clips read by the feature extractor (the
    processor's, or the processor itself), its padding cut off; clips of different lengths are refused."""
    extractor = feature_extractor(processor, encoder.family, f"[batch, {encoder.mels}, frame]")
    clips = list(clips) if isinstance(clips, (list, tuple)) else [clips]
    made = extractor(clips, sampling_rate=getattr(extractor, "sampling_rate", 16000), return_attention_mask=True,
                     return_tensors="pt")
    features, mask = made["input_features"], made.get("attention_mask")
    if mask is None:
        return features
    lengths = sorted({int(length) for length in mask.sum(-1).tolist()})
    if len(lengths) > 1:
        raise InputError(f"the clips make {len(lengths)} different numbers of feature frames ({', '.join(map(str, lengths))});"
                         " one batch needs one length: explain clips of different lengths one at a time.")
    return features[..., : lengths[0]]


def _probe_inputs(model: nn.Module, with_mask: bool) -> dict[str, Any]:
    """Return the probe's input: one clip of `_PROBE_FRAMES` zero frames (within one window), its length or frame
    mask on the CPU (the encoder reads its values to cut the chunks)."""
    encoder = encoder_of(model)
    parameter = next(model.parameters())
    features = torch.zeros(1, encoder.mels, min(_PROBE_FRAMES, encoder.chunk), dtype=parameter.dtype)
    made = encoder.inputs(features)
    made["input_features"] = made["input_features"].to(parameter.device)
    return made


def _run(model: nn.Module, encoder: AudioEncoder, encoded: Encoded) -> Any:
    """Run the encoder on the Encoded's clips joined into one sequence (or padded to whole chunks), as it takes them."""
    if encoded.input_features is None or encoded.input_features.dim() != 3:
        raise CaptureError("a chunked audio encoder runs on input_features [batch, mel, frame].")
    return model(**encoder.inputs(encoded.input_features), return_dict=True)


ADAPTER = HFAdapter(
    model_types=("qwen2_5_omni_audio_encoder", "qwen3_omni_moe_audio_encoder", "qwen3_asr_encoder"),
    build=build,
    adds="audio cut into chunks: log-mel features [batch, mel, frame] joined into one sequence with their lengths,"
         " positions the frames after the convolutions (audio_i); per-window kernel calls gathered into a batch",
)
