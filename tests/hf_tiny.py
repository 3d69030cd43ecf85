"""Tiny random Hugging Face models built from configs (hidden 32, 2 layers, 4 heads), one per family, and
the word-level tokenizer built in memory (interpret.reference.vocab). Nothing is downloaded.

`FAMILIES` are the ten families the detailed collector tests run on; `MATRIX` is the broad set of the
family matrix (tests/collect/test_hf_matrix.py): encoders (one of them running one layer module for every
layer), decoders (absolute and rotary positions, grouped-query, sliding window, Mixture-of-Experts, parallel
attention/MLP blocks), families whose attention is computed in the module's own code, encoder-decoders (text and
speech), vision (plain and hierarchical windowed, through the kernel or the module's own code) and text-image
dual encoders. A family that ships a
tokenizer of its own kind is saved with one built like it (`shipped_tokenizers`); the others with the word-level
one.

`SPEECH_ENCODERS` are the speech encoders on raw waveforms that the `speech` adapter serves (wav2vec2 family,
tests/collect/test_hf_speech.py), kept out of the matrix: each has a small convolutional feature encoder, a
classification head, and is fed clips through `feature_extractor()` (`save_tiny_speech` saves both).

`save_tiny(family, directory)` writes a model and its tokenizer (or image processor) with save_pretrained,
so tests load it back through `interpret.load` exactly as a user would.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

import shipped_tokenizers as shipped
from interpret.reference import vocab as reference_vocab

# The family tests run on the CPU; INTERPRET_TEST_DEVICE=cuda runs them on a GPU (a manual check, not CI).
TEST_DEVICE = os.environ.get("INTERPRET_TEST_DEVICE", "cpu")

WORDS = "the cat sat on mat a dog saw red blue ! marker".split()
SPECIALS = list(reference_vocab.SPECIAL_TOKENS)
PAD, UNK, CLS, SEP, MASK = range(len(SPECIALS))
VOCAB = len(SPECIALS) + len(set(WORDS))

TEXTS = ["the cat sat on the mat !", "a dog saw red"]  # the second is padded
DECODER_TEXTS = ["a red dog", "the cat sat on the blue mat"]  # here the first is padded
_CORPUS = (*shipped.CORPUS, *TEXTS, *DECODER_TEXTS)  # what the shipped-style tokenizers are trained on
IMAGE_SIZE, PATCH_SIZE = 16, 4  # 16 patches and the class token
SWIN_IMAGE_SIZE = 32  # an 8 x 8 patch grid: four 4 x 4 windows in the first stage, one in the second
MEL_BINS, AUDIO_POSITIONS = 8, 8  # Whisper: 16 feature frames, halved by the encoder's convolutions

_TOKENS = {"pad_token_id": PAD, "bos_token_id": CLS, "eos_token_id": SEP}
_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
_ROTARY = {**_SIZES, "max_position_embeddings": 64, **_TOKENS}


@dataclass(frozen=True)
class Family:
    """One tiny family: its category, how to build its config, its task head, and its attention kernels.

    category: encoder, decoder, encoder-decoder, speech (encoder-decoder on audio features), vision,
        dual (text-image dual encoder) or speech-encoder (raw waveforms, `SPEECH_ENCODERS`). implementations: the kernels it is loaded with (SDPA where the
        family has it, and eager).
    """

    name: str
    category: str
    config: Callable[[], Any]
    head: str
    implementations: tuple[str, ...] = ("sdpa", "eager")
    what: str = ""
    padding_invariant: bool = True  # False where the model's own output reads padding (SigLIP pools the last position,
    # data2vec-audio's stacked positional convolutions and the Conformer's convolution module read padded frames)
    tokenizer: Callable[[], Any] | None = None  # the tokenizer it ships (tests/shipped_tokenizers.py); None: word-level

    @property
    def text(self) -> bool:
        """Whether the family takes text alone (so `interpret collect --text` applies)."""
        return self.category in ("encoder", "decoder", "encoder-decoder")


def _bert_like(cls: Any, **extra: Any) -> Callable[[], Any]:
    return lambda: cls(vocab_size=VOCAB, **_SIZES, max_position_embeddings=66, **_TOKENS, **extra)


def _rotary(cls: Any, **extra: Any) -> Callable[[], Any]:
    return lambda: cls(vocab_size=VOCAB, **{**_ROTARY, **extra})


def _bart_like(cls: Any, **extra: Any) -> Callable[[], Any]:
    return lambda: cls(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                       decoder_start_token_id=SEP, forced_eos_token_id=None, **_TOKENS, **extra)


def _vision(cls: Any, **extra: Any) -> Callable[[], Any]:
    return lambda: cls(**_SIZES, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, num_labels=3, **extra)


def _t5() -> Any:
    return transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                 relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                 decoder_start_token_id=PAD, pad_token_id=PAD, eos_token_id=SEP)


def _whisper() -> Any:
    return transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=MEL_BINS, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=AUDIO_POSITIONS, max_target_positions=64, decoder_start_token_id=CLS,
        suppress_tokens=[], begin_suppress_tokens=[], **_TOKENS,
    )


def _swin(cls: Any = transformers.SwinConfig) -> Callable[[], Any]:
    return lambda: cls(image_size=SWIN_IMAGE_SIZE, patch_size=PATCH_SIZE, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                       window_size=4, mlp_ratio=2.0, num_labels=3)


def _dual(config: Any, text: Any, vision: Any, **extra: Any) -> Callable[[], Any]:
    text_sizes = {"vocab_size": VOCAB, **_SIZES, "max_position_embeddings": 32, **_TOKENS}
    vision_sizes = {**_SIZES, "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE}
    return lambda: config(text_config=text(**text_sizes).to_dict(), vision_config=vision(**vision_sizes).to_dict(), **extra)


def _mllama() -> Any:
    """Llama 3.2 Vision: a text decoder whose layer 1 of 3 cross-attends to the image, and a small vision tower."""
    text = _rotary(T.MllamaTextConfig, num_key_value_heads=2, num_hidden_layers=3, cross_attention_layers=[1])()
    vision = T.MllamaVisionConfig(hidden_size=32, num_hidden_layers=2, num_global_layers=1, attention_heads=4,
                                  intermediate_size=64, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE,
                                  vision_output_dim=64, intermediate_layers_indices=[0], max_num_tiles=1,
                                  supported_aspect_ratios=[[1, 1]])
    return T.MllamaConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), **_TOKENS)


T = transformers
_FAMILY_LIST = [
    # Encoders.
    Family("bert", "encoder", _bert_like(T.BertConfig), "BertForMaskedLM", what="BERT: post-norm, absolute positions"),
    Family("roberta", "encoder", _bert_like(T.RobertaConfig), "RobertaForMaskedLM",
           what="RoBERTa: positions offset past the padding index"),
    Family("electra", "encoder", _bert_like(T.ElectraConfig, embedding_size=16), "ElectraForMaskedLM",
           what="ELECTRA: embeddings projected to the hidden size"),
    Family("distilbert", "encoder",
           lambda: T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                      max_position_embeddings=64, pad_token_id=PAD),
           "DistilBertForMaskedLM", what="DistilBERT: q_lin/k_lin/v_lin/out_lin, ffn"),
    Family("deberta-v2", "encoder",
           lambda: T.DebertaV2Config(vocab_size=VOCAB, **_SIZES, max_position_embeddings=64, relative_attention=True,
                                     position_buckets=8, max_relative_positions=16, pos_att_type=["p2c", "c2p"],
                                     position_biased_input=False, pad_token_id=PAD),
           "DebertaV2ForMaskedLM", ("eager",), what="DeBERTa-v2: disentangled attention computed in the module"),
    Family("albert", "encoder", _bert_like(T.AlbertConfig, embedding_size=16), "AlbertForMaskedLM",
           what="ALBERT: one layer module run for every layer", tokenizer=lambda: shipped.sentencepiece_unigram(_CORPUS)),
    Family("mpnet", "encoder", _bert_like(T.MPNetConfig), "MPNetForMaskedLM", ("eager",),
           what="MPNet: attention computed in the module, relative position bias", tokenizer=lambda: shipped.mpnet(_CORPUS)),
    Family("modernbert", "encoder",
           lambda: T.ModernBertConfig(vocab_size=VOCAB, **_SIZES, max_position_embeddings=64, local_attention=4,
                                      global_attn_every_n_layers=2, pad_token_id=PAD, bos_token_id=CLS,
                                      eos_token_id=SEP, cls_token_id=CLS, sep_token_id=SEP),
           "ModernBertForMaskedLM", what="ModernBERT: rotary, alternating local (windowed) and global layers"),
    # Decoders.
    Family("gpt2", "decoder",
           lambda: T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64, **_TOKENS),
           "GPT2LMHeadModel", what="GPT-2: absolute positions, merged c_attn (Conv1D)"),
    Family("opt", "decoder",
           lambda: T.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                               max_position_embeddings=64, word_embed_proj_dim=32, **_TOKENS),
           "OPTForCausalLM", what="OPT: learned positions with an offset"),
    Family("gpt_bigcode", "decoder",
           lambda: T.GPTBigCodeConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64,
                                      multi_query=True, **_TOKENS),
           "GPTBigCodeForCausalLM", what="GPT-BigCode: multi-query attention"),
    Family("gpt_neox", "decoder", _rotary(T.GPTNeoXConfig, use_parallel_residual=True), "GPTNeoXForCausalLM",
           what="GPT-NeoX: partial rotary, parallel attention/MLP"),
    Family("llama", "decoder", _rotary(T.LlamaConfig, num_key_value_heads=2), "LlamaForCausalLM",
           what="Llama: rotary, grouped-query"),
    Family("mistral", "decoder", _rotary(T.MistralConfig, num_key_value_heads=2, sliding_window=4),
           "MistralForCausalLM", what="Mistral: sliding window"),
    Family("qwen2", "decoder",
           _rotary(T.Qwen2Config, num_key_value_heads=2, use_sliding_window=True, sliding_window=4, max_window_layers=1),
           "Qwen2ForCausalLM", what="Qwen2: sliding window on some layers"),
    Family("qwen3", "decoder", _rotary(T.Qwen3Config, num_key_value_heads=2, head_dim=8), "Qwen3ForCausalLM",
           what="Qwen3: query/key norms"),
    Family("gemma2", "decoder",
           _rotary(T.Gemma2Config, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8, sliding_window=4),
           "Gemma2ForCausalLM", ("eager",), what="Gemma 2: logit soft-capping, alternating sliding window, sandwich norms"),
    Family("phi", "decoder", _rotary(T.PhiConfig), "PhiForCausalLM", what="Phi: parallel attention/MLP, partial rotary"),
    Family("phi3", "decoder", _rotary(T.Phi3Config, num_key_value_heads=2), "Phi3ForCausalLM",
           what="Phi-3: merged qkv_proj and gate_up_proj"),
    Family("cohere", "decoder", _rotary(T.CohereConfig, num_key_value_heads=2), "CohereForCausalLM",
           what="Cohere: parallel attention/MLP with one norm"),
    Family("olmo2", "decoder", _rotary(T.Olmo2Config, num_key_value_heads=2), "Olmo2ForCausalLM",
           what="OLMo 2: post-norms, query/key norms"),
    Family("falcon", "decoder",
           lambda: T.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  max_position_embeddings=64, **_TOKENS),
           "FalconForCausalLM", what="Falcon: attention computed in the module (SDPA call), multi-query, parallel blocks",
           tokenizer=lambda: shipped.falcon(_CORPUS)),
    Family("mllama", "decoder", _mllama, "MllamaForConditionalGeneration",
           what="Llama 3.2 Vision (Mllama) on text: its cross-attention layers skipped"),
    Family("mixtral", "decoder", _rotary(T.MixtralConfig, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
           "MixtralForCausalLM", what="Mixtral: Mixture-of-Experts"),
    Family("qwen2_moe", "decoder",
           _rotary(T.Qwen2MoeConfig, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                   shared_expert_intermediate_size=64, decoder_sparse_step=1),
           "Qwen2MoeForCausalLM", what="Qwen2-MoE: experts and a shared expert"),
    # Encoder-decoders.
    Family("t5", "encoder-decoder", _t5, "T5ForConditionalGeneration", what="T5: relative position bias, unscaled"),
    Family("bart", "encoder-decoder", _bart_like(T.BartConfig), "BartForConditionalGeneration",
           what="BART: learned positions"),
    Family("marian", "encoder-decoder", _bart_like(T.MarianConfig, decoder_vocab_size=VOCAB), "MarianMTModel",
           what="Marian: sinusoidal positions"),
    Family("whisper", "speech", _whisper, "WhisperForConditionalGeneration",
           what="Whisper: audio features, convolutional downsampling"),
    # Vision.
    Family("vit", "vision", _vision(T.ViTConfig), "ViTForImageClassification", what="ViT: class token and patches"),
    Family("deit", "vision", _vision(T.DeiTConfig), "DeiTForImageClassificationWithTeacher",
           what="DeiT: class and distillation tokens"),
    Family("dinov2", "vision",
           lambda: T.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                                  image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, num_labels=3),
           "Dinov2ForImageClassification", what="DINOv2: layer scale"),
    Family("swin", "vision", _swin(), "SwinForImageClassification",
           what="Swin: shifted windows, hierarchical stages"),
    Family("swinv2", "vision", _swin(T.Swinv2Config), "Swinv2ForImageClassification", ("eager",),
           what="Swin V2: cosine attention and a continuous position bias, computed in the module"),
    Family("donut-swin", "vision", _swin(T.DonutSwinConfig), "DonutSwinForImageClassification", ("eager",),
           what="Donut's Swin encoder: windows computed in the module"),
    # Text-image dual encoders.
    Family("clip", "dual", _dual(T.CLIPConfig, T.CLIPTextConfig, T.CLIPVisionConfig, projection_dim=16), "CLIPModel",
           what="CLIP: causal text tower, vision tower"),
    Family("siglip", "dual", _dual(T.SiglipConfig, T.SiglipTextConfig, T.SiglipVisionConfig), "SiglipModel",
           what="SigLIP: text and vision towers", padding_invariant=False),
]
MATRIX: dict[str, Family] = {family.name: family for family in _FAMILY_LIST}

# Speech encoders on raw waveforms: a two-layer convolutional feature encoder (a frame per 10 samples, every 10
# samples after the first 10: `conv_kernel` (10, 3), `conv_stride` (5, 2)), a small positional convolution.
SAMPLING_RATE = 16000
CLIP_SAMPLES = (400, 250)  # two clips of different lengths: 39 and 24 frames, the second padded
_CONV = {"conv_dim": (16, 16), "conv_kernel": (10, 3), "conv_stride": (5, 2), "num_conv_pos_embeddings": 4,
         "num_conv_pos_embedding_groups": 2, "num_labels": 3}


def _speech(cls: Any, **extra: Any) -> Callable[[], Any]:
    return lambda: cls(**_SIZES, **{**_CONV, **extra})


_SPEECH_LIST = [
    Family("wav2vec2", "speech-encoder", _speech(T.Wav2Vec2Config, feat_extract_norm="layer", do_stable_layer_norm=True),
           "Wav2Vec2ForSequenceClassification", what="wav2vec 2.0: pre-norm blocks (large checkpoints' layout)"),
    Family("hubert", "speech-encoder", _speech(T.HubertConfig, feat_extract_norm="layer"),
           "HubertForSequenceClassification", what="HuBERT: post-norm blocks"),
    Family("data2vec-audio", "speech-encoder", _speech(T.Data2VecAudioConfig, num_conv_pos_embeddings=2, conv_pos_kernel_size=3),
           "Data2VecAudioForSequenceClassification", what="data2vec-audio: stacked positional convolutions",
           padding_invariant=False),
    Family("unispeech", "speech-encoder", _speech(T.UniSpeechConfig, feat_extract_norm="layer"),
           "UniSpeechForSequenceClassification", what="UniSpeech"),
    Family("unispeech-sat", "speech-encoder", _speech(T.UniSpeechSatConfig, feat_extract_norm="layer"),
           "UniSpeechSatForSequenceClassification", what="UniSpeech-SAT"),
    Family("wav2vec2-conformer", "speech-encoder",
           _speech(T.Wav2Vec2ConformerConfig, feat_extract_norm="layer", conv_depthwise_kernel_size=3),
           "Wav2Vec2ConformerForSequenceClassification", what="Conformer: relative position bias, convolution module",
           padding_invariant=False),
    Family("wav2vec2-conformer-rotary", "speech-encoder",
           _speech(T.Wav2Vec2ConformerConfig, feat_extract_norm="layer", conv_depthwise_kernel_size=3,
                   position_embeddings_type="rotary"),
           "Wav2Vec2ConformerForSequenceClassification", what="Conformer: rotary positions", padding_invariant=False),
]
SPEECH_ENCODERS: dict[str, Family] = {family.name: family for family in _SPEECH_LIST}
SWIN_LIKE = ("swin", "swinv2", "donut-swin")  # the families the Swin adapter serves: patterns lifted to the patch grid

ENCODERS = ("bert", "roberta", "distilbert")
DECODERS = ("gpt2", "llama", "qwen2", "mistral")
ENCODER_DECODERS = ("t5", "bart")
VISION = ("vit",)
FAMILIES = ENCODERS + DECODERS + ENCODER_DECODERS + VISION


def word_tokenizer(words: list[str] = WORDS, max_length: int = 64) -> transformers.PreTrainedTokenizerFast:
    """Return the in-memory word-level tokenizer: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then `words`."""
    return reference_vocab.word_tokenizer(words, model_max_length=max_length)


def tiny_speech(family: str, attn_implementation: str = "sdpa", seed: int = 0) -> Any:
    """Return a tiny random speech encoder of `SPEECH_ENCODERS` with its classification head, in eval mode."""
    torch.manual_seed(seed)
    spec = SPEECH_ENCODERS[family]
    config = spec.config()
    config._attn_implementation = attn_implementation
    return getattr(transformers, spec.head)(config).eval().to(TEST_DEVICE)


def feature_extractor() -> Any:
    """Return a wav2vec2 feature extractor that normalises each clip and returns a sample-level attention mask."""
    return transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SAMPLING_RATE, padding_value=0.0,
                                                 do_normalize=True, return_attention_mask=True)


def audio_clips(lengths: tuple[int, ...] = CLIP_SAMPLES, seed: int = 0) -> list[Any]:
    """Return random mono clips, 1-D float32 numpy arrays of `lengths` samples."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(length)).astype(np.float32) for length in lengths]


