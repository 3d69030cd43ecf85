"""One exception tree. Every message is one line that names the bad value and says what to do."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InterpretError(Exception):
    """Base class of every error the toolkit raises on purpose; `str(err)` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class ConfigError(InterpretError, ValueError):
    """A configuration value is out of range or inconsistent."""


class InputError(InterpretError, ValueError):
    """An input (text, ids, mask, image) cannot be used as given."""


class HookNameError(InterpretError, LookupError):
    """A requested hook name, layer or head does not exist on the model."""

    def __str__(self) -> str:  # LookupError would quote the message like a KeyError; keep it plain.
        return self.args[0]


class ModelLoadError(InterpretError):
    """A model or tokenizer could not be loaded safely."""


class UnsupportedModelError(InterpretError):
    """No adapter knows how to capture this model's attention."""


class CaptureError(InterpretError):
    """The capture could not be carried out as requested."""


class MemoryBudgetError(CaptureError):
    """The requested capture would hold more memory than the budget allows."""


class AnalyzerError(InterpretError):
    """An analyzer is unknown, broken, or was given bad parameters."""


class ResultError(AnalyzerError):
    """An analyzer returned a result that cannot be right: a non-finite value, a readout that is zero on every
    token, or a broken invariant. Refused instead of handed on."""


class NoGradientError(CaptureError, AnalyzerError):
    """A capture with gradients was asked of tensors the model's output does not depend on (tensors an adapter
    re-arranged from what the model computes with: put on a patch grid, unpacked into a batch). A capture error;
    also an analyzer's refusal of the model, so the defaults' lead gives way to the next (`analysis.lead`)."""


class ReportError(InterpretError):
    """A report could not be rendered or written."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ' Did you mean X?' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def listing(choices: Iterable[str], limit: int = 12) -> str:
    """Return the choices as a short comma-separated list, elided past `limit`."""
    items = sorted(set(choices))
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")
