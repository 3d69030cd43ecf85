"""The analyzers run when a user names none, and the old names of streamed ones: the one place the core names
specific analyzers.

Kept free of imports so that the command line can read it without loading torch.
"""

# The decision-specific leads, in the order the evidence ranks them on the default model (ERASER
# comprehensiveness on all 180 shipped held-out sentences, `benchmarks/faithfulness.py`; README, "Default
# analyzers"): decompx (0.338; about 0.8·n forward passes for n tokens), attnlrp (0.326; about 3), attention
# x gradient (0.229; about 2). Integrated Gradients (0.286, about 60) is no lead: decompx and attnlrp are as
# faithful at a fraction of its cost. A report leads with the first that runs on the model
# (`interpret.analysis.lead`); where none does, none leads.
LEADS: tuple[str, ...] = ("decompx", "attnlrp", "attention_x_gradient")

# An audit's leads, in the same order: those whose cost keeps the default audit at 0.1x a plain forward loop
# or better (`benchmarks/audit.py`). decompx's arithmetic grows with length, so it is left to reports.
AUDIT_LEADS: tuple[str, ...] = ("attnlrp", "attention_x_gradient")

DEFAULT_ANALYZERS: tuple[str, ...] = (LEADS[0], "rollout", "attention_entropy")

# The streaming analyzers of earlier releases, now the streamed strategy of their plain twins: each old name
# still runs its analyzer streamed, with a DeprecationWarning, for one release (not a registered analyzer).
DEPRECATED_STREAMING: dict[str, str] = {
    "streaming_rollout": "rollout",
    "streaming_attention_gradient": "attention_x_gradient",
    "streaming_grad_rollout": "gradient_weighted_rollout",
    "streaming_attention_entropy": "attention_entropy",
}
