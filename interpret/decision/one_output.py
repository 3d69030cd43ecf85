"""A classifier with one output: what its logit means, read from its config.

A sequence classifier with `num_labels=1` gives one logit per example: a cross-encoder's relevance (a reranker
such as ms-marco MiniLM), a reward model's reward, a regression head's value (transformers trains it with a
mean-squared error: `problem_type` "regression", its default for one label), or a binary classifier trained
with a sigmoid. A softmax over its one class is 1 whatever the input, so its decision is the logit itself, and
σ(logit) is a probability only where the config says the model was trained with a sigmoid
(`declares_sigmoid`): `problem_type` "multi_label_classification" (binary cross-entropy per label), or a
sentence-transformers cross-encoder whose activation is Sigmoid (`sbert_ce_default_activation_function`, or
`sentence_transformers.activation_fn` in newer configs). Nothing else is taken to be a probability.
"""

from __future__ import annotations

from typing import Any

_SIGMOID = "torch.nn.modules.activation.Sigmoid"


def declares_sigmoid(config: Any) -> bool:
    """Return whether a one-output classifier's config says it was trained with a sigmoid (module docstring)."""
    if getattr(config, "problem_type", None) == "multi_label_classification":
        return True
    activation = getattr(config, "sbert_ce_default_activation_function", None)
    settings = getattr(config, "sentence_transformers", None)
    if isinstance(settings, dict) and settings.get("activation_fn") is not None:
        activation = settings["activation_fn"]
    return activation == _SIGMOID
