"""Tiny random Hugging Face models built from configs (hidden 32, 2 layers, 4 heads), one per family, and
the word-level tokenizer built in memory (interpret.reference.vocab). Nothing is downloaded.

`save_tiny(family, directory)` writes a model and its tokenizer (or image processor) with save_pretrained,
so tests load it back through `interpret.load` exactly as a user would.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import torch
import transformers

from interpret.reference import vocab as reference_vocab

# The family tests run on the CPU; INTERPRET_TEST_DEVICE=cuda runs them on a GPU (a manual check, not CI).
TEST_DEVICE = os.environ.get("INTERPRET_TEST_DEVICE", "cpu")

WORDS = "the cat sat on mat a dog saw red blue ! marker".split()
SPECIALS = list(reference_vocab.SPECIAL_TOKENS)
PAD, UNK, CLS, SEP, MASK = range(len(SPECIALS))

ENCODERS = ("bert", "roberta", "distilbert")
DECODERS = ("gpt2", "llama", "qwen2", "mistral")
ENCODER_DECODERS = ("t5", "bart")
VISION = ("vit",)
FAMILIES = ENCODERS + DECODERS + ENCODER_DECODERS + VISION

TEXTS = ["the cat sat on the mat !", "a dog saw red"]  # the second is padded
DECODER_TEXTS = ["a red dog", "the cat sat on the blue mat"]  # here the first is padded
IMAGE_SIZE, PATCH_SIZE = 16, 4  # 16 patches and the class token


def word_tokenizer(words: list[str] = WORDS, max_length: int = 64) -> transformers.PreTrainedTokenizerFast:
    """Return the in-memory word-level tokenizer: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then `words`."""
    return reference_vocab.word_tokenizer(words, model_max_length=max_length)


def tiny_config(family: str, vocab_size: int) -> Any:
    """Return the config of a tiny `family` model: hidden 32, 2 layers, 4 heads, MLP 64."""
    tokens = {"pad_token_id": PAD, "bos_token_id": CLS, "eos_token_id": SEP}
    if family in ("bert", "roberta"):
        cls = transformers.BertConfig if family == "bert" else transformers.RobertaConfig
        return cls(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=64, max_position_embeddings=66, **tokens)
    if family == "distilbert":
        return transformers.DistilBertConfig(vocab_size=vocab_size, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                             max_position_embeddings=64, pad_token_id=PAD)
    if family == "gpt2":
        return transformers.GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4, n_inner=64,
                                       n_positions=64, **tokens)
    if family in ("llama", "qwen2", "mistral"):
        cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
               "mistral": transformers.MistralConfig}[family]
        window = {"qwen2": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
                  "mistral": {"sliding_window": 4}}.get(family, {})
        return cls(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **window, **tokens)
    if family == "t5":
        return transformers.T5Config(vocab_size=vocab_size, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                     relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                     decoder_start_token_id=PAD, pad_token_id=PAD, eos_token_id=SEP)
    if family == "bart":
        return transformers.BartConfig(vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=64, decoder_start_token_id=SEP,
                                       forced_eos_token_id=None, **tokens)
    if family == "vit":
        return transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE,
                                      num_labels=3)
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


_HEADS = {
    "bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM", "distilbert": "DistilBertForMaskedLM",
    "gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM", "t5": "T5ForConditionalGeneration",
    "bart": "BartForConditionalGeneration", "vit": "ViTForImageClassification",
}


def tiny_model(family: str, attn_implementation: str = "sdpa", seed: int = 0) -> Any:
    """Return a tiny random `family` model with a task head, in eval mode."""
    torch.manual_seed(seed)
    config = tiny_config(family, vocab_size=len(SPECIALS) + len(set(WORDS)))
    config._attn_implementation = attn_implementation
    return getattr(transformers, _HEADS[family])(config).eval().to(TEST_DEVICE)


def image_processor() -> Any:
    """Return a ViT image processor that resizes to the tiny ViT's input size (PIL backend, no torchvision)."""
    return transformers.ViTImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})


def save_tiny(family: str, directory: Path) -> Path:
    """Save a tiny `family` model with its tokenizer (or image processor) to `directory`; return it."""
    tiny_model(family).save_pretrained(directory)
    (image_processor() if family in VISION else word_tokenizer()).save_pretrained(directory)
    return directory


def pixel_values(batch: int = 2, seed: int = 0) -> torch.Tensor:
    """Return random pixel values [batch, 3, 16, 16] for the tiny ViT."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)


def collect_args(family: str, single: bool = False) -> tuple[Any, dict[str, Any]]:
    """Return (inputs, extra keyword arguments) for interpret.collect on a tiny `family` model.

    single: one unpadded example, so kernels take their no-mask paths (SDPA's is_causal, skipped masks).
    """
    if family in VISION:
        return pixel_values(1 if single else 2), {}
    texts = TEXTS[:1] if single else TEXTS
    if family in ENCODER_DECODERS:
        return texts, {"decoder_inputs": DECODER_TEXTS[1:] if single else DECODER_TEXTS}
    return texts, {}


def model_inputs(encoded: Any) -> dict[str, torch.Tensor]:
    """Return the keyword arguments that feed an Encoded to a Hugging Face model directly."""
    if encoded.pixel_values is not None:
        return {"pixel_values": encoded.pixel_values}
    inputs = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    if encoded.decoder is not None:
        inputs["decoder_input_ids"] = encoded.decoder.input_ids
        inputs["decoder_attention_mask"] = encoded.decoder.attention_mask
    return inputs


def no_cache(model: Any) -> dict[str, bool]:
    """Return {"use_cache": False} for a model whose forward takes it (decoders), else {}: as `collect` runs it."""
    return {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}


def eager_patterns(eager_model: Any, encoded: Any) -> dict[str, torch.Tensor]:
    """Return the eager model's own output_attentions under canonical names, padding zeroed as collect does.

    Each tensor is [batch, head, query, key].
    """
    with torch.no_grad():
        output = eager_model(**model_inputs(encoded), output_attentions=True)
    main = encoded.attention_mask.bool()
    if encoded.decoder is None:
        groups = [("blocks.{}.attn.hook_pattern", output.attentions, main, main)]
    else:
        dec = encoded.decoder.attention_mask.bool()
        groups = [
            ("encoder.blocks.{}.attn.hook_pattern", output.encoder_attentions, main, main),
            ("decoder.blocks.{}.attn.hook_pattern", output.decoder_attentions, dec, dec),
            ("decoder.blocks.{}.cross_attn.hook_pattern", output.cross_attentions, dec, main),
        ]
    patterns = {}
    for template, layers, query_mask, key_mask in groups:
        keep = query_mask[:, None, :, None] & key_mask[:, None, None, :]
        for layer, pattern in enumerate(layers):
            patterns[template.format(layer)] = pattern.float().masked_fill(~keep, 0)
    return patterns
