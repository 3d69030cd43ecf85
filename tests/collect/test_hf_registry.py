"""Adapter discovery through the `interpret.adapters` entry points: built-in family adapters, plugins,
broken ones, the generic adapter for every other model type, and the one-line answer for a model that
cannot be captured."""

from __future__ import annotations

import textwrap
from importlib import metadata

import pytest
import torch
import transformers
from hf_tiny import FAMILIES, word_tokenizer

import interpret
from interpret.capture.hf import registry
from interpret.capture.hf.adapter import GROUP
from interpret.errors import UnsupportedModelError
from interpret.registration import entry_points
from interpret.runtime.versions import DISTRIBUTION

PLUGIN = '''
from interpret.capture.hf import generic
from interpret.capture.hf.adapter import HFAdapter

ELECTRA = HFAdapter(model_types=("electra",), build=generic.build)
CLAIMS_CLIP = HFAdapter(model_types=("clip",), build=generic.build)
NOT_AN_ADAPTER = object()
'''


def tiny_electra() -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.ElectraConfig(
        vocab_size=len(word_tokenizer()), embedding_size=32, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
    )
    return transformers.ElectraForMaskedLM(config).eval()


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Install fake third-party entry points next to the real ones; forget them afterwards."""
    (tmp_path / "fake_adapters.py").write_text(textwrap.dedent(PLUGIN))
    (tmp_path / "broken_adapters.py").write_text("raise ImportError('needs a missing dependency')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    real = list(metadata.entry_points(group=GROUP))
    fakes = [
        metadata.EntryPoint(name="electra", value="fake_adapters:ELECTRA", group=GROUP),
        metadata.EntryPoint(name="clip_again", value="fake_adapters:CLAIMS_CLIP", group=GROUP),
        metadata.EntryPoint(name="nonsense", value="fake_adapters:NOT_AN_ADAPTER", group=GROUP),
        metadata.EntryPoint(name="broken", value="broken_adapters:ADAPTER", group=GROUP),
    ]

    class FakeMetadata:
        @staticmethod
        def entry_points(group: str) -> list[metadata.EntryPoint]:
            return real + fakes if group == GROUP else []

    monkeypatch.setattr(entry_points, "metadata", FakeMetadata)
    registry.refresh()
    yield registry.entries()
    monkeypatch.undo()
    registry.refresh()


def tiny_mamba() -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=len(word_tokenizer()), hidden_size=32, num_hidden_layers=2, state_size=4)
    return transformers.MambaForCausalLM(config).eval()


def tiny_rwkv() -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.RwkvConfig(vocab_size=len(word_tokenizer()), hidden_size=32, num_hidden_layers=2,
                                     attention_hidden_size=32, intermediate_size=64, context_length=64)
    return transformers.RwkvForCausalLM(config).eval()


def tiny_fsmt() -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    size = len(word_tokenizer())
    config = transformers.FSMTConfig(src_vocab_size=size, tgt_vocab_size=size, d_model=32, encoder_layers=2,
                                     decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                     encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, langs=["en", "de"])
    return transformers.FSMTForConditionalGeneration(config).eval()


def test_built_in_adapters_register_through_entry_points() -> None:
    entries = registry.entries()
    builtins = {name: entry for name, entry in entries.items() if entry.builtin}
    assert set(builtins) == {"deberta", "swin", "whisper", "speech", "spectrogram", "features", "parallel", "dual",
                             "pyramid", "mae", "video", "naflex", "chunked", "packed", "pixtral"}
    assert all(entry.distribution == DISTRIBUTION and not entry.broken for entry in builtins.values())
    assert all(entry.obj.adds for entry in builtins.values())  # each declares what it adds
    served = registry.model_types()
    assert served == {"deberta": "deberta", "deberta-v2": "deberta", "swin": "swin", "swinv2": "swin",
                      "donut-swin": "swin", "maskformer-swin": "swin", "swin2sr": "swin", "whisper": "whisper",
                      **{model_type: "whisper" for model_type in ("qwen2_audio_encoder", "voxtral_encoder",
                                                                  "audioflamingo3_encoder", "moss_transcribe_diarize_audio",
                                                                  "glmasr_encoder")},
                      "segformer": "pyramid", "pvt_v2": "pyramid", "glpn": "pyramid", "vit_mae": "mae",
                      "videomae": "video", "vivit": "video", "vjepa2": "video", "timesformer": "video",
                      "videoprism_vision_model": "video", "pixtral": "pixtral",
                      **{model_type: "naflex" for model_type in ("siglip2_vision_model", "gemma4_vision",
                                                                 "pix2struct_vision_model", "pix2struct")},
                      **{model_type: "chunked" for model_type in ("qwen2_5_omni_audio_encoder",
                                                                  "qwen3_omni_moe_audio_encoder", "qwen3_asr_encoder")},
                      **{model_type: "packed" for model_type in (
                          "qwen2_vl_vision", "qwen3_vl_vision", "qwen3_vl_moe_vision", "qwen3_5_vision",
                          "qwen3_5_moe_vision", "qwen3_omni_moe_vision_encoder", "qwen4_exp_vision", "qwen2_5_vl_vision",
                          "qwen2_5_omni_vision_encoder", "glm4v_vision", "glm4v_moe_vision", "glm_ocr_vision",
                          "glm5_next_vision", "ernie4_5_vl_moe_vision", "exaone4_5_vision", "cohere_compass_vision",
                          "cosmos3_edge_vision", "dots3_note_vision_encoder", "glm_image_vision", "hunyuan_vl_vision",
                          "hy_v4_vl_vision", "kimi_k25_vision", "lfm3_vl_vision", "minimax_m3_vl_vision",
                          "muse_glimmer_vision", "muse_spark_vision", "video_llama_3_vision")},
                      **{model_type: "dual" for model_type in ("clip", "siglip", "siglip2", "altclip", "chinese_clip",
                                                               "clipseg", "metaclip_2", "owlvit", "owlv2", "blip",
                                                               "aimv2", "vision-text-dual-encoder")},
                      "audio-spectrogram-transformer": "spectrogram", "xlm": "parallel", "flaubert": "parallel",
                      **{model_type: "features" for model_type in (
                          "parakeet_ctc", "parakeet_encoder", "parakeet_rnnt", "parakeet_tdt", "lasr_ctc", "lasr_encoder",
                          "nemotron_asr_streaming_encoder", "nemotron_asr_streaming", "nemotron3_5_asr",
                          "nemotron3_diarization_audio", "nemotron3_5_transcribe_asr_audio", "canary",
                          "cohere_asr", "wav2vec2-bert", "speech_to_text")},
                      **{model_type: "speech" for model_type in ("wav2vec2", "hubert", "data2vec-audio", "unispeech",
                                                                 "unispeech-sat", "wav2vec2-conformer", "wavlm", "sew",
                                                                 "sew-d", "moonshine", "omniasr_audio", "omniasr_ctc",
                                                                 "speech-encoder-decoder")}}
    assert not set(FAMILIES) & set(served)  # the families without quirks go to the generic adapter


def test_model_types_without_an_adapter_go_to_the_generic_adapter() -> None:
    model = tiny_electra()
    assert registry.adapter_for(model).name == "generic"
    trace = interpret.collect(model, word_tokenizer(), ["the cat sat", "a dog"])
    assert trace.stack("attn.hook_pattern").shape == (2, 2, 4, 5, 5)
    assert trace.meta.adapter == "generic"


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (tiny_mamba, ["'mamba'", "no attention layers", "no attention to capture"]),
        (tiny_rwkv, ["'rwkv'", "RwkvSelfAttention", "no softmax over keys", "no attention pattern to capture"]),
        # FSMT keeps its states [position, batch, ...]: its attention's scores are not of its input's batch.
        (tiny_fsmt, ["'fsmt'", "own code (Attention)", "input's batch", "interpret.adapters"]),
    ],
    ids=["no-attention", "no-softmax", "own-code-unrecognised"],
)
def test_model_that_cannot_be_captured_gets_one_line_that_says_why(make, fragments) -> None:
    with pytest.raises(UnsupportedModelError) as err:
        interpret.collect(make(), word_tokenizer(), "the cat sat")
    message = str(err.value)
    assert "\n" not in message and all(fragment in message for fragment in fragments), message
    assert "Did you mean" not in message  # a model type is not the user's to change


def test_third_party_adapter_is_used_and_bad_ones_are_listed_broken(plugins) -> None:
    assert plugins["electra"].obj is not None and not plugins["electra"].builtin
    assert "claims model type 'clip'" in plugins["clip_again"].error
    assert "model_types" in plugins["nonsense"].error
    assert "needs a missing dependency" in plugins["broken"].error
    assert registry.model_types()["clip"] == "dual"  # the built-in keeps its model type
    assert registry.adapter_for(tiny_electra()).name == "electra"
    trace = interpret.collect(tiny_electra(), word_tokenizer(), ["the cat sat", "a dog"])
    assert trace.stack("attn.hook_pattern").shape == (2, 2, 4, 5, 5)
    assert trace.meta.model_class == "ElectraForMaskedLM"


def test_unsupported_message_mentions_broken_plugins(plugins) -> None:
    with pytest.raises(UnsupportedModelError, match="broken"):
        interpret.collect(tiny_mamba(), word_tokenizer(), "the cat sat")