def save_tiny_speech(family: str, directory: Path) -> Path:
    """Save a tiny `SPEECH_ENCODERS` model (eager) with its feature extractor to `directory`; return it."""
    tiny_speech(family, "eager").save_pretrained(directory)
    feature_extractor().save_pretrained(directory)
    return directory


def tiny_config(family: str, vocab_size: int = VOCAB) -> Any:
    """Return the config of a tiny `family` model: hidden 32, 2 layers, 4 heads, MLP 64."""
    if family not in MATRIX:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(MATRIX)}")
    config = MATRIX[family].config()
    if vocab_size != VOCAB and hasattr(config, "vocab_size"):
        config.vocab_size = vocab_size
    return config


def tiny_model(family: str, attn_implementation: str = "sdpa", seed: int = 0, tokenizer: Any | None = None) -> Any:
    """Return a tiny random `family` model with a task head, in eval mode (sized for `tokenizer`'s vocabulary and
    special ids when one is given, else for the word-level tokenizer's)."""
    torch.manual_seed(seed)
    config = tiny_config(family) if tokenizer is None else tiny_config(family, vocab_size=len(tokenizer))
    if tokenizer is not None:
        config.pad_token_id = tokenizer.pad_token_id  # None where the tokenizer ships without one (Falcon)
        config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config._attn_implementation = attn_implementation
    return getattr(transformers, MATRIX[family].head)(config).eval().to(TEST_DEVICE)


