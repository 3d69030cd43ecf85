"""The analyzers `interpret analyzers list` shows, read from entry-point metadata and plugin sources, not imports.

Importing an analyzer imports torch, most of a second before any line is printed. This module parses the
plugin's module with `ast` (nothing executes), reads the class attributes as literals (following bases of
the same module) and checks them with the contract's one statement of rules (`interpret.registration.analyzer_rules`).
An entry whose source cannot vouch for it (a computed attribute, a base from another module, no .py file,
a failed rule) is loaded by the registry instead, which gives its exact error. What only running the import
shows (a failing import, `Params` that cannot be built) is found by `list --check`; `checked` says which
entries were loaded.
"""

from __future__ import annotations

import ast
import importlib.util
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from interpret.registration.analyzer_rules import ATTRIBUTES, DEFERRED, GROUP, problem, signature
from interpret.registration.entry_points import Entry, entry, sorted_entry_points

def entry_point_names() -> list[str]:
    """Return the names of every registered analyzer entry point (broken or not), sorted."""
    return sorted({ep.name for ep in sorted_entry_points(GROUP)})


def listings(check: bool = False) -> list[Entry]:
    """Return every analyzer entry: read from its source, or loaded by the registry (`check`, or when needed)."""
    if not check:
        found: dict[str, Entry] = {}
        for ep in sorted_entry_points(GROUP):
            listed = _static_entry(ep)
            if listed is None or ep.name in found:  # a duplicate or a shadowing plugin: the registry words and keys it
                break
            found[ep.name] = listed
        else:
            return list(found.values())
    from interpret.analysis import registry

    return list(registry.entries().values())


def _static_entry(ep: metadata.EntryPoint) -> Entry | None:
    """Return the entry read from its source, or None when only loading it can tell."""
    module_name, _, attribute = ep.value.partition(":")
    attribute = attribute.strip()
    if not attribute or "." in attribute or "[" in attribute:
        return None
    source = _module_source(module_name.strip())
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None  # the registry reports the import error in its own words
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    attributes = _class_attributes(attribute, classes, set())
    if attributes is None or problem(attributes, ep.name) is not None:
        return None
    return entry(ep, obj=SimpleNamespace(**attributes), checked=False)


def _module_source(module_name: str) -> str | None:
    """Return the source of `module_name` without executing it (its parent packages are imported to find it)."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    try:
        return Path(origin).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _class_attributes(name: str, classes: dict[str, ast.ClassDef], seen: set[str]) -> dict[str, Any] | None:
    """Return the class's literal attributes ("run" → its `signature`), bases of this module first; None when a
    base is not readable from the source or an attribute is bound by anything but a plain assignment or run's def."""
    node = classes.get(name)
    if node is None or name in seen:
        return None
    seen.add(name)
    attributes: dict[str, Any] = {}
    for base in node.bases:
        if not isinstance(base, ast.Name):
            return None
        inherited = _class_attributes(base.id, classes, seen) if base.id != "object" else {}
        if inherited is None:
            return None
        attributes.update(inherited)
    if node.keywords or node.decorator_list:
        return None  # a metaclass or decorator may change anything
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef) and statement.name == "run" and not statement.decorator_list:
            args = statement.args
            attributes["run"] = signature([arg.arg for arg in args.posonlyargs + args.args], args.vararg and args.vararg.arg,
                                          [arg.arg for arg in args.kwonlyargs], args.kwarg and args.kwarg.arg)
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            attributes[statement.targets[0].id] = _literal(statement.value)
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None and isinstance(statement.target, ast.Name):
            attributes[statement.target.id] = _literal(statement.value)
        elif _binds(statement) & {*ATTRIBUTES, "run"}:
            return None  # bound in a way only the import evaluates: a method, a nested class, an unpacking, a decorator
    return attributes


def _binds(statement: ast.stmt) -> set[str]:
    """Return the names a class-body statement binds."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    return {node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _literal(node: ast.expr) -> Any:
    """Return a literal's value; a name (`Params = SomeParams`, `module.STREAM`) as DEFERRED; else a marker."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return DEFERRED
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNREADABLE


_UNREADABLE = object()
