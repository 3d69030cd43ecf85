"""The analyzers run when a user names none: the one place the core names specific analyzers.

Kept free of imports so that the command line can read it without loading torch.
"""

# integrated_gradients gives the first report evidence specific to the decision and its class; `explain` skips
# it, with a note, where it cannot run (no decision to score, inputs that are not token ids).
DEFAULT_ANALYZERS: tuple[str, ...] = ("rollout", "flow", "attention_entropy", "integrated_gradients")