def save_tiny_classifier(directory: Path, seed: int = 0) -> Path:
    """Save a tiny random two-class BERT classifier (labels negative, positive) with the word tokenizer to
    `directory`; return it."""
    torch.manual_seed(seed)
    tokenizer = word_tokenizer()
    config = tiny_config("bert", vocab_size=len(tokenizer))
    config.id2label, config.label2id = {0: "negative", 1: "positive"}, {"negative": 0, "positive": 1}
    transformers.BertForSequenceClassification(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def image_processor(size: int = IMAGE_SIZE) -> Any:
    """Return a ViT image processor that resizes to `size` (PIL backend, no torchvision)."""
    return transformers.ViTImageProcessorPil(size={"height": size, "width": size})


def image_size(family: str) -> int:
    """Return the square image side a tiny vision or dual `family` takes."""
    return SWIN_IMAGE_SIZE if family in SWIN_LIKE else IMAGE_SIZE


def save_tiny(family: str, directory: Path) -> Path:
    """Save a tiny `family` model with its tokenizer (the one it ships, or the word-level one) or image processor
    to `directory`; return it."""
    spec = MATRIX[family]
    tokenizer = spec.tokenizer() if spec.tokenizer is not None else None
    tiny_model(family, spec.implementations[0], tokenizer=tokenizer).save_pretrained(directory)
    processor = image_processor(image_size(family)) if spec.category == "vision" else tokenizer or word_tokenizer()
    processor.save_pretrained(directory)
    return directory


def pixel_values(batch: int = 2, seed: int = 0, size: int = IMAGE_SIZE) -> torch.Tensor:
    """Return random pixel values [batch, 3, size, size] for a tiny vision model."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, size, size, generator=generator)


def audio_features(batch: int = 2, seed: int = 0) -> torch.Tensor:
    """Return random log-mel features [batch, mel, frame] for the tiny Whisper (16 frames)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, MEL_BINS, 2 * AUDIO_POSITIONS, generator=generator)


