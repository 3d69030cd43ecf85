"""Benchmark: the cost of capturing true attention patterns from audio models through the `speech`, `features`
and `spectrogram` adapters, at the released models' shapes with random weights (weights do not change the cost)
but --layers layers: wav2vec 2.0 base and WavLM base on raw audio (WavLM's attention runs through torch's
`F.multi_head_attention_forward`, whose body the capture follows in Python), Parakeet CTC (Fast Conformer, 8×
subsampling) on log-mel features, and AST on its 1,024 × 128 spectrogram.

For each model, on the same input (batch 1, --seconds of audio) it times:

    forward               the plain model (SDPA where it has it)
    eager + attentions    the eager model with output_attentions=True (transformers' own patterns; WavLM's
                          are averaged over heads)
    capture all           interpret.collect of every layer's hook_pattern (on the forward's kernel)

and prints the median and minimum of --repeats runs (configurations interleaved round by round), the peak
memory of one run above what was held before it, and the ratios of capture to the two references.

    python benchmarks/capture_audio.py [--models wav2vec2 wavlm parakeet ast] [--seconds 10] [--layers 4]
                                       [--repeats 5] [--device cpu|cuda] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import transformers as T  # noqa: E402
from _bench import peak_bytes, table, timings  # noqa: E402

import interpret  # noqa: E402

RATE = 16000


def _wav2vec2(layers: int) -> Any:
    return T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(num_hidden_layers=layers, num_labels=2))


def _wavlm(layers: int) -> Any:
    return T.WavLMForSequenceClassification(T.WavLMConfig(num_hidden_layers=layers, num_labels=2))


def _parakeet(layers: int) -> Any:
    return T.ParakeetForCTC(T.ParakeetCTCConfig(encoder_config={"num_hidden_layers": layers}))


def _ast(layers: int) -> Any:
    return T.ASTForAudioClassification(T.ASTConfig(num_hidden_layers=layers, num_labels=2))


# name -> (builder from a layer count, the keyword of its input)
MODELS: dict[str, tuple[Callable[[int], Any], str]] = {
    "wav2vec2": (_wav2vec2, "input_values"),
    "wavlm": (_wavlm, "input_values"),
    "parakeet": (_parakeet, "input_features"),
    "ast": (_ast, "input_values"),
}


def make_input(name: str, model: Any, seconds: float) -> torch.Tensor:
    """Return one example: a waveform [1, samples], log-mel features [1, frame, 80] (10 ms frames), or AST's
    fixed spectrogram [1, 1024, 128]."""
    generator = torch.Generator().manual_seed(0)
    if name == "parakeet":
        return torch.randn(1, int(seconds * 100), model.config.encoder_config.num_mel_bins, generator=generator)
    if name == "ast":
        return torch.randn(1, model.config.max_length, model.config.num_mel_bins, generator=generator)
    return 0.1 * torch.randn(1, int(seconds * RATE), generator=generator)


def built(name: str, kernel: str, layers: int, device: str) -> Any:
    torch.manual_seed(0)
    model = MODELS[name][0](layers).eval()
    model.config._attn_implementation = kernel if model._supports_sdpa or kernel == "eager" else "eager"
    return model.to(device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for name in args.models:
        fast, eager = built(name, "sdpa", args.layers, args.device), built(name, "eager", args.layers, args.device)
        values = make_input(name, fast, args.seconds).to(args.device)
        keyword = MODELS[name][1]

        def forward(model: Any = fast) -> None:
            with torch.no_grad():
                model(**{keyword: values})

        def attentions() -> None:
            with torch.no_grad():
                eager(**{keyword: values}, output_attentions=True)

        def capture() -> None:
            interpret.collect(fast, None, values)

        runs = {"forward": forward, "eager + attentions": attentions, "capture all": capture}
        samples: dict[str, list[float]] = {key: [] for key in runs}
        for key, run in runs.items():  # warm-up (the capture's first call probes the model)
            run()
        for _ in range(args.repeats):
            for key, run in runs.items():
                samples[key] += timings(run, repeat=1, warmup=0, device=args.device)
        positions = interpret.collect(fast, None, values).encoded.pos
        medians = {key: statistics.median(times) for key, times in samples.items()}
        for key in runs:
            peak = peak_bytes(runs[key], device=args.device)
            rows.append([name, positions, key, f"{medians[key] * 1e3:.1f}", f"{min(samples[key]) * 1e3:.1f}",
                         "-" if peak is None else f"{peak / 2**20:.0f}",
                         f"{medians[key] / medians['forward']:.2f}",
                         f"{medians[key] / medians['eager + attentions']:.2f}"])
    print(f"audio capture: batch 1, {args.seconds:g} s of audio (AST: its fixed 1024 frames), {args.layers} layers,"
          f" {args.device}, {torch.get_num_threads()} threads, median and min of {args.repeats}")
    print(table(["model", "positions", "configuration", "median ms", "min ms", "peak MiB", "× forward",
                 "× eager+attn"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
