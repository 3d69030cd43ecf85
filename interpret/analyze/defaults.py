"""The analyzers run when a user names none: the one place the core names specific analyzers.

Kept free of imports so that the command line can read it without loading torch.
"""

DEFAULT_ANALYZERS: tuple[str, ...] = ("rollout", "flow", "attention_entropy")
