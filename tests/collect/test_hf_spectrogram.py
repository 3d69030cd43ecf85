"""The Audio Spectrogram Transformer through the `spectrogram` adapter: a log-mel spectrogram [batch, frame, mel]
(or raw clips read by its own feature extractor) cut into patches, positions `[CLS]`, `[DIST]` and
`patch_{frequency}_{time}`.

References are independent of the capture: the eager model's own `output_attentions`; the model's own patch
embedding, whose output at the position named `patch_{f}_{t}` must depend on exactly the spectrogram's window of
frequency patch f and time patch t; the feature extractor called directly.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from click.testing import CliRunner
from hf_tiny import SAMPLING_RATE, audio_clips

import interpret
from interpret.capture.api import capturable_for
from interpret.capture.hf import spectrogram
from interpret.cli.main import cli
from interpret.errors import InputError

TIGHT = 1e-6
FRAMES, MELS, PATCH, F_STRIDE, T_STRIDE = 32, 16, 8, 8, 6  # a 2 × 5 grid of overlapping patches
GRID = ((MELS - PATCH) // F_STRIDE + 1, (FRAMES - PATCH) // T_STRIDE + 1)


def _config() -> transformers.ASTConfig:
    return transformers.ASTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                  patch_size=PATCH, frequency_stride=F_STRIDE, time_stride=T_STRIDE, max_length=FRAMES,
                                  num_mel_bins=MELS, num_labels=3)


def _model(kernel: str = "sdpa") -> transformers.ASTForAudioClassification:
    torch.manual_seed(0)
    config = _config()
    config._attn_implementation = kernel
    return transformers.ASTForAudioClassification(config).eval()


def _extractor() -> transformers.ASTFeatureExtractor:
    return transformers.ASTFeatureExtractor(num_mel_bins=MELS, max_length=FRAMES, sampling_rate=SAMPLING_RATE)


def _clips() -> list[np.ndarray]:
    return audio_clips((4000, 2500))  # 0.25 s and 0.16 s: padded (and normalised) by the extractor to 32 frames


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("given", ["clips", "spectrogram"])
def test_patterns_equal_the_eager_output_attentions_and_the_logits_are_untouched(kernel: str, given: str) -> None:
    model = _model(kernel)
    values = _extractor()(_clips(), sampling_rate=SAMPLING_RATE, return_tensors="pt")["input_values"]
    inputs = _clips() if given == "clips" else values
    trace = interpret.collect(model, _extractor() if given == "clips" else None, inputs, names="*")
    assert torch.equal(trace.encoded.input_values, values)
    eager = _model("eager")
    with torch.no_grad():
        reference = eager(input_values=values, output_attentions=True)
        plain = model(input_values=values)
    assert torch.equal(trace.output.logits, plain.logits)
    assert trace.meta.n_layers == len(reference.attentions) == 2
    for layer, attention in enumerate(reference.attentions):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention, atol=TIGHT, rtol=0)
    assert trace.meta.attention == ("eager" if kernel == "eager" else "recomputed")


def test_positions_are_the_two_tokens_then_the_patches_frequency_band_by_band() -> None:
    model = _model()
    trace = interpret.collect(model, _extractor(), _clips())
    names = trace.encoded.tokens[0]
    assert names[:2] == ["[CLS]", "[DIST]"] and len(names) == 2 + GRID[0] * GRID[1]
    assert names[2:] == [f"patch_{f}_{t}" for f in range(GRID[0]) for t in range(GRID[1])]
    assert trace.encoded.special[:, :2].all() and not trace.encoded.special[:, 2:].any()
    assert trace.encoded.attention_mask.all()  # the extractor pads with silence the model reads: no padding
    assert spectrogram.patch_grid(model) == GRID

    # The model's own patch embedding at `patch_{f}_{t}` reads exactly that window of the spectrogram.
    embed = model.audio_spectrogram_transformer.embeddings.patch_embeddings
    values = torch.randn(1, FRAMES, MELS, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        base = embed(values)[0]  # [patches, hidden]
    for f, t in [(0, 0), (1, 2), (1, 4)]:
        index = names.index(f"patch_{f}_{t}") - 2
        window = torch.zeros_like(values, dtype=torch.bool)
        window[0, t * T_STRIDE:t * T_STRIDE + PATCH, f * F_STRIDE:f * F_STRIDE + PATCH] = True
        with torch.no_grad():
            outside = embed(values.masked_fill(~window, 5.0))[0]
            inside = embed(values.masked_fill(window, 5.0))[0]
        torch.testing.assert_close(outside[index], base[index], atol=1e-5, rtol=0)
        assert (inside[index] - base[index]).abs().max() > 1e-2


def test_rollout_a_report_and_the_cli_listing(tmp_path, monkeypatch) -> None:
    model = _model()
    trace = interpret.collect(model, _extractor(), _clips())
    rollout = interpret.analyze(trace, "rollout")["readout"]
    assert rollout.shape == (2, 2 + GRID[0] * GRID[1]) and np.isfinite(rollout).all() and (rollout >= 0).all()
    report = interpret.explain(model, _extractor(), _clips(), analyzers=["rollout", "attention_entropy"])
    path = tmp_path / "ast.html"
    report.render(path)
    html = path.read_text(encoding="utf-8")
    assert "[DIST]" in html and f"patch_{GRID[0] - 1}_{GRID[1] - 1}" in html
    assert report.evidence is None and "this model reads pixels or audio" in html

    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["models", "audio-spectrogram-transformer", "--format", "json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["status"], row["adapter"], row["kind"]) == ("supported", "spectrogram", "encoder")


def test_a_saved_model_loads_with_its_extractor_and_explains_clips(tmp_path) -> None:
    directory = tmp_path / "ast"
    _model("eager").save_pretrained(directory)
    _extractor().save_pretrained(directory)
    model, extractor = interpret.load(directory, device="cpu")
    assert isinstance(extractor, transformers.ASTFeatureExtractor) and extractor.max_length == FRAMES
    assert capturable_for(model, extractor).adapter == "spectrogram"
    trace = interpret.collect(model, extractor, _clips())
    reference = _model("eager")
    with torch.no_grad():
        expected = reference(input_values=trace.encoded.input_values, output_attentions=True).attentions
    for layer, attention in enumerate(expected):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention, atol=TIGHT, rtol=0)


def test_the_probe_runs_on_the_meta_device() -> None:
    with torch.device("meta"):
        model = transformers.ASTModel(transformers.ASTConfig()).eval()  # the released shape: 1024 frames, 128 mels
    capturable = capturable_for(model)
    assert capturable.adapter == "spectrogram" and capturable.n_layers == 12
    assert spectrogram.patch_grid(model) == (12, 101)  # 1,212 patches and the two tokens


@pytest.mark.parametrize(("inputs", "processor", "match"), [
    ("hello", True, "takes audio, not text"),
    (torch.zeros(2, FRAMES, MELS + 1), False, rf"shape \(2, {FRAMES}, {MELS + 1}\).*\[batch, {FRAMES}, {MELS}\]"),
    (torch.zeros(2, FRAMES, MELS, dtype=torch.int64), False, "takes float"),
    (torch.zeros(2, 400), True, r"shape \(2, 400\) is not understood"),
    ([np.zeros((2, 400), dtype=np.float32)], True, "1-D float array"),
    ([np.zeros(400, dtype=np.float32)], False, "need the model's feature extractor"),
])
def test_bad_audio_is_refused_in_one_line(inputs, processor, match) -> None:
    with pytest.raises(InputError, match=match) as err:
        interpret.collect(_model(), _extractor() if processor else None, inputs)
    assert "\n" not in str(err.value)


def test_an_extractor_of_another_length_and_text_only_options_are_refused() -> None:
    other = transformers.ASTFeatureExtractor(num_mel_bins=MELS, max_length=FRAMES * 2, sampling_rate=SAMPLING_RATE)
    with pytest.raises(InputError, match=rf"\[batch, {FRAMES}, {MELS}\].*its own feature extractor"):
        interpret.collect(_model(), other, _clips())
    with pytest.raises(InputError, match="max_length does not apply to AST"):
        interpret.collect(_model(), _extractor(), _clips(), max_length=4)
    with pytest.raises(InputError, match="decoder inputs do not apply"):
        interpret.collect(_model(), _extractor(), _clips(), decoder_inputs=["a"])
