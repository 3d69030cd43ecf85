"""The click command-line interface."""