def collect_args(family: str, single: bool = False) -> tuple[Any, dict[str, Any]]:
    """Return (inputs, extra keyword arguments) for interpret.collect on a tiny `family` model.

    single: one unpadded example, so kernels take their no-mask paths (SDPA's is_causal, skipped masks).
    """
    batch = 1 if single else 2
    category = MATRIX[family].category
    texts = TEXTS[:1] if single else TEXTS
    if category == "vision":
        return pixel_values(batch, size=image_size(family)), {}
    if category == "speech":
        return audio_features(batch), {"decoder_inputs": DECODER_TEXTS[1:] if single else DECODER_TEXTS}
    if category == "dual":
        return {"text": texts, "images": pixel_values(batch)}, {}
    if category == "encoder-decoder":
        return texts, {"decoder_inputs": DECODER_TEXTS[1:] if single else DECODER_TEXTS}
    return texts, {}


def model_inputs(encoded: Any) -> dict[str, torch.Tensor]:
    """Return the keyword arguments that feed an Encoded to a Hugging Face model directly; a batch padded on the
    left (SigLIP's texts) also gets position ids that count each row's real tokens from 0, as it has alone."""
    inputs: dict[str, torch.Tensor] = {}
    if encoded.pixel_values is not None:
        inputs["pixel_values"] = encoded.pixel_values
    if getattr(encoded, "input_features", None) is not None:
        inputs["input_features"] = encoded.input_features
    if getattr(encoded, "input_values", None) is not None:  # raw audio: the mask is per sample, not per frame
        inputs["input_values"] = encoded.input_values
        if encoded.sample_mask is not None:
            inputs["attention_mask"] = encoded.sample_mask
    if encoded.input_ids is not None:
        inputs["input_ids"] = encoded.input_ids
        inputs["attention_mask"] = encoded.attention_mask
        mask = encoded.attention_mask
        if bool((mask[:, 1:] > mask[:, :-1]).any()):  # a real token after padding
            inputs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
    image = getattr(encoded, "image", None)
    if image is not None:
        inputs["pixel_values"] = image.pixel_values
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


