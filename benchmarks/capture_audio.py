"""Benchmark: the cost of capturing true attention patterns from audio models through the `speech`, `features`
and `spectrogram` adapters, at the released models' shapes with random weights (weights do not change the cost)
but --layers layers: wav2vec 2.0 base and WavLM base on raw audio (WavLM's attention runs through torch's
`F.multi_head_attention_forward`, whose body the capture follows in Python), Parakeet CTC (Fast Conformer, 8×
subsampling) on log-mel features, AST on its 1,024 × 128 spectrogram, and Qwen2.5-Omni's audio encoder (1280 wide,
20 heads) on log-mel features cut into chunks of 100 frames, each attending within itself (the `chunked` adapter).

For each model, on the same input (batch 1, --seconds of audio) it times:

    forward               the plain model (SDPA where it has it)
    eager + attentions    the eager model with output_attentions=True (transformers' own patterns; WavLM's
                          are averaged over heads)
    capture all           interpret.collect of every layer's hook_pattern (on the forward's kernel)

and prints the median and minimum of --repeats runs (configurations interleaved round by round), the peak
memory of one run above what was held before it, and the ratios of capture to the two references.

    python benchmarks/capture_audio.py [--models wav2vec2 wavlm parakeet ast qwen2_5_omni] [--seconds 10] [--layers 4]
                                       [--repeats 5] [--device cpu|cuda] [--threads N]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import transformers as T  # noqa: E402
from _bench import capture_rows, capture_table, model_parser, parsed, with_kernel  # noqa: E402


RATE = 16000


def _wav2vec2(layers: int) -> Any:
    return T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(num_hidden_layers=layers, num_labels=2))


def _wavlm(layers: int) -> Any:
    return T.WavLMForSequenceClassification(T.WavLMConfig(num_hidden_layers=layers, num_labels=2))


def _parakeet(layers: int) -> Any:
    return T.ParakeetForCTC(T.ParakeetCTCConfig(encoder_config={"num_hidden_layers": layers}))


def _ast(layers: int) -> Any:
    return T.ASTForAudioClassification(T.ASTConfig(num_hidden_layers=layers, num_labels=2))


def _qwen2_5_omni(layers: int) -> Any:
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniAudioEncoderConfig
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder

    return Qwen2_5OmniAudioEncoder(Qwen2_5OmniAudioEncoderConfig(encoder_layers=layers))


# name -> (builder from a layer count, the keyword of its input)
MODELS: dict[str, tuple[Callable[[int], Any], str]] = {
    "wav2vec2": (_wav2vec2, "input_values"),
    "wavlm": (_wavlm, "input_values"),
    "parakeet": (_parakeet, "input_features"),
    "ast": (_ast, "input_values"),
    "qwen2_5_omni": (_qwen2_5_omni, "input_features"),
}


def make_input(name: str, model: Any, seconds: float) -> torch.Tensor:
    """Return one example: a waveform [1, samples], log-mel features [1, frame, 80] (10 ms frames), or AST's
    fixed spectrogram [1, 1024, 128]."""
    generator = torch.Generator().manual_seed(0)
    if name == "parakeet":
        return torch.randn(1, int(seconds * 100), model.config.encoder_config.num_mel_bins, generator=generator)
    if name == "qwen2_5_omni":  # log-mel features [1, mel, frame] (10 ms frames)
        return torch.randn(1, model.config.num_mel_bins, int(seconds * 100), generator=generator)
    if name == "ast":
        return torch.randn(1, model.config.max_length, model.config.num_mel_bins, generator=generator)
    return 0.1 * torch.randn(1, int(seconds * RATE), generator=generator)


def built(name: str, kernel: str, layers: int, device: str) -> Any:
    torch.manual_seed(0)
    return with_kernel(MODELS[name][0](layers), kernel, device)


def main() -> int:
    parser = model_parser(__doc__, list(MODELS))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--layers", type=int, default=4)
    args = parsed(parser)
    rows = []
    for name in args.models:
        fast, eager = built(name, "sdpa", args.layers, args.device), built(name, "eager", args.layers, args.device)
        values = make_input(name, fast, args.seconds).to(args.device)
        if name == "qwen2_5_omni":  # the encoder takes the clip's frames joined with its length (`chunked`)
            from interpret.capture.hf import chunked

            inputs = chunked.encoder_of(fast).inputs(values)
            rows += capture_rows(name, fast, eager, inputs, args.repeats, args.device, values)
            continue
        rows += capture_rows(name, fast, eager, {MODELS[name][1]: values}, args.repeats, args.device)
    title = f"audio capture: batch 1, {args.seconds:g} s of audio (AST: its fixed 1024 frames), {args.layers} layers"
    print(capture_table(title, rows, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
