"""`interpret models`: every model type's support found on the meta device, cached per version, one line per
refusal; and the probe leaves the model as it found it."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import torch
import transformers
from click.testing import CliRunner
from hf_tiny import TEXTS, VOCAB, model_inputs, tiny_model, word_tokenizer
from transformers.modeling_utils import AttentionInterface

import interpret
from interpret.capture.hf import catalog, generic
from interpret.cli.main import cli
from interpret.errors import UnsupportedModelError
from interpret.hooks import count_hooks

TYPES = ["bert", "llama", "mixtral", "t5", "swin", "whisper", "clip", "deberta-v2", "bloom", "mamba", "albert", "rwkv",
         "vitdet", "resnet", "sam3_vision_model", "convbert", "sew-d", "big_bird", "longcat_flash", "qwen2_5_omni",
         "chameleon_vqgan", "sam_mask_decoder", "blip_2_qformer", "encodec", "mimi", "uvdoc", "t5gemma", "pp_formulanet"]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The JSON rows of `interpret models TYPES --format json`, with a fresh cache."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INTERPRET_CACHE_DIR", str(cache))
        result = CliRunner().invoke(cli, ["models", *TYPES, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    rows = {row["model_type"]: row for row in json.loads(result.stdout)}
    rows["_cache"] = {"dir": str(cache)}
    return rows


def test_default_configs_are_probed_on_the_meta_device_with_their_adapter(table) -> None:
    # Llama's default config is a 7B model: built on meta, it costs no memory.
    for model_type, adapter, kind in [("bert", "generic", "encoder"), ("llama", "generic", "decoder"),
                                      ("mixtral", "generic", "decoder"), ("t5", "generic", "encoder-decoder"),
                                      ("swin", "swin", "vision"), ("whisper", "whisper", "encoder-decoder"),
                                      ("clip", "dual", "encoder"), ("deberta-v2", "deberta", "encoder"),
                                      ("bloom", "generic", "decoder"), ("albert", "generic", "encoder")]:
        row = table[model_type]
        assert (row["status"], row["adapter"], row["kind"]) == ("supported", adapter, kind), row
        assert any(name.endswith("blocks.{i}.attn.hook_pattern") for name in row["offered"]), row["offered"]
    assert table["llama"]["missing"] == {}
    assert "Mixture-of-Experts" in table["mixtral"]["missing"]["blocks.{i}.mlp.hook_post"]
    assert "post-norm" in table["bert"]["missing"]["blocks.{i}.ln1.hook_normalized"]
    assert "inside the module" in table["deberta-v2"]["missing"]["blocks.{i}.attn.hook_attn_scores"]
    assert "decoder.blocks.{i}.cross_attn.hook_pattern" in table["whisper"]["offered"]
    assert "vision.blocks.{i}.attn.hook_pattern" in table["clip"]["offered"]


@pytest.mark.parametrize(
    ("model_type", "fragment"),
    [("mamba", "no attention layers"), ("rwkv", "computes no softmax over keys"),
     ("vitdet", "its queries are not the positions of its input"),
     # no image_size in the config: the probe runs on a 224 × 224 image, so a network without attention is
     # refused as such; SAM 3's image size is its backbone config's, and its windows are not the patch grid
     ("resnet", "no attention layers"), ("sam3_vision_model", "576 positions, fewer than its 5184 patches"),
     # classes with no forward of their own: a pipeline of models, or a VQ-VAE used through encode / decode
     ("qwen2_5_omni", "holds the models thinker, talker, token2wav, run one after another: capture one of them"),
     ("chameleon_vqgan", "no forward pass of its own; it is used through its own methods"),
     # a part's config that transformers builds only inside the model that holds it
     ("sam_mask_decoder", "no model class for this model type: it configures a part of the sam model"
                          " (mask_decoder_config); capture that model (`interpret models sam`"),
     # an input only another part of a model makes: the refusal names the model it is a part of
     ("blip_2_qformer", "takes 'query_embeds', which the generic adapter cannot make (it feeds token ids or pixel"
                        " values); register an adapter for it under the entry-point group 'interpret.adapters' that"
                        " prepares this input; transformers configures it as a part of the blip-2 model"
                        " (qformer_config)."),
     # an input the generic adapter cannot make, from a model whose code computes no attention at all (a codec),
     # and from one whose code does (Mimi's transformer): only the first is known to have none without a probe
     ("encodec", "EncodecModel (model type 'encodec') has no attention layers (its modeling code computes no softmax"
                 " and calls no attention kernel)"),
     ("mimi", "MimiModel takes 'input_values', which the generic adapter cannot make"),
     # a probe pass the model rejects (UVDoc's 224 × 224 image), from code with no attention in it
     ("uvdoc", "UVDocModel (model type 'uvdoc') has no attention layers (its modeling code computes no softmax"),
     # layers whose own-code attention cannot be taken (windows), beside a stack that can: refused for them, not
     # captured without them (it was refused for the decoder's 2 positions being fewer than the image's patches)
     ("pp_formulanet", "PPFormulaNetModel computes attention in its own code at 'encoder.layers.0.attn'"
                       " (PPFormulaNetVisionAttention), but its queries are not the positions of its input (windows,"
                       " pooling or a grid), so those layers cannot be captured beside the stack found"
                       " (decoder.layers)")],
)
def test_unsupported_types_say_why_in_one_line(table, model_type, fragment) -> None:
    row = table[model_type]
    assert row["status"] == "unsupported" and fragment in row["reason"] and "\n" not in row["reason"]


def test_a_type_the_meta_device_cannot_probe_is_probed_on_the_cpu(table) -> None:
    """SEW-D's own code makes a constant on the CPU for its masked softmax, which a meta tensor cannot meet: its
    default model (~90M parameters) is built on the CPU with random weights and probed there. LongCat-Flash stops
    at the meta device's limit as well, but its default config has 740B parameters: it stays unknown, and says
    why. ConvBERT and BigBird, once probed on the CPU for transformers' check of whether a mask may be dropped
    (which reads values), are probed on meta: the probe has transformers build the mask; BigBird is refused
    there, as it was on the CPU, for swapping its own attention modules on a short input."""
    row = table["sew-d"]
    assert (row["status"], row["kind"], row["probed_on"]) == ("supported", "encoder", "cpu"), row
    assert "blocks.{i}.attn.hook_pattern" in row["offered"]
    assert table["bert"]["probed_on"] == table["convbert"]["probed_on"] == "meta"
    assert (table["big_bird"]["status"], table["big_bird"]["probed_on"]) == ("unsupported", "meta")
    assert "attention_type='original_full'" in table["big_bird"]["reason"]
    large = table["longcat_flash"]
    assert (large["status"], large["probed_on"]) == ("unknown", "meta")
    assert "exceed the CPU probe's 1B" in large["reason"] and "\n" not in large["reason"]


def test_attention_kept_in_a_list_of_its_own_is_refused_for_that() -> None:
    """XLM keeps its attentions, norms and MLPs in parallel lists: no block module bounds a layer, which the
    generic discovery says as such (it was once called a hybrid with attention in 'only 2 of the 2 blocks'); the
    `parallel` adapter serves XLM and FlauBERT (tests/collect/test_hf_parallel.py)."""
    config = transformers.XLMConfig(vocab_size=20, emb_dim=32, n_layers=2, n_heads=4, max_position_embeddings=16)
    model = transformers.XLMModel(config).eval()
    with pytest.raises(UnsupportedModelError, match=r"keeps its attention modules in a list of their own \('attentions'\)"):
        generic.layout_of(model)


def test_a_stack_whose_own_code_attention_cannot_be_taken_is_refused_not_left_out() -> None:
    """LED's encoder computes Longformer's local/global attention in its own code (no softmax over a product of
    queries and keys): once its decoder was captured alone, as an 'encoder' over the decoder's positions; now the
    model is refused for the encoder's layers."""
    config = transformers.LEDConfig(vocab_size=20, d_model=32, encoder_layers=2, decoder_layers=2,
                                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                    decoder_ffn_dim=64, attention_window=[4, 4], max_encoder_position_embeddings=64,
                                    max_decoder_position_embeddings=64)
    model = transformers.LEDModel(config).eval()
    with pytest.raises(UnsupportedModelError, match=r"LEDModel computes attention in its own code at"
                       r" 'encoder.layers.0.self_attn.longformer_self_attn' \(LEDEncoderSelfAttention\).*cannot be"
                       r" captured beside the stack found \(decoder.layers\)"):
        generic.layout_of(model)


