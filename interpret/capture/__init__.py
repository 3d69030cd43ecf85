"""Collectors: capture named intermediates of the reference model and of Hugging Face models."""

from interpret.capture.api import collect

__all__ = ["collect"]
