"""BERT and RoBERTa with their own number of attention heads in every layer (model types "bert_pruned" and
"roberta_pruned").

transformers 5's BertConfig (and RobertaConfig) holds one head count and derives the head size as hidden_size /
heads, so a model whose layers keep different numbers of heads of the original width cannot be described by it
(see surgery.py). These configs add `heads_per_layer` and `kept_heads` (per layer, the original index of each
head stored, in order); the head size stays hidden_size / num_attention_heads (the original count), and layer
l's query, key and value projections are [heads_per_layer[l] * d_head, hidden] and its attention output
projection [hidden, heads_per_layer[l] * d_head]. BertSelfAttention and
RobertaSelfAttention take their head count from the width of those projections (they view them as
[..., -1, d_head]), so the modules of transformers compute the pruned model unchanged; only the shapes are set
here.

This file imports only torch and transformers: `interpret heads --prune-to DIR` (BERT, RoBERTa) copies it into
DIR as `modeling_bert_pruned.py` and names its classes in config.json's `auto_map`, so that

    AutoModel.from_pretrained(DIR, trust_remote_code=True)

loads the smaller model in any process, with or without this package installed. In a process that has called
`register()`, the Auto classes know both model types and `trust_remote_code` is not needed; `interpret.load`
registers them and never runs the copy in a checkpoint (which must equal this file, `interpret.estimate.checkpoint`).
"""

from __future__ import annotations

from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaModel,
)

MODULE_FILE = "modeling_bert_pruned.py"


def _heads_per_layer(config, heads_per_layer: list[int] | None) -> list[int]:
    """Return `heads_per_layer` checked against `config` (all heads in every layer when None)."""
    if heads_per_layer is None:
        heads_per_layer = [config.num_attention_heads] * config.num_hidden_layers
    heads_per_layer = [int(count) for count in heads_per_layer]
    if len(heads_per_layer) != config.num_hidden_layers or not all(
        1 <= count <= config.num_attention_heads for count in heads_per_layer
    ):
        raise ValueError(
            f"heads_per_layer {heads_per_layer} must give 1..{config.num_attention_heads} heads for each of"
            f" the {config.num_hidden_layers} layers"
        )
    return heads_per_layer


def _kept_heads(config, kept_heads: list[list[int]] | None) -> list[list[int]]:
    """Return `kept_heads` checked against `config.heads_per_layer` (the first heads of each layer when None)."""
    if kept_heads is None:
        kept_heads = [list(range(count)) for count in config.heads_per_layer]
    kept_heads = [[int(head) for head in layer] for layer in kept_heads]
    if [len(layer) for layer in kept_heads] != config.heads_per_layer or not all(
        len(set(layer)) == len(layer) and all(0 <= head < config.num_attention_heads for head in layer)
        for layer in kept_heads
    ):
        raise ValueError(
            f"kept_heads {kept_heads} must give heads_per_layer {config.heads_per_layer} distinct head indices"
            f" in 0..{config.num_attention_heads - 1} per layer"
        )
    return kept_heads


