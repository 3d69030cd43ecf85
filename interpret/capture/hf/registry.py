"""Adapter discovery through the entry-point group `interpret.adapters`, validated when loaded.

A model type that a family adapter claims uses it; every other model type goes to the generic adapter,
which works from the model's own structure. Built-in family adapters register in this project's
pyproject.toml exactly as a third-party package does. An entry that fails to import or to meet the contract
(`model_types`, `build`) is listed as broken and never used; a plugin may not claim a model type a built-in
serves.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

from torch import nn

from interpret.capture.hf.adapter import GROUP
from interpret.capture.sites import Capturable
from interpret.errors import UnsupportedModelError
from interpret.registration.entry_points import Entry, load_group
from interpret.runtime.versions import DISTRIBUTION, package_version

GENERIC_TARGET = "interpret.capture.hf.generic:ADAPTER"


def validate(adapter: Any) -> str | None:
    """Return why `adapter` does not meet the contract, or None if it does."""
    model_types = getattr(adapter, "model_types", None)
    if not isinstance(model_types, (tuple, list)) or not model_types:
        return "model_types must be a non-empty tuple of config.model_type strings"
    if not all(isinstance(model_type, str) and model_type for model_type in model_types):
        return "model_types must hold only non-empty strings"
    if not callable(getattr(adapter, "build", None)):
        return "build(model, tokenizer) -> Capturable is missing"
    return None


@cache
def entries() -> dict[str, Entry]:
    """Return every registered adapter entry by name (built-ins first), loading and validating each once."""
    found: dict[str, Entry] = {}
    owners: dict[str, Entry] = {}
    for item in load_group(GROUP):
        key = item.name if item.name not in found else f"{item.name}@{item.distribution}"
        problem = item.error or validate(item.obj)
        clashes = [model_type for model_type in item.obj.model_types if model_type in owners] if problem is None else []
        if clashes:
            holder = owners[clashes[0]]
            kind = "the built-in" if holder.builtin else f"{holder.distribution}'s"
            problem = f"claims model type {clashes[0]!r}, which {kind} adapter {holder.name!r} serves; drop it"
        found[key] = entry = replace(item, obj=None, error=problem) if problem else item
        if problem is None:
            owners.update({model_type: entry for model_type in entry.obj.model_types})
    return found


def refresh() -> None:
    """Forget the discovered entries, so newly installed adapters are found on the next look-up."""
    entries.cache_clear()


def model_types() -> dict[str, str]:
    """Return {model_type: adapter name} for every working adapter."""
    return {
        model_type: entry.name
        for entry in entries().values()
        if not entry.broken
        for model_type in entry.obj.model_types
    }


def generic_entry() -> Entry:
    """Return the entry of the generic adapter (built in, serving every model type no adapter claims)."""
    from interpret.capture.hf import generic

    return Entry("generic", GENERIC_TARGET, DISTRIBUTION, package_version(), generic.ADAPTER)


def adapter_for(model: nn.Module) -> Entry:
    """Return the entry of the adapter that claims `model.config.model_type`, else the generic adapter's."""
    model_type = str(getattr(model.config, "model_type", "") or "")
    served = model_types()
    if model_type in served:
        return entries()[served[model_type]]
    return generic_entry()


def hf_capturable(model: nn.Module, tokenizer: Any | None) -> Capturable:
    """Return the Capturable that the registered adapter for this Hugging Face model builds."""
    entry = adapter_for(model)
    try:
        capturable = entry.obj.build(model, tokenizer)
    except UnsupportedModelError as err:
        broken = [e for e in entries().values() if e.broken]
        if not broken:
            raise
        note = f" ({len(broken)} adapter plugin(s) broken, e.g. {broken[0].name}: {broken[0].error})"
        raise UnsupportedModelError(f"{str(err).rstrip('.')}{note}.") from None
    if not isinstance(capturable, Capturable):
        raise UnsupportedModelError(
            f"adapter {entry.name!r} from {entry.distribution} returned {type(capturable).__name__}, not a"
            " Capturable; fix its build function."
        )
    return capturable
