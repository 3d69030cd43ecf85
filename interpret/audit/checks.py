"""The audit's checks of its arguments, made before any batch runs: examples, analyzers and their
parameters, a reproducible model, every text's length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from interpret.analysis import registry
from interpret.analysis.params import as_dict, build, for_strategy
from interpret.analysis.run import check_strategy
from interpret.errors import AnalyzerError, ConfigError, InputError, suggest
from interpret.reading.datasets import Example, pair_texts

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
_PRECHECK_CHUNK = 512  # texts tokenized at once by the up-front length check


def checked_examples(examples: Sequence[Example], batch_size: int) -> list[Example]:
    """Return the examples as a list after refusing a bad batch size, no examples, an empty text or a repeated row."""
    if isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be a positive number of examples; use e.g. 8.")
    examples = list(examples)
    if not examples:
        raise InputError("no examples to audit; give at least one (a .jsonl or .csv file with a text column).")
    seen: set[int] = set()
    for example in examples:
        if not isinstance(example.text, str) or not example.text.strip():
            raise InputError(f"example row {example.row} has no text; give every example a non-empty text.")
        if example.row in seen:
            raise InputError(f"example row {example.row} appears twice; give every example a unique row id.")
        seen.add(example.row)
    return examples


def readout_analyzers(names: Sequence[str]) -> list[str]:
    """Return the analyzers (of `names`, in order) that provide a readout: the tokens table's analyzers."""
    return [name for name in names if "readout" in registry.get(name).provides]


def checked_analyzers(analyzers: Sequence[str], params: Mapping[str, Any] | None) -> list[str]:
    """Return the analyzer names without repeats after refusing unknown ones, ones with nothing to tabulate, and
    params given for an analyzer not run."""
    names = list(dict.fromkeys(analyzers))
    if not names:
        raise AnalyzerError(f"no analyzers to run; pick at least one of {', '.join(registry.names())}.")
    for name in names:
        cls = registry.get(name)  # raises for an unknown or broken analyzer, with a close match
        if not cls.provides:
            tabulated = [n for n in registry.names() if registry.get(n).provides]
            raise AnalyzerError(
                f"analyzer {name!r} declares neither a readout nor a head map, so the audit has nothing to tabulate;"
                f" run it with `interpret report`, or audit with one of {', '.join(tabulated)}."
            )
    for name in params or {}:
        if name not in names:
            raise AnalyzerError(
                f"params given for {name!r}, which is not among the analyzers run ({', '.join(names)});"
                f"{suggest(name, names)} add it to analyzers or drop its params."
            )
    return names


def effective_params(name: str, given: Mapping[str, Any] | None, strategy: str = "full") -> dict[str, Any]:
    """Return the parameters `strategy` reads (`interpret.analysis.params.for_strategy`) as a JSON-ready dict,
    preferring readout-only computation where the full strategy offers rows="readout" (the same readout)."""
    cls = registry.get(name)
    given = dict(given or {})
    check_strategy(cls, strategy, given)
    fields = {field.name for field in dataclasses.fields(cls.Params) if for_strategy(field, strategy)}
    if strategy == "full" and "rows" not in given and "rows" in fields:
        try:
            return as_dict(build(cls.Params, {**given, "rows": "readout"}, name), strategy)
        except AnalyzerError:
            pass  # readout-only is not possible with the given params (e.g. per_layer); keep the analyzer's own
    return as_dict(build(cls.Params, given, name), strategy)


def check_reproducible(model: nn.Module) -> None:
    """Refuse a model with active dropout: its results would change between runs, and resuming relies on them."""
    for module in model.modules():
        if module.training and isinstance(module, _DROPOUTS) and module.p > 0:
            raise ConfigError(
                f"{type(model).__name__} is in training mode with dropout, so the audit would not be reproducible;"
                " call model.eval() first."
            )


def check_lengths(examples: Sequence[Example], tokenizer: Any, limit: int | None) -> None:
    """Raise InputError naming the first example longer than `limit` tokens, before any batch runs."""
    if limit is None or not callable(tokenizer):
        return
    for start in range(0, len(examples), _PRECHECK_CHUNK):
        chunk = examples[start:start + _PRECHECK_CHUNK]
        for example, ids in zip(chunk, tokenizer([example.text for example in chunk], pair_texts(chunk))["input_ids"]):
            if len(ids) > limit:
                raise InputError(
                    f"example row {example.row} has {len(ids)} tokens but the model accepts at most {limit};"
                    f" shorten it or truncate with max_length={limit} (CLI: --max-length {limit})."
                )
