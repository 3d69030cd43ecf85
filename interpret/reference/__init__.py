"""Our readable reference Transformer: config, attention, blocks, models, PyTorch conversion, a toy task.

Every intermediate is a named `HookPoint` (`blocks.0.attn.hook_pattern`); see `models` for the names of
each model class and `layers` for the names inside a block.
"""

from interpret.reference.attention import (
    MultiHeadAttention,
    additive_scores,
    dot_scores,
    masked_softmax,
    mix_values,
    scaled_dot_product_attention,
)
from interpret.reference.config import TransformerConfig
from interpret.reference.convert import from_torch, to_torch
from interpret.reference.layers import MLP, DecoderLayer, EncoderLayer
from interpret.reference.masks import attention_allowed, causal_allowed, padding_allowed, window_allowed
from interpret.reference.models import Decoder, DecoderLM, Encoder, EncoderClassifier, EncoderDecoder, ReferenceModel
from interpret.reference.positions import PositionalEmbedding, sinusoidal_table
from interpret.reference.toy import (
    MarkerData,
    load_toy,
    marker_accuracy,
    marker_dataset,
    marker_task,
    marker_tokenizer,
    save_toy,
    train_marker_model,
)
from interpret.reference.vocab import word_tokenizer

__all__ = [
    "MLP",
    "Decoder",
    "DecoderLM",
    "DecoderLayer",
    "Encoder",
    "EncoderClassifier",
    "EncoderDecoder",
    "EncoderLayer",
    "MarkerData",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "ReferenceModel",
    "TransformerConfig",
    "additive_scores",
    "attention_allowed",
    "causal_allowed",
    "dot_scores",
    "from_torch",
    "load_toy",
    "marker_accuracy",
    "marker_dataset",
    "marker_task",
    "marker_tokenizer",
    "masked_softmax",
    "mix_values",
    "padding_allowed",
    "save_toy",
    "scaled_dot_product_attention",
    "sinusoidal_table",
    "to_torch",
    "train_marker_model",
    "window_allowed",
    "word_tokenizer",
]
