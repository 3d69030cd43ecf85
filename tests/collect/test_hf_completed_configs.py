"""Model types whose default config in transformers leaves a size unset that its own model needs (Ministral's and
HunYuan's `head_dim`, Nemotron's `num_key_value_heads`, ESM's `vocab_size`, Dots1's expert counts; DeepSeek-V2's
`num_experts_per_tok`, Step 3.5's `sliding_window` and DBRX's `clip_qkv`, which only its forward pass reads) or lacks
an attribute it reads (T5Gemma 2's `dropout_rate`, DBRX's `rope_theta`), or chooses no language for a model with
an adapter per language (X-MOD's `default_language`) or a map of image tokens its model reads when it is built
(Chameleon's and Emu3's `vocabulary_map`), or leaves unset the multimodal RoPE sections its model falls back on
(GLM-4V's [8, 12, 12] do not split its default config's 64 rotary frequencies; HunYuan-VL's model has no fallback):
`interpret models` probes them with those
sizes set as checkpoints set them, says so in the row (`completed`), and a tiny model of each, loaded with SDPA, is
captured equal to the eager model's own `output_attentions`."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers as T
from hf_tiny import TEXTS, eager_copy, eager_patterns, model_inputs, no_cache, word_tokenizer
from transformers.models.t5gemma2.modeling_t5gemma2 import T5Gemma2TextEncoder

import interpret
from interpret.capture.hf import catalog
from interpret.errors import ConfigError

RECOMPUTED = 1e-5  # under SDPA the pattern is recomputed from q and k in float32 (the bound)
_SIZES = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "max_position_embeddings": 64, "pad_token_id": 0}


def _built(config: Any, model_class: Any) -> Any:
    torch.manual_seed(0)
    if model_class is T5Gemma2TextEncoder:
        config.dropout_rate = 0.0  # what the composite T5Gemma 2 config gives its text config, and the encoder reads
    config._attn_implementation = "sdpa"
    return model_class(config).eval()


# A tiny image tokenizer (VQ-VAE) for the models that build one; the text alone never runs it.
_VQ = {"embed_dim": 8, "num_embeddings": 16, "base_channels": 32, "channel_multiplier": [1], "num_res_blocks": 1,
       "latent_channels": 8, "attn_resolutions": []}


# A small vision tower for the vision-language models; the text alone never runs it.
_VISION = {"hidden_size": 32, "depth": 1, "num_heads": 4, "intermediate_size": 64, "out_hidden_size": 32, "patch_size": 4,
           "spatial_merge_size": 2}


def _mrope(sections: list[int], partial: float = 1.0) -> dict[str, Any]:
    """Rotary parameters with multimodal RoPE `sections` (t, h, w) adding up to the rotary frequencies (head 8)."""
    return {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": partial, "mrope_section": sections}


def _with_language(model: Any, language: str) -> Any:
    model.set_default_language(language)
    return model


MODELS = {
    "ministral": lambda vocab: _built(T.MinistralConfig(vocab_size=vocab, **_SIZES, num_key_value_heads=2, head_dim=8,
                                                        sliding_window=4), T.MinistralModel),
    "nemotron": lambda vocab: _built(T.NemotronConfig(vocab_size=vocab, **_SIZES, num_key_value_heads=2),
                                     T.NemotronModel),
    "hunyuan_v1_dense": lambda vocab: _built(T.HunYuanDenseV1Config(vocab_size=vocab, **_SIZES, num_key_value_heads=2,
                                                                    head_dim=8), T.HunYuanDenseV1Model),
    "esm": lambda vocab: _built(T.EsmConfig(vocab_size=vocab, **_SIZES, position_embedding_type="rotary"),
                                T.EsmModel),
    "dots1": lambda vocab: _built(T.Dots1Config(vocab_size=vocab, **_SIZES, num_key_value_heads=2, n_routed_experts=4,
                                                num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=16,
                                                first_k_dense_replace=1), T.Dots1Model),
    "deepseek_v2": lambda vocab: _built(T.DeepseekV2Config(
        vocab_size=vocab, **_SIZES, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        moe_intermediate_size=16, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=4,
        qk_nope_head_dim=4, v_head_dim=8), T.DeepseekV2Model),
    "dbrx": lambda vocab: _built(T.DbrxConfig(
        vocab_size=vocab, d_model=32, n_heads=4, n_layers=2, max_seq_len=64, pad_token_id=0,
        attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
        ffn_config={"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2}), T.DbrxModel),
    "step3p5": lambda vocab: _built(T.Step3p7TextConfig(
        vocab_size=vocab, **_SIZES, num_key_value_heads=2, head_dim=8, sliding_window=4, n_routed_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, layer_types=["full_attention", "sliding_attention"]),
        T.Step3p7TextModel),
    "xmod": lambda vocab: _with_language(_built(T.XmodConfig(vocab_size=vocab, **_SIZES, languages=("en_XX", "de_DE")),
                                                T.XmodModel), "de_DE"),
    "chameleon": lambda vocab: _built(T.ChameleonConfig(vocab_size=vocab, **_SIZES, num_key_value_heads=2,
                                                        vocabulary_map={}, vq_config=_VQ), T.ChameleonModel),
    "emu3": lambda vocab: _built(T.Emu3Config(
        text_config={"vocab_size": vocab, **_SIZES, "num_key_value_heads": 2}, vocabulary_map={},
        vq_config={**_VQ, "codebook_size": 16, "double_latent": False}), T.Emu3Model),
    "glm4v": lambda vocab: _built(T.Glm4vConfig(text_config={"vocab_size": vocab, **_SIZES, "num_key_value_heads": 2,
                                                             "rope_parameters": _mrope([1, 1, 0], partial=0.5)},
                                                vision_config=_VISION), T.Glm4vModel),
    "glm4v_moe": lambda vocab: _built(T.Glm4vMoeConfig(
        text_config={"vocab_size": vocab, **_SIZES, "num_key_value_heads": 2, "head_dim": 8, "n_routed_experts": 4,
                     "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 16,
                     "first_k_dense_replace": 1, "rope_parameters": _mrope([1, 1, 0], partial=0.5)},
        vision_config=_VISION), T.Glm4vMoeModel),
    "hunyuan_vl": lambda vocab: _built(T.HunYuanVLConfig(
        text_config={"vocab_size": vocab, **_SIZES, "num_key_value_heads": 2, "head_dim": 8,
                     "rope_parameters": _mrope([2, 1, 1])},
        vision_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 64,
                       "out_hidden_size": 32, "patch_size": 4}), T.HunYuanVLModel),
    "t5gemma2_text": lambda vocab: _built(T.T5Gemma2TextConfig(vocab_size=vocab, **_SIZES, num_key_value_heads=2,
                                                               head_dim=8, query_pre_attn_scalar=8, sliding_window=4),
                                          T5Gemma2TextEncoder),
}
COMPLETED = {
    "ministral": ("head_dim = hidden_size // num_attention_heads",),
    "nemotron": ("num_key_value_heads = num_attention_heads",),
    "hunyuan_v1_dense": ("head_dim = hidden_size // num_attention_heads",),
    "esm": ("vocab_size = 64", "pad_token_id = 0"),
    "dots1": ("n_routed_experts = 4", "num_experts_per_tok = 2", "n_shared_experts = 1"),
    "t5gemma2_text": ("dropout_rate = 0.0",),
    "t5gemma2_encoder": ("text_config.dropout_rate = 0.0",),
    "deepseek_v2": ("num_experts_per_tok = 2",),  # the default config builds; its probe pass reads the unset size
    "xmod": ("default_language = languages[0]",),
    "chameleon": ("vocabulary_map = {} (no image tokens: text alone)",),
    "emu3": ("vocabulary_map = {} (no image tokens: text alone)",),
    "glm4v": (f"text_config.rope_parameters.mrope_section = {catalog._MROPE}",),
    "glm4v_moe": (f"text_config.rope_parameters.mrope_section = {catalog._MROPE}",),
    "hunyuan_vl": ("text_config.head_dim = hidden_size // num_attention_heads",
                   f"text_config.rope_parameters.mrope_section = {catalog._MROPE}"),
}
# Completed, these default configs build and run until their experts' routing reads a value the meta device does
# not hold, and they are too large for the CPU probe: a checkpoint is probed on its own weights.
TOO_LARGE = {
    "dbrx": ("attn_config.clip_qkv = 8.0", "attn_config.rope_theta = 10000.0"),
    "step3p5": ("sliding_window = 4096",),
    "step3p7": ("text_config.sliding_window = 4096",),
}


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_a_tiny_model_is_captured_equal_to_eager(model_type: str) -> None:
    tokenizer = word_tokenizer()
    model = MODELS[model_type](len(tokenizer))
    trace = interpret.collect(model, tokenizer, TEXTS[:2])
    assert trace.meta.attention == "recomputed"
    with torch.no_grad():
        plain = model(**model_inputs(trace.encoded), **no_cache(model))
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    reference = eager_patterns(eager_copy(model), trace.encoded)
    assert len(reference) == trace.meta.n_layers == 2
    for hook, expected in reference.items():
        torch.testing.assert_close(trace[hook], expected, atol=RECOMPUTED, rtol=0)


@pytest.mark.parametrize("model_type", sorted(COMPLETED))
def test_the_catalog_completes_the_default_config_and_says_so(model_type: str) -> None:
    row = catalog.describe(model_type)
    assert (row.status, row.adapter, row.completed) == ("supported", "generic", COMPLETED[model_type]), row
    assert any(name.endswith("attn.hook_pattern") for name in row.offered)


@pytest.mark.parametrize("model_type", sorted(TOO_LARGE))
def test_a_completed_config_too_large_for_the_cpu_probe_says_so(model_type: str) -> None:
    row = catalog.describe(model_type)
    assert (row.status, row.completed) == ("unknown", TOO_LARGE[model_type]), row
    assert "cannot be called on meta tensors" in row.reason and "exceed the CPU probe's 1B" in row.reason, row.reason


# Completed, these default configs build and probe, and reach the refusal a checkpoint of their type gets: the
# time-series transformers forecast from past values (no token ids, no pixels); Bamba's one attention layer among
# Mamba layers is a hybrid. As they are, transformers cannot build the first, nor run the second's forward.
REFUSED = {
    "autoformer": (("prediction_length = 24", "context_length = prediction_length"), "takes 'past_values'"),
    "informer": (("prediction_length = 24", "context_length = prediction_length"), "takes 'past_values'"),
    "time_series_transformer": (("prediction_length = 24", "context_length = prediction_length"),
                                "takes 'past_values'"),
    "bamba": (("attn_layer_indices = [num_hidden_layers // 2]",), "has attention in only 1 of the 32 blocks"),
}


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_a_completed_config_reaches_the_refusal_of_its_type(model_type: str) -> None:
    completed, reason = REFUSED[model_type]
    row = catalog.describe(model_type)
    assert (row.status, row.completed) == ("unsupported", completed), row
    assert reason in row.reason, row.reason


def test_a_model_with_an_adapter_per_language_and_none_chosen_is_refused_saying_how_to_choose() -> None:
    tokenizer = word_tokenizer()
    model = _built(T.XmodConfig(vocab_size=len(tokenizer), **_SIZES, languages=("en_XX", "de_DE")), T.XmodModel)
    with pytest.raises(ConfigError, match=r"^XmodModel runs a different adapter per language and none is chosen: call"
                       r" model.set_default_language\(LANGUAGE\) with one of en_XX, de_DE before capturing it.$"):
        interpret.collect(model, tokenizer, TEXTS[:1])


def test_a_default_config_that_builds_as_it_is_is_not_completed() -> None:
    assert catalog.describe("llama").completed == ()


def test_interpret_models_says_what_it_set(tmp_path, monkeypatch) -> None:
    from click.testing import CliRunner

    from interpret.cli.main import cli

    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path))
    shown = CliRunner().invoke(cli, ["models", "ministral"], catch_exceptions=False)
    assert shown.exit_code == 0
    assert ("ministral (MinistralModel): supported\n  adapter: generic   kind: decoder\n  transformers' default config"
            " leaves sizes unset; probed with head_dim = hidden_size // num_attention_heads\n") in shown.stdout