def test_the_table_is_cached_per_version(table, monkeypatch) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", table["_cache"]["dir"])
    path = catalog.cache_path()
    assert path.is_file() and "transformers" in path.name
    monkeypatch.setattr(catalog, "describe", lambda model_type: pytest.fail(f"{model_type} was probed again"))
    assert [row.model_type for row in catalog.catalog(["bert", "mamba"])] == ["bert", "mamba"]


def test_the_cache_is_keyed_by_the_adapter_code_too(table, monkeypatch) -> None:
    """A table written by other adapter code (an older checkout of the same version) is never read: its file
    name carries a digest of every module of interpret.capture.hf."""
    monkeypatch.setenv("INTERPRET_CACHE_DIR", table["_cache"]["dir"])
    sources = b"".join(path.read_bytes() for path in sorted(Path(catalog.__file__).parent.glob("*.py")))
    path = catalog.cache_path()
    assert path.is_file() and path.name.endswith(f"-{hashlib.sha256(sources).hexdigest()[:12]}.json")


def test_text_output_and_usage_errors(table, monkeypatch) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", table["_cache"]["dir"])
    shown = CliRunner().invoke(cli, ["models", "mixtral", "rwkv", "sew-d"], catch_exceptions=False)
    assert shown.exit_code == 0
    assert "sew-d (SEWDModel): supported\n  adapter: speech   kind: encoder\n  probed on the CPU" in shown.stdout
    assert "adapter: generic   kind: decoder" in shown.stdout and "not offered: blocks.{i}.mlp.hook_post" in shown.stdout
    assert "rwkv (RwkvModel): unsupported" in shown.stdout
    unknown = CliRunner().invoke(cli, ["models", "lama"])
    assert unknown.exit_code == 2 and "Did you mean 'llama'?" in unknown.stderr


