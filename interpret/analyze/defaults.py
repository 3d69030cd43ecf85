"""The analyzers run when a user names none, and the old names of streamed ones: the one place the core names
specific analyzers.

Kept free of imports so that the command line can read it without loading torch.
"""

# The decision-specific methods within the default audit's cost (about 10 forward passes or fewer), in the order
# the evidence ranks them on the default model (ERASER comprehensiveness on the shipped held-out sentences,
# `benchmarks/faithfulness.py`; README, "Default analyzers"): decompx (0.327, beats random on 100%, ~8x a
# forward pass) above Integrated Gradients (0.260, ~118x), then attention x gradient (0.233, 92%, ~4x). The
# defaults lead with the first that runs on the model (`interpret.analyze.lead`); where none does, none leads.
LEADS: tuple[str, ...] = ("decompx", "attention_x_gradient")

# The lead, then rollout (the attention view, ~0.1x a forward pass) and attention_entropy (the per-head map).
DEFAULT_ANALYZERS: tuple[str, ...] = (LEADS[0], "rollout", "attention_entropy")

# The streaming analyzers of earlier releases, now the streamed strategy of their plain twins: each old name
# still runs its analyzer streamed, with a DeprecationWarning, for one release (not a registered analyzer).
DEPRECATED_STREAMING: dict[str, str] = {
    "streaming_rollout": "rollout",
    "streaming_attention_gradient": "attention_x_gradient",
    "streaming_grad_rollout": "gradient_weighted_rollout",
    "streaming_attention_entropy": "attention_entropy",
}