class BertPrunedConfig(BertConfig):
    """BertConfig plus `heads_per_layer` (list of int, one per layer, each in 1..num_attention_heads) and
    `kept_heads` (per layer, the original indices of the heads stored)."""

    model_type = "bert_pruned"

    def __init__(self, heads_per_layer: list[int] | None = None, kept_heads: list[list[int]] | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads_per_layer = _heads_per_layer(self, heads_per_layer)
        self.kept_heads = _kept_heads(self, kept_heads)


class RobertaPrunedConfig(RobertaConfig):
    """RobertaConfig plus `heads_per_layer` (list of int, one per layer, each in 1..num_attention_heads) and
    `kept_heads` (per layer, the original indices of the heads stored)."""

    model_type = "roberta_pruned"

    def __init__(self, heads_per_layer: list[int] | None = None, kept_heads: list[list[int]] | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads_per_layer = _heads_per_layer(self, heads_per_layer)
        self.kept_heads = _kept_heads(self, kept_heads)


def narrow_heads(model: nn.Module, config: BertPrunedConfig | RobertaPrunedConfig) -> None:
    """Replace each layer's query, key, value and attention output projections of `model` (a BERT or RoBERTa of
    any head) by ones of width heads_per_layer[l] * d_head, d_head = hidden_size // num_attention_heads."""
    d_head = config.hidden_size // config.num_attention_heads
    hidden = config.hidden_size
    layers = model.base_model.encoder.layer
    for layer, count in zip(layers, config.heads_per_layer, strict=True):
        width = count * d_head
        attention = layer.attention.self
        attention.query = nn.Linear(hidden, width)
        attention.key = nn.Linear(hidden, width)
        attention.value = nn.Linear(hidden, width)
        layer.attention.output.dense = nn.Linear(width, hidden)


class BertPrunedModel(BertModel):
    """BertModel with heads_per_layer[l] heads in layer l."""

    config_class = BertPrunedConfig

    def __init__(self, config: BertPrunedConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config, add_pooling_layer=add_pooling_layer)
        narrow_heads(self, config)


class BertPrunedForSequenceClassification(BertForSequenceClassification):
    """BertForSequenceClassification with heads_per_layer[l] heads in layer l."""

    config_class = BertPrunedConfig

    def __init__(self, config: BertPrunedConfig) -> None:
        super().__init__(config)
        narrow_heads(self, config)


class BertPrunedForTokenClassification(BertForTokenClassification):
    """BertForTokenClassification with heads_per_layer[l] heads in layer l."""

    config_class = BertPrunedConfig

    def __init__(self, config: BertPrunedConfig) -> None:
        super().__init__(config)
        narrow_heads(self, config)


class BertPrunedForMaskedLM(BertForMaskedLM):
    """BertForMaskedLM with heads_per_layer[l] heads in layer l."""

    config_class = BertPrunedConfig

    def __init__(self, config: BertPrunedConfig) -> None:
        super().__init__(config)
        narrow_heads(self, config)


class RobertaPrunedModel(RobertaModel):
    """RobertaModel with heads_per_layer[l] heads in layer l."""

    config_class = RobertaPrunedConfig

    def __init__(self, config: RobertaPrunedConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config, add_pooling_layer=add_pooling_layer)
        narrow_heads(self, config)


class RobertaPrunedForSequenceClassification(RobertaForSequenceClassification):
    """RobertaForSequenceClassification with heads_per_layer[l] heads in layer l."""

    config_class = RobertaPrunedConfig

    def __init__(self, config: RobertaPrunedConfig) -> None:
        super().__init__(config)
        narrow_heads(self, config)


class RobertaPrunedForTokenClassification(RobertaForTokenClassification):
    """RobertaForTokenClassification with heads_per_layer[l] heads in layer l."""

    config_class = RobertaPrunedConfig

    def __init__(self, config: RobertaPrunedConfig) -> None:
        super().__init__(config)
        narrow_heads(self, config)


class RobertaPrunedForMaskedLM(RobertaForMaskedLM):
    """RobertaForMaskedLM with heads_per_layer[l] heads in layer l."""

    config_class = RobertaPrunedConfig

    def __init__(self, config: RobertaPrunedConfig) -> None:
        super().__init__(config)
        narrow_heads(self, config)


# the stock model type -> its pruned config; the stock class -> its pruned class and the Auto class that loads it
PRUNED_CONFIGS: dict[str, type] = {"bert": BertPrunedConfig, "roberta": RobertaPrunedConfig}
PRUNED_CLASSES: dict[str, tuple[type, str]] = {
    "BertModel": (BertPrunedModel, "AutoModel"),
    "BertForSequenceClassification": (BertPrunedForSequenceClassification, "AutoModelForSequenceClassification"),
    "BertForTokenClassification": (BertPrunedForTokenClassification, "AutoModelForTokenClassification"),
    "BertForMaskedLM": (BertPrunedForMaskedLM, "AutoModelForMaskedLM"),
    "RobertaModel": (RobertaPrunedModel, "AutoModel"),
    "RobertaForSequenceClassification": (
        RobertaPrunedForSequenceClassification, "AutoModelForSequenceClassification"
    ),
    "RobertaForTokenClassification": (RobertaPrunedForTokenClassification, "AutoModelForTokenClassification"),
    "RobertaForMaskedLM": (RobertaPrunedForMaskedLM, "AutoModelForMaskedLM"),
}

_AUTO = {
    "AutoModel": AutoModel,
    "AutoModelForSequenceClassification": AutoModelForSequenceClassification,
    "AutoModelForTokenClassification": AutoModelForTokenClassification,
    "AutoModelForMaskedLM": AutoModelForMaskedLM,
}


def auto_map(config_class: type) -> dict[str, str]:
    """Return config.json's `auto_map` for `config_class`'s family: AutoConfig and every Auto class -> this
    file's class, for trust_remote_code loading."""
    stem = MODULE_FILE.removesuffix(".py")
    mapping = {"AutoConfig": f"{stem}.{config_class.__name__}"}
    for cls, auto in PRUNED_CLASSES.values():
        if cls.config_class is config_class:
            mapping[auto] = f"{stem}.{cls.__name__}"
    return mapping


def register() -> None:
    """Teach this process's Auto classes the model types "bert_pruned" and "roberta_pruned" (idempotent)."""
    for config_class in PRUNED_CONFIGS.values():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    for cls, auto in PRUNED_CLASSES.values():
        _AUTO[auto].register(cls.config_class, cls, exist_ok=True)
