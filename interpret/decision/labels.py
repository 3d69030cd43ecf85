"""How a label names a class of the model: the one rule for every gold label, `--target` and `--contrast`.

A label is read as text (`interpret.reading.datasets` writes a JSON whole number as its decimal digits, so `0` and `"0"`
are one label, and a CSV field is text already). It names
- the class whose name it is (exactly: case and spaces count), when the model has a class so named;
- else, when it is a whole number (ASCII digits, optionally after a minus), the class of that index (0-based);
- nothing else: any other label, an index the model lacks, or a name two classes share is refused.
So with classes ("negative", "positive"), `0`, `"0"` and `"negative"` are all class 0.

What cannot be resolved: a model whose class names are digits that are also other classes' indices (classes
named "1".."5" at indices 0..4, or "-1", "0", "1" at 0..2) makes such a label read two ways: "1" is the class
named "1" (index 0) and the class of index 1. `resolve_labels` reads it as the name, as a single label always
is, unless the same file also holds a label that can only be an index (digits that name no class, e.g. "0"
there): then the file is refused, naming both lines, since the same digits would stand for a name on one line
and an index on another. Such a model's labels are written as its class names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

from interpret.errors import InputError, suggest

_WHOLE = re.compile(r"-?[0-9]+")
Reading = Literal["name", "index", "both"]  # "both": the name of one class and the index of another


def resolve_class(label: int | str, classes: Sequence[str]) -> int:
    """Return the index of the class `label` names (an int is an index; text follows the module's rule);
    one-line InputError when it names none."""
    return _read(label, classes)[0]


def resolve_labels(
    labels: Sequence[str | None], classes: Sequence[str], where: Callable[[int], str] = lambda i: f"example {i}"
) -> list[int | None]:
    """Return the class index of every label (None stays None), read by the module's rule over the whole
    sequence; InputError naming `where(i)` of the first label that names no class, or of the first two labels
    that read digits both ways (the module docstring)."""
    resolved: list[int | None] = []
    first: dict[Reading, int] = {}
    for i, label in enumerate(labels):
        if label is None:
            resolved.append(None)
            continue
        try:
            index, reading = _read(label, classes)
        except InputError as err:
            raise InputError(f"{where(i)}: {err}") from None
        first.setdefault(reading, i)
        resolved.append(index)
        if "both" in first and "index" in first:
            both, indexed = first["both"], first["index"]
            raise InputError(
                f"{where(both)}: the label {labels[both]!r} is the name of class {resolved[both]} and the index of"
                f" class {labels[both]}, and {where(indexed)} gives {labels[indexed]!r}, which can only be an index;"
                f" this model's class names are digits, so write every label as a class name ({_listing(classes)})."
            )
    return resolved


def _read(label: int | str, classes: Sequence[str]) -> tuple[int, Reading]:
    """Return (the class `label` names, how it was read); InputError when it names none."""
    if isinstance(label, bool) or not isinstance(label, (int, str)):
        raise InputError(f"{label!r} is not a label; give a class name or a class index ({_listing(classes)}).")
    number = label if isinstance(label, int) else int(label) if _WHOLE.fullmatch(label) else None
    if isinstance(label, str):
        named = [i for i, name in enumerate(classes) if name == label]
        if len(named) > 1:
            raise InputError(
                f"{label!r} names classes {named[0]} and {named[1]} of this model; give the class index instead."
            )
        if named:
            other = number is not None and number != named[0] and 0 <= number < len(classes)
            return named[0], "both" if other else "name"
    if number is None:
        raise InputError(
            f"{label!r} is neither a class name nor a class index of this model; its classes are"
            f" {_listing(classes)}.{suggest(str(label), classes)}"
        )
    if not 0 <= number < len(classes):
        raise InputError(f"class {number} does not exist; this model has classes {_listing(classes)}.")
    return number, "index"


def _listing(classes: Sequence[str]) -> str:
    """Return the classes as "0 'negative', 1 'positive'" (elided past 12)."""
    shown = ", ".join(f"{i} {name!r}" for i, name in enumerate(classes[:12]))
    return shown + (f", ... ({len(classes)} in all)" if len(classes) > 12 else "") if classes else "none"