def test_the_probe_leaves_no_hook_and_no_patch_and_keeps_the_random_state() -> None:
    model = tiny_model("bert", "sdpa").train()  # dropout draws random numbers during the probe pass
    hooks, lookup = count_hooks(model), AttentionInterface.__dict__["get_interface"]
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    layout = generic.layout_of(model)
    assert torch.equal(torch.rand(3), expected)
    assert count_hooks(model) == hooks and AttentionInterface.__dict__["get_interface"] is lookup
    assert generic.layout_of(model) is layout  # probed once per model
    assert layout.kind == "encoder" and layout.stacks[0].n_heads == 4 and layout.position_offset == 0


def test_a_model_that_swaps_its_own_modules_in_the_probe_is_put_back_and_refused() -> None:
    """BigBird's block-sparse attention replaces itself with full attention (module and `attention_type` on
    every level) on an input too short for blocks, such as the probe's: capture would then explain full
    attention where the user's model runs block-sparse on long inputs. The probe puts the modules and settings
    back (the model's output on a long input is bit-identical afterwards) and refuses; loaded with full
    attention, BigBird is captured equal to its eager output_attentions."""
    def bigbird(attention_type: str) -> transformers.BigBirdModel:
        torch.manual_seed(0)
        return transformers.BigBirdModel(transformers.BigBirdConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            block_size=2, num_random_blocks=1, max_position_embeddings=80, attention_type=attention_type)).eval()

    model = bigbird("block_sparse")
    ids = torch.arange(30)[None] % (VOCAB - 5) + 5  # 30 positions: block-sparse (more than 14 for blocks of 2)
    modules = [(path, module, getattr(module, "attention_type", None)) for path, module in model.named_modules()]
    with torch.no_grad():
        before = model(ids).last_hidden_state
    with pytest.raises(UnsupportedModelError, match=r"replaced its own modules 'encoder.layer.0.attention.self'"):
        interpret.collect(model, word_tokenizer(), TEXTS)
    assert [(p, m, getattr(m, "attention_type", None)) for p, m in model.named_modules()] == modules
    with torch.no_grad():
        assert torch.equal(model(ids).last_hidden_state, before)
    full = bigbird("original_full")
    trace = interpret.collect(full, word_tokenizer(), TEXTS)
    with torch.no_grad():
        reference = full(**model_inputs(trace.encoded), output_attentions=True).attentions
    real = trace.encoded.attention_mask.bool()
    keep = real[:, None, :, None] & real[:, None, None, :]
    for layer, attention in enumerate(reference):
        torch.testing.assert_close(trace[f"blocks.{layer}.attn.hook_pattern"], attention.masked_fill(~keep, 0),
                                   atol=1e-6, rtol=0)


def test_the_list_builds_no_model_on_a_fresh_cache(tmp_path, monkeypatch) -> None:
    """Issue 27: `interpret models` probed all ~800 types at first use (killed after 402 s). Now it lists what is
    known without building a model, in seconds: every type, unprobed, with the adapter that would serve it."""
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(catalog, "describe", lambda model_type: pytest.fail(f"{model_type} was probed"))
    started = time.perf_counter()
    listed = CliRunner().invoke(cli, ["models", "--format", "json"], catch_exceptions=False)
    assert listed.exit_code == 0 and time.perf_counter() - started < 30
    rows = {row["model_type"]: row for row in json.loads(listed.stdout)}
    assert sorted(rows) == catalog.model_types() and len(rows) > 500
    assert {row["status"] for row in rows.values()} == {"unprobed"}
    assert (rows["bert"]["adapter"], rows["bert"]["model_class"]) == ("generic", "BertModel")
    assert (rows["clip"]["adapter"], rows["swin"]["adapter"]) == ("dual", "swin")
    assert not any(tmp_path.rglob("*.json"))  # nothing probed, so nothing cached
    text = CliRunner().invoke(cli, ["models", "--status", "supported"], catch_exceptions=False)
    assert text.exit_code == 0 and f"{len(rows)} model types not probed yet are left out" in text.stderr


