"""`analyzers list` reads plugins' sources instead of importing them: the same names, origins and summaries
as the registry, broken plugins still marked, and what only an import shows found by `--check`."""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

import pytest
from cli_runner import run
from plugin_install import install_plugin

from interpret.analysis import registry
from interpret.cli.analyzer_index import _class_attributes, listings
from interpret.registration.analyzer_rules import problem, validate

PLUGIN = '''
from dataclasses import dataclass

from interpret.analysis import AnalyzerResult


@dataclass(frozen=True)
class Params:
    scale: float = 1.0


class Good:
    name = "good_one"
    summary = "A plugin whose metadata is plain literals: \\x1b[31mred\\x1b[0m is escaped when printed."
    version = "0.1"
    requires = ("*attn.hook_pattern",)
    needs_model = False
    provides = ("readout",)
    Params = Params

    def run(self, trace, params, ctx):
        raise NotImplementedError


class Inherited(Good):
    name = "inherited_one"


class Computed(Good):
    name = "computed_one"
    summary = " ".join(["built", "at", "import"])


class MissingSummary:
    name = "missing_summary"
    version = "0.1"


class WrongRun(Good):
    name = "wrong_run"

    def run(self, trace, options, context):
        return None
'''
FAILING_IMPORT = '''
import no_such_dependency_anywhere  # noqa: F401

from dataclasses import dataclass


@dataclass(frozen=True)
class Params:
    pass


class NeedsADependency:
    name = "needs_dependency"
    summary = "Reads fine, imports badly."
    version = "0.1"
    requires = ()
    needs_model = False
    provides = ("readout",)
    Params = Params

    def run(self, trace, params, ctx):
        return None
'''

# Each class breaks one rule with literals alone; entry name = class name in snake case.
BROKEN = {
    "other_name": 'name = "not_other_name"', "two_lines": 'summary = "one\\ntwo"', "no_version": 'version = ""',
    "bare_string": 'requires = "*attn.hook_pattern"', "unknown_provides": 'provides = ("logits",)',
    "int_needs_model": "needs_model = 1", "bad_streamed": 'streamed_requires = ("a", 3)', "number_params": "Params = 3",
    "no_run": "run = None", "renamed_run": "def run(self, trace, options, context): ...",
    "keyword_ctx": "def run(self, trace, params, *, ctx): ...", "star_args": "def run(self, *args): ...",
    "star_kwargs": "def run(self, trace, params, ctx, **extra): ...",
    "method_summary": "def summary(self): ...",  # the source's literal (inherited) is not what the class holds
}
BROKEN_SOURCE = PLUGIN + "".join(
    f"\n\nclass {name.title().replace('_', '')}(Good):\n    name = {name!r}\n    {body}\n" for name, body in BROKEN.items()
)


@pytest.fixture
def plugins(tmp_path: Path):
    sys.path.insert(0, str(tmp_path))
    registry.refresh()
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith(("indexplug", "badimport"))]:
        del sys.modules[name]
    registry.refresh()


def _by_name(entries: list) -> dict[str, object]:
    return {entry.name: entry for entry in entries}


def test_builtins_read_statically_equal_the_registry() -> None:
    static = _by_name(listings())
    loaded = _by_name(listings(check=True))
    assert set(static) == set(loaded) >= {"rollout", "flow", "attention_entropy", "last_layer_attention"}
    for name, entry in static.items():
        other = loaded[name]
        assert (entry.summary, entry.distribution, entry.dist_version, entry.broken) == (
            other.summary, other.distribution, other.dist_version, other.broken)
        assert not entry.checked and other.checked


def test_plugins_read_statically_and_broken_ones_marked(plugins: Path) -> None:
    install_plugin(plugins, "index-plugin", "indexplug", PLUGIN,
                   {"good_one": "indexplug:Good", "inherited_one": "indexplug:Inherited"}, "interpret.analyzers")
    static = _by_name(listings())
    assert not static["good_one"].checked and not static["inherited_one"].checked  # read, not imported
    assert "indexplug" not in sys.modules
    assert static["inherited_one"].summary == static["good_one"].summary == registry.get("good_one").summary
    assert static["good_one"].distribution == "index-plugin"


@pytest.mark.parametrize(
    ("entry", "error"),
    [("indexplug:MissingSummary", "summary missing"), ("indexplug:WrongRun", "run must take (self, trace, params, ctx)"),
     ("indexplug:Nowhere", "import failed")],
)
def test_an_entry_the_source_cannot_vouch_for_is_loaded_by_the_registry(plugins: Path, entry: str, error: str) -> None:
    name = {"indexplug:MissingSummary": "missing_summary", "indexplug:WrongRun": "wrong_run"}.get(entry, "nowhere")
    install_plugin(plugins, "index-plugin", "indexplug", PLUGIN, {name: entry}, "interpret.analyzers")
    listed = _by_name(listings())[name]
    assert listed.broken and listed.checked and error in (listed.error or "")
    shown = run("analyzers", "list")
    assert shown.exit_code == 0 and f"{name}" in shown.stdout and "BROKEN" in shown.stdout


def test_a_computed_summary_is_read_by_importing(plugins: Path) -> None:
    install_plugin(plugins, "index-plugin", "indexplug", PLUGIN, {"computed_one": "indexplug:Computed"}, "interpret.analyzers")
    listed = _by_name(listings())["computed_one"]
    assert listed.checked and not listed.broken and listed.summary == "built at import"


def test_an_import_failure_is_found_by_check(plugins: Path) -> None:
    install_plugin(plugins, "bad-import", "badimport", FAILING_IMPORT,
                   {"needs_dependency": "badimport:NeedsADependency"}, "interpret.analyzers")
    fast = _by_name(listings())["needs_dependency"]
    assert not fast.broken and not fast.checked  # what only running the import shows: the documented limit
    checked = json.loads(run("analyzers", "list", "--check", "--format", "json").stdout)
    row = next(row for row in checked if row["name"] == "needs_dependency")
    assert row["broken"] and row["checked"] and "No module named 'no_such_dependency_anywhere'" in row["summary"]
    refused = run("report", "--text", "the cat", "-a", "needs_dependency")
    assert refused.exit_code == 2 and "is broken" in refused.stderr  # and it is never run


def test_summaries_are_printed_without_escape_sequences(plugins: Path) -> None:
    install_plugin(plugins, "index-plugin", "indexplug", PLUGIN, {"good_one": "indexplug:Good"}, "interpret.analyzers")
    shown = run("analyzers", "list")
    assert shown.exit_code == 0 and "\x1b" not in shown.stdout and "\\x1b[31mred" in shown.stdout


def test_a_broken_plugin_is_worded_alike_from_its_source_and_once_imported(plugins: Path) -> None:
    entries = {name: f"indexplug:{name.title().replace('_', '')}" for name in BROKEN}
    install_plugin(plugins, "index-plugin", "indexplug", BROKEN_SOURCE, entries, "interpret.analyzers")
    classes = {node.name: node for node in ast.parse(BROKEN_SOURCE).body if isinstance(node, ast.ClassDef)}
    listed = _by_name(listings())
    module = importlib.import_module("indexplug")
    for name, target in entries.items():
        cls = target.partition(":")[2]
        loaded = validate(getattr(module, cls), name)
        attributes = _class_attributes(cls, classes, set())  # None: only the import can tell (the registry words it)
        assert loaded is not None and (attributes is None or problem(attributes, name) == loaded), name
        assert listed[name].error == registry.entries()[name].error == loaded, name
