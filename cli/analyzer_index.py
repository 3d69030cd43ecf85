"""The analyzers `interpret analyzers list` shows, read from entry-point metadata and plugin sources, not imports.

Importing an analyzer imports torch (every analyzer builds on `interpret.analyze`), which is most of a
second before any line is printed. Everything `list` shows is written in the plugin's source as class
attributes: this module parses the module with `ast` — nothing executes — and reads the same literals the
registry would read after importing, checking what the source shows of the contract (the class exists;
`name`, `summary`, `version` are non-empty strings, the summary one line and the name the entry point's;
`requires` and `provides` sequences of strings, `provides` within the contract's names; `needs_model` a bool;
`Params` and `run(self, trace, params, ctx)` defined). Attributes inherited from a class of the same module
are followed.

An entry whose source cannot be read that way (a computed attribute, a base class from another module, no
.py file) or that fails a check is loaded by the registry instead, which gives its exact error. What a
source cannot show — an import that fails when run, `Params` that cannot be built — is found by
`interpret analyzers list --check` (the registry loads and validates every entry) and by every command that
runs analyzers; `checked` says which entries were loaded.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from interpret.versions import DISTRIBUTION

GROUP = "interpret.analyzers"  # interpret.analyze.contract.GROUP, whose module imports torch (a test ties the two)
_RUN_PARAMETERS = ["self", "trace", "params", "ctx"]


@dataclass(frozen=True)
class Listing:
    """One analyzer as `analyzers list` shows it: where it comes from, its summary or why it is broken."""

    name: str
    target: str
    distribution: str
    dist_version: str
    summary: str = ""
    error: str | None = None
    checked: bool = False

    @property
    def broken(self) -> bool:
        """Whether the entry failed to load or to meet the contract."""
        return self.error is not None

    @property
    def builtin(self) -> bool:
        """Whether this toolkit itself provides the analyzer."""
        return self.distribution == DISTRIBUTION


def entry_points() -> list[metadata.EntryPoint]:
    """Return the analyzer entry points, built-ins first, then by name (the registry's order)."""
    return sorted(metadata.entry_points(group=GROUP), key=lambda ep: (_dist(ep) != DISTRIBUTION, ep.name))


def entry_point_names() -> list[str]:
    """Return the names of every registered analyzer entry point (broken or not), sorted."""
    return sorted({ep.name for ep in entry_points()})


def listings(check: bool = False) -> list[Listing]:
    """Return every analyzer entry: read from its source, or loaded by the registry (`check`, or when needed)."""
    if check:
        return _registry_listings()
    found: dict[str, Listing] = {}
    fallback = False
    for ep in entry_points():
        listing = _static_listing(ep)
        if listing is None:
            fallback = True
            break
        if ep.name in found:  # a duplicate or a shadowing plugin: the registry words and keys it
            fallback = True
            break
        found[ep.name] = listing
    return _registry_listings() if fallback else list(found.values())


def _registry_listings() -> list[Listing]:
    from interpret.analyze import registry

    return [
        Listing(entry.name, entry.target, entry.distribution, entry.dist_version,
                entry.analyzer.summary if entry.analyzer is not None else "", entry.error, checked=True)
        for entry in registry.entries().values()
    ]


def _static_listing(ep: metadata.EntryPoint) -> Listing | None:
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
    if attributes is None:
        return None
    provides_allowed = _contract_provides()
    if provides_allowed is None or _contract_problem(attributes, ep.name, provides_allowed):
        return None
    return Listing(ep.name, ep.value, _dist(ep), _dist_version(ep), attributes["summary"])


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
    """Return the class's literal attributes ("run" → its parameter names), bases of this module first; None
    when a base or an attribute the contract needs is not readable from the source."""
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
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        elif isinstance(statement, ast.FunctionDef) and statement.name == "run":
            arguments = statement.args
            plain = not (arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs)
            attributes["run"] = [arg.arg for arg in arguments.args] if plain else None
            continue
        else:
            continue
        if isinstance(target, ast.Name):
            attributes[target.id] = _literal(value)
    return attributes


def _literal(node: ast.expr) -> Any:
    """Return a literal's value; a bare name as ("name", id) (how `Params = MyParams` reads); else a marker."""
    if isinstance(node, ast.Name):
        return ("name", node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):  # `Params = module.SomeParams`
        return ("name", f"{node.value.id}.{node.attr}")
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNREADABLE


_UNREADABLE = object()


def _contract_problem(attributes: dict[str, Any], entry_name: str, provides_allowed: tuple[str, ...]) -> bool:
    """Return whether the source shows a breach of the contract (or cannot show that there is none)."""
    for key in ("name", "summary", "version"):
        value = attributes.get(key)
        if not isinstance(value, str) or not value:
            return True
    if attributes["name"] != entry_name or "\n" in attributes["summary"]:
        return True
    for key in ("requires", "provides"):
        value = attributes.get(key)
        if not isinstance(value, (tuple, list)) or not all(isinstance(item, str) for item in value):
            return True
    if any(item not in provides_allowed for item in attributes["provides"]):
        return True
    if not isinstance(attributes.get("needs_model"), bool):
        return True
    params = attributes.get("Params")
    if not (isinstance(params, tuple) and params[:1] == ("name",)):
        return True
    return attributes.get("run") != _RUN_PARAMETERS


def _contract_provides() -> tuple[str, ...] | None:
    """Return the declarations an analyzer may provide, read from interpret/analyze/result.py's `Provides`."""
    spec = importlib.util.find_spec("interpret")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "analyze" / "result.py"
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "Provides" for t in node.targets):
                value = node.value
                if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == "Literal":
                    items = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
                    if all(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in items):
                        return tuple(item.value for item in items)  # type: ignore[union-attr]
    return None


def _dist(ep: metadata.EntryPoint) -> str:
    return ep.dist.name.lower().replace("_", "-") if ep.dist is not None else "?"


def _dist_version(ep: metadata.EntryPoint) -> str:
    return ep.dist.version if ep.dist is not None else "?"
