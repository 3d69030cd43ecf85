"""What a checkpoint's config.json and tokenizer files say, read once as plain JSON, for the checks and estimates
made before the weights load: `ModelFacts` (the model's kind, sizes, decision, labels), the token limits, and the
token counts (`count_tokens`, tokenizer.json through the `tokenizers` library). Neither torch nor numpy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interpret.estimate.checkpoint import PRUNED_TYPES

# Configs name the same size differently; the first key a config sets wins (transformers' attribute_map
# aliases, written out because reading them through transformers would import torch).
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "layers")  # Kosmos-2: layers
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads", "attention_heads")
_DECODER_LAYER_KEYS = ("num_decoder_layers", "decoder_layers")
_DECODER_HEAD_KEYS = ("decoder_attention_heads", "num_decoder_heads")
_POSITION_KEYS = ("n_positions", "max_position_embeddings")
_POSITION_OFFSET_TYPES = ("roberta", "xlm-roberta", "camembert")  # positions start after the padding index
_VISION_TYPES = ("vit", "deit", "beit", "swin", "dinov2")
# Text-image dual encoders (the `dual` adapter's types): text and images in one forward, so not for the command
# line, which reads texts alone; an image classifier of such a type (CLIPForImageClassification) is a vision model.
DUAL_TYPES = ("clip", "siglip", "siglip2", "altclip", "chinese_clip", "clipseg", "metaclip_2", "owlvit", "owlv2",
              "blip", "aimv2", "vision-text-dual-encoder")
_DECODER_TYPES = ("gpt2", "gpt_neo", "gptj", "llama", "mistral", "qwen2", "gemma", "phi", "opt", "bloom", "falcon")
# Prefix language models: the prompt is read bidirectionally (PaliGemma's text without `token_type_ids` is all
# prefix), so the capture reads them as encoders, and so do the checks made before loading
_PREFIX_TYPES = ("paligemma",)
# What the class that `interpret.load` picks (the first of config.architectures) decides, by its name's ending.
_CLASS_HEADS = ("ForSequenceClassification", "ForImageClassification")
_TOKEN_HEADS = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration", "WithLMHead")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
# The widths, in the config or its text config (a multimodal model's): the first positive value wins.
_HIDDEN_KEYS = ("hidden_size", "d_model", "n_embd", "dim")
_FF_KEYS = ("intermediate_size", "ffn_dim", "n_inner", "d_ff", "encoder_ffn_dim", "hidden_dim")
_HEAD_SIZE_KEYS = ("head_dim", "attention_head_size", "d_kv", "kv_channels")


@dataclass(frozen=True)
class ModelFacts:
    """What a model's config.json says, for checks and estimates made before the weights load.

    kind: "encoder", "decoder", "encoder-decoder" or "vision" (as the collector will report it).
    n_layers / n_heads: the main stack's (the encoder's for an encoder-decoder); decoder_layers /
        decoder_heads: the decoder's, 0 for other kinds. 0 where the config sets none of the known keys.
    max_positions: the most positions the model embeds, None when it has no fixed limit or the config
        does not say (the tokenizer may still limit the length).
    decision: what the loaded class decides — "class" (a classifier), "token" (a language model), "none"
        (a bare model: nothing to target) — or None when its class name does not say.
    labels: the class names of a classifier, in index order (id2label, or transformers' LABEL_i default); one
        name for a classifier with one output (`one_output`: a score, `interpret.decision.one_output`).
    dual: a text-image dual encoder (CLIP, SigLIP, ...), which takes text and images together.
    vocab_size: the token vocabulary's size (None when not set). weight_itemsize: bytes per parameter in
        the saved files (4 when the config names no dtype).
    d_model: the residual width (64 · n_heads when the config names none); d_ff: the feed-forward width
        (4 · d_model when not named); d_attn: heads × head size (d_model when the head size is not named).
    """

    model_type: str
    architecture: str
    kind: str
    n_layers: int
    n_heads: int
    decoder_layers: int = 0
    decoder_heads: int = 0
    max_positions: int | None = None
    decision: str | None = None
    labels: tuple[str, ...] = ()
    vocab_size: int | None = None
    weight_itemsize: int = 4
    d_model: int = 0
    d_ff: int = 0
    d_attn: int = 0
    dual: bool = False

    @property
    def one_output(self) -> bool:
        """Whether the model is a classifier with one output (num_labels=1): its decision is a score, with no other
        class to contrast or to name as a gold label."""
        return self.decision == "class" and len(self.labels) == 1

    def loaded_itemsize(self, dtype: str | None) -> int:
        """Return the bytes per parameter once loaded with --dtype `dtype` (None: float32; auto: as saved)."""
        return {"float16": 2, "bfloat16": 2, "auto": self.weight_itemsize}.get(dtype or "float32", 4)


def model_facts(config: dict[str, Any]) -> ModelFacts:
    """Return the ModelFacts of a config.json's content."""
    model_type = str(config.get("model_type") or "")
    architectures = config.get("architectures")
    architecture = str(architectures[0]) if isinstance(architectures, list) and architectures else ""
    if model_type in PRUNED_TYPES:  # interpret.load reads the toolkit's pruned format as the stock class
        model_type, architecture = PRUNED_TYPES[model_type], architecture.replace("Pruned", "", 1)
    n_layers = _first_int(config, _LAYER_KEYS) or 0
    n_heads = _first_int(config, _HEAD_KEYS) or 0
    kind = _kind(config, model_type, architecture)
    decoder_layers = decoder_heads = 0
    if kind == "encoder-decoder":
        decoder_layers = _first_int(config, _DECODER_LAYER_KEYS) or n_layers
        decoder_heads = _first_int(config, _DECODER_HEAD_KEYS) or n_heads
    max_positions = _first_int(config, _POSITION_KEYS)
    if max_positions is not None and model_type in _POSITION_OFFSET_TYPES:
        pad = _first_int(config, ("pad_token_id",))
        max_positions -= (1 if pad is None else pad) + 1
    decision = _decision(architecture)
    dtype = config.get("torch_dtype") or config.get("dtype")
    d_model = _first_int(config, _HIDDEN_KEYS, positive=True) or 64 * max(n_heads, 1)
    head_size = _first_int(config, _HEAD_SIZE_KEYS, positive=True)
    return ModelFacts(
        model_type, architecture, kind, n_layers, n_heads, decoder_layers, decoder_heads,
        max_positions=max_positions if max_positions and max_positions > 0 else None, decision=decision,
        labels=_labels(config) if decision == "class" else (), vocab_size=_first_int(config, ("vocab_size",)),
        weight_itemsize=_DTYPE_BYTES.get(str(dtype), 4), d_model=d_model,
        d_ff=_first_int(config, _FF_KEYS, positive=True) or 4 * d_model,
        d_attn=head_size * n_heads if head_size else d_model,
        dual=model_type in DUAL_TYPES and kind != "vision",
    )


def _first_int(config: dict[str, Any], keys: tuple[str, ...], *, positive: bool = False) -> int | None:
    """Return the first of `keys` set to an int (a positive one with `positive`: a width) in the config, else in
    its text config (a composite model's: LLaVA's and Mllama's layers, heads, widths and vocabulary are their
    language model's)."""
    for source in (config, config.get("text_config") or {}):
        for key in keys:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and (value > 0 or not positive):
                return value
    return None


def _kind(config: dict[str, Any], model_type: str, architecture: str) -> str:
    if config.get("is_encoder_decoder") is True:
        return "encoder-decoder"
    if model_type in _VISION_TYPES or (model_type in DUAL_TYPES and architecture.endswith("ForImageClassification")):
        return "vision"
    if model_type in _PREFIX_TYPES:
        return "encoder"
    # a model that generates text from a composite config (LLaVA, Mllama: a language model with other towers) is
    # a decoder; an encoder-decoder says so above
    causal = architecture.endswith(("ForCausalLM", "LMHeadModel")) or (
        architecture.endswith("ForConditionalGeneration") and isinstance(config.get("text_config"), dict))
    return "decoder" if config.get("is_decoder") is True or causal or model_type in _DECODER_TYPES else "encoder"


def _decision(architecture: str) -> str | None:
    if not architecture or (architecture.endswith("Model") and not architecture.endswith(_TOKEN_HEADS)):
        return "none"  # AutoModel, or a bare BertModel / GPT2Model: hidden states, no logits
    if architecture.endswith(_CLASS_HEADS):
        return "class"
    if architecture.endswith(_TOKEN_HEADS):
        return "token"
    return None


def _labels(config: dict[str, Any]) -> tuple[str, ...]:
    """Return the class names in index order: id2label when it is complete, else LABEL_0.. (num_labels, or 2)."""
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        try:
            by_index = {int(key): str(value) for key, value in id2label.items()}
        except (TypeError, ValueError):
            by_index = {}
        if sorted(by_index) == list(range(len(by_index))):
            return tuple(by_index[i] for i in range(len(by_index)))
    count = _first_int(config, ("num_labels",)) or 2
    return tuple(f"LABEL_{i}" for i in range(count))


def token_limit(facts: ModelFacts, tokenizer_max: int | None) -> int | None:
    """Return the most tokens the model and its tokenizer accept (the smaller limit), None when neither has one."""
    limits = [limit for limit in (facts.max_positions, tokenizer_max) if limit]
    return min(limits) if limits else None


def count_tokens(
    directory: Path, texts: Sequence[str], *, special: bool = True, pairs: Sequence[str] | None = None,
) -> list[int] | None:
    """Return each text's number of tokens (with the special tokens unless `special` is False; with its pair's,
    read as one input, when `pairs` are given), from the directory's tokenizer.json.

    Read with the `tokenizers` library (no torch); padding and truncation saved in the file are switched
    off, so the counts are the full lengths. None when there is no tokenizer.json or it cannot be read (the
    caller then counts with the transformers tokenizer).
    """
    path = directory / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(path))
    except Exception:  # a tokenizer.json this version cannot read: the transformers tokenizer will count
        return None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    inputs = list(texts) if pairs is None else list(zip(texts, pairs))
    return [len(encoding.ids) for encoding in tokenizer.encode_batch(inputs, add_special_tokens=special)]


def tokenizer_limit(directory: Path) -> int | None:
    """Return the tokenizer's own `model_max_length` from tokenizer_config.json, when it sets a real one."""
    path = directory / "tokenizer_config.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("model_max_length")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and 0 < value < 1_000_000_000 else None
