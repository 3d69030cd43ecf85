"""Start-up: `--help`, `--version` and `analyzers list` import neither torch, transformers, numpy nor numba, and
`import interpret` stays cheap while every public name still works. Times are in benchmarks/startup.py."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

import interpret

HEAVY = ("torch", "transformers", "numpy", "numba", "pandas", "scipy")
_PROBE = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: print('HEAVY=' + json.dumps([m for m in {heavy!r} if m in sys.modules]), file=sys.stderr))\n"
    "sys.argv = ['interpret', *{args!r}]\n"
    "import runpy\n"
    "runpy.run_module('interpret', run_name='__main__')\n"
)


def _heavy_imports(args: list[str]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY, args=args)], capture_output=True,
                          text=True, env=env, timeout=120)
    marker = [line for line in done.stderr.splitlines() if line.startswith("HEAVY=")]
    assert marker, done.stderr
    return json.loads(marker[-1][len("HEAVY="):]), done


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["analyzers", "list"], ["analyzers", "list", "--format", "json"],
                                  ["report", "--help"], ["audit", "--help"], ["collect", "--help"]])
def test_fast_commands_import_nothing_heavy(args: list[str]) -> None:
    heavy, done = _heavy_imports(args)
    assert done.returncode == 0, done.stderr
    assert heavy == [], f"interpret {' '.join(args)} imported {heavy}"
    assert done.stdout.strip()


def test_analyzers_list_is_the_same_with_and_without_loading_the_plugins() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    fast, checked = (
        subprocess.run([sys.executable, "-m", "interpret", "analyzers", "list", "--format", "json", *extra],
                       capture_output=True, text=True, env=env, timeout=300)
        for extra in ([], ["--check"])
    )
    assert fast.returncode == checked.returncode == 0, (fast.stderr, checked.stderr)
    strip = [{k: v for k, v in row.items() if k != "checked"} for row in json.loads(fast.stdout)]
    assert strip == [{k: v for k, v in row.items() if k != "checked"} for row in json.loads(checked.stdout)]


def test_a_refusal_before_the_model_needs_no_torch(tmp_path: os.PathLike[str]) -> None:
    # A report that cannot fit is refused from the config and tokenizer.json alone: no torch, no model.
    text = " ".join(["word"] * 600)
    heavy, done = _heavy_imports(["report", "--text", text, "--max-length", "512", "-o", f"{tmp_path}/r.html"])
    assert done.returncode == 2 and "above --max-bytes" in done.stderr, done.stderr
    assert heavy == []


def test_import_interpret_is_lazy_and_complete() -> None:
    code = "import sys, interpret; print(sorted(m for m in %r if m in sys.modules))" % (HEAVY,)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
    for name in interpret.__all__:
        assert getattr(interpret, name) is not None
    assert set(interpret.__all__) <= set(dir(interpret))
    importlib.import_module("interpret.capture.engine")  # importing the subpackage must not hide the function

    assert callable(interpret.collect) and interpret.collect.__module__ == "interpret.capture.api"
    assert callable(interpret.analyze) and interpret.analyze.__name__ == "analyze"
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        interpret.nonexistent  # noqa: B018


def test_the_help_lines_listed_without_importing_are_the_commands_own() -> None:
    import click

    from interpret.cli.main import _COMMANDS, cli

    context = click.Context(cli)
    for name, (_, _, help_line) in _COMMANDS.items():
        command = cli.get_command(context, name)
        assert command is not None and command.get_short_help_str(limit=1000) == help_line


def test_every_option_of_every_command_says_what_it_does() -> None:
    import click

    from interpret.cli.main import cli

    def commands(group: click.Group, context: click.Context, path: str) -> list[tuple[str, click.Command]]:
        found = []
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            assert command is not None
            found += commands(command, context, f"{path} {name}") if isinstance(command, click.Group) else [
                (f"{path} {name}", command)]
        return found

    every = commands(cli, click.Context(cli), "interpret")
    assert {"interpret audit", "interpret analyzers show"} <= {path for path, _ in every}
    silent = [f"{path} {option.opts[-1]}" for path, command in every for option in command.params
              if isinstance(option, click.Option) and not option.hidden and not (option.help or "").strip()]
    assert silent == []