def test_naming_a_type_probes_it_alone_and_the_list_shows_it_then(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path))
    probed: list[str] = []
    describe = catalog.describe

    def counted(model_type: str) -> catalog.TypeSupport:
        probed.append(model_type)
        if len(probed) > 1:
            pytest.fail(f"{probed} probed; only albert was asked for")
        return describe(model_type)

    monkeypatch.setattr(catalog, "describe", counted)
    shown = CliRunner().invoke(cli, ["models", "albert"], catch_exceptions=False)
    assert shown.exit_code == 0 and probed == ["albert"]
    assert "layers: 12 layers run 1 block module in turn" in shown.stdout  # the sharing statement is kept
    listed = CliRunner().invoke(cli, ["models"], catch_exceptions=False)
    lines = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert lines["albert"][1:4] == ["supported", "generic", "encoder"] and lines["bert"][1] == "unprobed"
    assert probed == ["albert"] and "1 supported, 0 unsupported, 0 unknown," in listed.stderr


def test_a_mixture_beside_other_weights_is_the_mlp_whose_output_hook_mlp_out_reads() -> None:
    """DeepSeek V4 runs its routed experts on flattened rows and mixes its hyper-connection streams before the
    MLP, so the only [batch, pos] leaves after its attention are that mixing and the shared expert's projections:
    hook_mlp_out is the whole mixture's output (`layers.{i}.mlp`), never the shared expert's last projection.
    Switch Transformers, whose mixture sits inside the block's never-called list of sublayers, stays supported
    with hook_mlp_out."""
    from interpret.capture.hf.registry import hf_capturable

    model, _, _ = catalog._build("deepseek_v4", "meta")
    capturable = hf_capturable(model, None)
    paths = {id(module): path for path, module in model.named_modules()}
    read = {paths[id(site.module)] for site in capturable.sites if site.name.endswith(".hook_mlp_out")}
    assert read == {f"layers.{i}.mlp" for i in range(len(model.layers))}
    assert "Mixture-of-Experts" in capturable.unsupported["blocks.3.mlp.hook_post"]
    switch = catalog.describe("switch_transformers")
    assert switch.status == "supported" and "encoder.blocks.{i}.hook_mlp_out" in switch.offered, switch


@pytest.mark.parametrize(("model_class", "config", "attends"), [
    (transformers.EncodecModel, transformers.EncodecConfig(), False),
    (transformers.BertModel, transformers.BertConfig(), True),
    (transformers.ImageGPTModel, transformers.ImageGPTConfig(), True),  # `nn.Softmax`, read case-blind
])
def test_modeling_code_with_no_softmax_and_no_attention_kernel_is_known_to_have_no_attention(
        model_class, config, attends) -> None:
    from interpret.capture.hf.structure import has_attention_code

    with torch.device("meta"):
        model = model_class(config)
    assert has_attention_code(model) is attends



def test_a_mask_transformers_would_drop_for_being_all_ones_is_built_on_the_meta_device(table) -> None:
    """T5Gemma's encoder asks whether its padding mask may be dropped (every position real), which reads values the
    meta device does not hold; the probe has transformers build the mask instead (the same output), so its default
    config (5.6B parameters, too large for the CPU probe) is probed on meta. A tiny model is captured equal to the
    eager model's own attentions on every side, and the mask check is transformers' own again afterwards."""
    from hf_tiny import TEXTS, assert_encoder_decoder_patterns, eager_copy, word_tokenizer
    from transformers import masking_utils

    row = table["t5gemma"]
    assert (row["status"], row["kind"], row["probed_on"]) == ("supported", "encoder-decoder", "meta"), row
    assert masking_utils._ignore_bidirectional_mask_sdpa.__module__ == "transformers.masking_utils"
    tokenizer = word_tokenizer()
    sizes = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64,
             "sliding_window": 4, "query_pre_attn_scalar": 8, "pad_token_id": 0}
    torch.manual_seed(0)
    model = transformers.T5GemmaModel(transformers.T5GemmaConfig(encoder=sizes, decoder=sizes, pad_token_id=0,
                                                                 vocab_size=len(tokenizer))).eval()
    trace = interpret.collect(model, tokenizer, TEXTS[:2], decoder_inputs=torch.tensor([[1, 5, 6], [1, 7, 0]]),
                              names="*")
    encoded = trace.encoded
    inputs = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask, "use_cache": False,
              "decoder_input_ids": encoded.decoder.input_ids, "decoder_attention_mask": encoded.decoder.attention_mask}
    with torch.no_grad():
        reference = eager_copy(model)(**inputs, output_attentions=True)
        plain = model(**inputs)
    assert torch.equal(trace.output.last_hidden_state, plain.last_hidden_state)
    assert_encoder_decoder_patterns(trace, reference, 1e-6)
