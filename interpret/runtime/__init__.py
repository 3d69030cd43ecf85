"""The process around a run: thread policy, progress hooks and library versions (torch-free)."""