def dual_patterns(eager_model: Any, encoded: Any) -> dict[str, torch.Tensor]:
    """Return a dual encoder's eager output_attentions of both towers under canonical names: the text tower's
    `blocks.{i}` (padding zeroed as collect does) and the vision tower's `vision.blocks.{i}`."""
    with torch.no_grad():
        output = eager_model(**model_inputs(encoded), output_attentions=True)
    text_mask = encoded.attention_mask.bool()
    keep = text_mask[:, None, :, None] & text_mask[:, None, None, :]
    patterns = {f"blocks.{i}.attn.hook_pattern": p.float().masked_fill(~keep, 0)
                for i, p in enumerate(output.text_model_output.attentions)}
    patterns.update({f"vision.blocks.{i}.attn.hook_pattern": p.float()
                     for i, p in enumerate(output.vision_model_output.attentions)})
    return patterns


def windowed_patterns(layers: list[Any], run: Callable[[], Any], patch_grid: tuple[int, int], batch: int) -> dict[str, torch.Tensor]:
    """Return the windowed weights each eager Swin-style block's `attention` returns while `run()` runs the model
    (output_attentions keeps only each stage's last block), put on the patch grid by plain loops over windows and
    tokens: window (wr, wc) token (i, j) sits at grid row (wr·w + i + shift) mod rows (the kernel's windows are cut
    from the grid rolled by −shift); a token of a stage whose grid is `factor` times coarser than the patch grid
    covers factor × factor patches, and a key token's weight is shared equally among its patches."""
    attentions: list[torch.Tensor] = []

    def asking(module: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return args, {**kwargs, "output_attentions": True}  # a block that does not pass it on (MaskFormer's Swin)

    handles = [layer.attention.register_forward_hook(lambda module, args, output: attentions.append(output[1]))
               for layer in layers]
    handles += [layer.attention.register_forward_pre_hook(asking, with_kwargs=True) for layer in layers
                if "output_attentions" in inspect.signature(layer.attention.forward).parameters]
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    patch_rows, patch_cols = patch_grid
    patterns = {}
    for index, (layer, windowed) in enumerate(zip(layers, attentions, strict=True)):
        rows, cols = layer.input_resolution
        size, shift = int(layer.window_size), int(layer.shift_size)
        factor = patch_rows // rows
        heads = windowed.shape[1]
        full = torch.zeros(batch, heads, patch_rows * patch_cols, patch_rows * patch_cols)
        per_image = (rows // size) * (cols // size)
        for b in range(batch):
            for window in range(per_image):
                wr, wc = divmod(window, cols // size)
                cells = [((wr * size + i + shift) % rows, (wc * size + j + shift) % cols)
                         for i in range(size) for j in range(size)]
                for tq, (qr, qc) in enumerate(cells):
                    for tk, (kr, kc) in enumerate(cells):
                        value = windowed[b * per_image + window, :, tq, tk] / factor**2
                        for dq in range(factor * factor):
                            q = (qr * factor + dq // factor) * patch_cols + qc * factor + dq % factor
                            for dk in range(factor * factor):
                                k = (kr * factor + dk // factor) * patch_cols + kc * factor + dk % factor
                                full[b, :, q, k] = value
        patterns[f"blocks.{index}.attn.hook_pattern"] = full
    return patterns


def assert_encoder_decoder_patterns(trace: Any, output: Any, atol: float, n_layers: int = 2) -> None:
    """Assert that an encoder-decoder trace's self-, decoder and cross patterns equal the eager `output`'s own
    `encoder_attentions`, `decoder_attentions` and `cross_attentions` (each of `n_layers`), padding masked."""
    main, decoder = trace.encoded.attention_mask.bool(), trace.encoded.decoder.attention_mask.bool()
    for group, layers, queries, keys in (("encoder.blocks.{}.attn", output.encoder_attentions, main, main),
                                         ("decoder.blocks.{}.attn", output.decoder_attentions, decoder, decoder),
                                         ("decoder.blocks.{}.cross_attn", output.cross_attentions, decoder, main)):
        keep = queries[:, None, :, None] & keys[:, None, None, :]
        assert len(layers) == n_layers
        for layer, attention in enumerate(layers):
            torch.testing.assert_close(trace[group.format(layer) + ".hook_pattern"],
                                       attention.float().masked_fill(~keep, 0), atol=atol, rtol=0)


def eager_copy(model: Any) -> Any:
    """Return an eager copy of `model` (the same weights, in eval mode): its output_attentions are the reference."""
    eager = type(model)(type(model.config).from_dict(model.config.to_dict())).eval()
    eager.config._attn_implementation = "eager"
    eager.load_state_dict(model.state_dict())
    return eager


def built_with(build: Callable[[], Any], kernel: str, seed: int = 0) -> Any:
    """Return the model `build()` makes (seeded, in eval mode) run with attention `kernel`; SDPA only where its
    class supports it, as transformers checks when it loads one."""
    torch.manual_seed(seed)
    model = build().eval()
    assert kernel == "eager" or model._supports_sdpa
    model.config._attn_implementation = kernel
    return model


def _sink_sizes() -> dict[str, Any]:
    return {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "pad_token_id": PAD}


# Attention with sinks (a learned per-head logit in every row's softmax denominator), each with a sliding window on
# one of its two layers: gpt-oss (window, then full) and Granite SWA (full, then window; its own softmax scale).
SINK_MODELS: dict[str, Callable[[], Any]] = {
    "gpt_oss": lambda: transformers.GptOssForCausalLM(transformers.GptOssConfig(
        **_sink_sizes(), head_dim=8, num_local_experts=4, num_experts_per_tok=2,
        layer_types=["sliding_attention", "full_attention"], sliding_window=4)),
    "granite_swa": lambda: transformers.GraniteSWAForCausalLM(transformers.GraniteSWAConfig(
        **_sink_sizes(), sliding_window=4, layer_types=["full_attention", "sliding_attention"],
        layer_rope_theta=[10000.0, 10000.0])),
}


def with_sinks(model: Any) -> Any:
    """Give every sink a value far from zero, so that each row's share on it is large (the default is 0 or random
    near it), and return the model."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(torch.linspace(-1.0, 2.0, layer.self_attn.sinks.numel()))
    return model


def sink_model(name: str, kernel: str = "eager") -> Any:
    """Return the tiny model `name` of `SINK_MODELS` (seeded, eval mode, attention `kernel`) with its sinks set."""
    return with_sinks(built_with(SINK_MODELS[name], kernel))


def assert_each_alone(model: Any, inputs: Any, atol: float, processor: Any | None = None) -> Any:
    """Assert that every hook point of a batch without padding (`inputs`: images, clips, patches; axis 0 the
    batch) holds, for each example, what a capture of that example alone holds; return the batch's trace."""
    import interpret

    trace = interpret.collect(model, processor, inputs, names="*")
    for index in range(trace.encoded.batch):
        alone = interpret.collect(model, processor, inputs[index : index + 1], names="*")
        for name in alone.names():
            torch.testing.assert_close(trace[name][index], alone[name][0], atol=atol, rtol=0, msg=name)
    return trace


def assert_listed(
    model_type: str, adapter: str, kind: str, offered: tuple[str, ...] = ("blocks.{i}.attn.hook_pattern",),
) -> Any:
    """Assert that `interpret models` lists `model_type` as supported by `adapter`, as a `kind` model offering
    every hook point of `offered` (folded: `blocks.{i}...`); return its row."""
    from interpret.capture.hf import catalog

    row = catalog.describe(model_type)
    assert (row.status, row.adapter, row.kind) == ("supported", adapter, kind), row
    assert set(offered) <= set(row.offered), row.offered
    return row


def last_layer(module: Any) -> torch.nn.Module:
    """Return the last transformer block of `module`: the last entry of its one list of layers."""
    lists = [child for name, child in module.named_modules()
             if isinstance(child, torch.nn.ModuleList) and name.split(".")[-1] in ("layer", "layers")]
    assert len(lists) == 1, [type(child).__name__ for child in lists]
    return lists[0][-1]


def read_positions(block: torch.nn.Module, scores: Callable[[], torch.Tensor]) -> list[list[int]]:
    """Return, per example, the positions of `block`'s output on which that example's score depends (a non-zero
    gradient): `scores()` runs the model and returns one score per example [batch]."""
    kept: list[torch.Tensor] = []

    def keep(module: Any, args: Any, output: Any) -> None:
        hidden = output[0] if isinstance(output, tuple) else output
        hidden.retain_grad()
        kept.append(hidden)

    handle = block.register_forward_hook(keep)
    try:
        scores().sum().backward()
    finally:
        handle.remove()
    return [torch.nonzero(row).flatten().tolist() for row in kept[0].grad.abs().sum(-1)]

