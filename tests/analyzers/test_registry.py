"""The analyzer registry: entry-point discovery, validation, broken plugins, shadowing, suggestions."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fake_traces import random_pattern_trace
from plugin_install import install_plugin, plugin_site

import interpret
from interpret.analysis import AnalyzerResult, registry
from interpret.errors import AnalyzerError

PLUGIN = '''
from dataclasses import dataclass, field

import numpy as np

from interpret.analysis import AnalyzerResult, Check, NamedArray, View


@dataclass(frozen=True)
class Params:
    scale: float = field(default=1.0, metadata={"help": "multiplies the attention"})


class LastLayer:
    name = "last_layer"
    summary = "The last captured layer's head-mean attention."
    version = "0.1"
    requires = ["blocks.*.attn.hook_pattern"]  # any sequence of strings
    needs_model = False
    provides = ()
    Params = Params

    def run(self, trace, params, ctx):
        pattern = trace.stack("attn.hook_pattern")[:, -1].mean(1).double().cpu().numpy() * params.scale
        error = float(np.abs(pattern.sum(-1) - params.scale).max())
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params={"scale": params.scale},
            arrays={"last": NamedArray(pattern, ("batch", "query", "key"))},
            checks={"row_sum_error": Check(error, 1e-5)},
            views=(View("heatmap", "last", "Last layer"),),
            tokens=trace.encoded.tokens,
        )


class Broken:
    name = "broken_one"


class WrongRun(LastLayer):
    name = "wrong_run"

    def run(self, trace, options, context):
        return None
'''


def _install(tmp_path: Path, dist: str, entries: dict[str, str], module: str = "fakeplug") -> None:
    """Install a package and its dist-info (entry points) into tmp_path."""
    install_plugin(tmp_path, dist, module, PLUGIN, entries, "interpret.analyzers")


@pytest.fixture
def plugin_path(tmp_path: Path):
    with plugin_site(tmp_path, "fakeplug") as root:
        yield root


def test_third_party_plugin_is_discovered_listed_and_run(plugin_path: Path) -> None:
    _install(plugin_path, "fake-plugin", {"last_layer": "fakeplug:LastLayer"})
    registry.refresh()
    assert "last_layer" in interpret.analyzers()
    entry = registry.entries()["last_layer"]
    assert entry.distribution == "fake-plugin" and not entry.builtin and not entry.broken
    result = interpret.analyze(random_pattern_trace(), "last_layer", params={"scale": "2"})
    assert isinstance(result, AnalyzerResult)
    assert result.params == {"scale": 2.0}
    assert result.ok


def test_broken_plugins_are_listed_not_run(plugin_path: Path) -> None:
    _install(
        plugin_path,
        "fake-broken",
        {
            "broken_one": "fakeplug:Broken", "missing_mod": "no_such_module:Thing", "wrong_name": "fakeplug:LastLayer",
            "wrong_run": "fakeplug:WrongRun",
        },
    )
    registry.refresh()
    found = registry.entries()
    assert found["wrong_run"].broken and "run must take (self, trace, params, ctx)" in found["wrong_run"].error
    assert found["broken_one"].broken and "missing or not" in found["broken_one"].summary
    assert found["missing_mod"].broken and "import failed" in found["missing_mod"].error
    assert found["wrong_name"].broken and "differs from the entry-point name" in found["wrong_name"].error
    for name in ("broken_one", "missing_mod", "wrong_name", "wrong_run"):
        assert name not in interpret.analyzers()
        with pytest.raises(AnalyzerError, match="is broken"):
            interpret.analyze(random_pattern_trace(), name)


def test_a_plugin_cannot_shadow_a_builtin(plugin_path: Path) -> None:
    _install(plugin_path, "fake-shadow", {"rollout": "fakeplug:LastLayer"})
    registry.refresh()
    found = registry.entries()
    assert found["rollout"].builtin and not found["rollout"].broken
    shadow = found["rollout@fake-shadow"]
    assert shadow.broken and "shadows a built-in" in shadow.error


def test_unknown_analyzer_gets_a_close_match() -> None:
    with pytest.raises(AnalyzerError) as err:
        interpret.analyze(random_pattern_trace(), "rolout")
    message = str(err.value)
    assert "Did you mean 'rollout'?" in message and "\n" not in message


def test_unknown_param_lists_valid_ones() -> None:
    with pytest.raises(AnalyzerError) as err:
        interpret.analyze(random_pattern_trace(), "rollout", params={"head_fusoin": "max"})
    message = str(err.value)
    assert "head_fusion" in message and "\n" not in message


def test_bad_param_value_is_one_line() -> None:
    with pytest.raises(AnalyzerError, match="must be one of mean, max, min"):
        interpret.analyze(random_pattern_trace(), "rollout", params={"head_fusion": "median"})


def test_missing_requirement_says_what_to_collect() -> None:
    trace = random_pattern_trace()
    empty = type(trace)(tensors={}, encoded=trace.encoded, meta=trace.meta)
    with pytest.raises(AnalyzerError, match="collect with names="):
        interpret.analyze(empty, "rollout")


def test_required_names_is_the_union() -> None:
    from interpret.analysis import required_names

    globs = required_names(["rollout", "flow"])
    assert globs == sorted(set(globs), key=globs.index)
    assert any("hook_pattern" in glob for glob in globs)


def test_plugin_source_is_valid_python() -> None:
    compile(textwrap.dedent(PLUGIN), "fakeplug.py", "exec")
