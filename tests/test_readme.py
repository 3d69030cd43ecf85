"""The README works as written: the Python example, the main and test commands, every option of the command-line
synopsis (accepted by its parser with each listed choice, and given in a run on tiny models), every `interpret ...`
example of a code block (run), and a family table that shows no failing test."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

README = Path(__file__).resolve().parents[1] / "README.md"


def _block(marker: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker} -->\s*```\w*\n(.*?)```\s*<!-- /{marker} -->", text, re.S)
    assert match, f"README has no {marker} block"
    return match.group(1).strip()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "test-command" in ci and _block("test-command").startswith("python3 -m pytest")


def test_api_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INTERPRET_CACHE_DIR", str(tmp_path / "cache"))
    exec(compile(_block("api-example"), "README.md", "exec"), {})
    assert (tmp_path / "reports" / "example.html").is_file()
    assert any((tmp_path / "reports" / "example").iterdir())


def test_main_command_writes_the_report(tmp_path: Path) -> None:
    command = _block("main-command").split("&&")[-1].strip()  # the install steps already ran in this env
    args = shlex.split(command)
    assert args[:3] == ["python3", "-m", "interpret"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INTERPRET_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, *args[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = tmp_path / "reports" / "the-service-was-slow-but-the-food-was-wonderful.html"
    assert report.is_file() and report.stat().st_size > 10_000


# ---------------------------------------------------------------------------------------------- the command line

SYNOPSIS = re.search(r"## Command line\s*```\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
_OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)(?:/(--[\w-]+))?(?: ([^\s\[\]()]+))?")
_CHOICES = re.compile(r"[a-z][a-z0-9_-]*(\|[a-z][a-z0-9_-]*)+")


def _synopsis() -> list[tuple[tuple[str, ...], str, str | None]]:
    """Return (command words, option, the value the synopsis shows or None) for every option of every command the
    synopsis block shows (`--evidence/--no-evidence` gives both; `interpret --version` is the group's)."""
    assert SYNOPSIS, "README has no command-line synopsis block after '## Command line'"
    entries, words = [], ()
    for line in SYNOPSIS.group(1).splitlines():
        parts = [line]
        if line.startswith("interpret "):
            parts = re.split(r" \| (?=[a-z]+\b)", line[len("interpret "):])  # `list [--check] | show NAME`
            words = tuple(re.match(r"[a-z ]*", parts[0]).group(0).split())
        for index, part in enumerate(parts):
            if index:  # a sibling subcommand of the same group
                words = (words[0], *re.match(r"[a-z ]*", part).group(0).split())
            entries += [(words, *option) for option in _options(part)]
    return entries


def _options(text: str) -> list[tuple[str, str | None]]:
    found = []
    for option, negated, value in _OPTION.findall(text):
        found.append((option, value or None))
        if negated:
            found.append((negated, None))
    return found


def _command(words: tuple[str, ...]) -> click.Command:
    from interpret.cli.main import cli

    command: click.Command = cli
    for word in words:
        assert isinstance(command, click.Group), f"{' '.join(words)}: {word!r} is not a subcommand"
        found = command.get_command(click.Context(command), word)
        assert found is not None, f"the README shows `interpret {' '.join(words)}`, which the CLI does not have"
        command = found
    return command


def _sample(param: click.Option, shown: str | None) -> list[str]:
    """Return the values to give `param` on a command line: each choice the README lists, the README's own
    example value, or a value of the parameter's type."""
    if param.is_flag:
        return []
    if shown and _CHOICES.fullmatch(shown):
        return shown.split("|")
    if isinstance(param.type, click.Choice):
        return [str(choice) for choice in param.type.choices]
    if shown and not re.search(r"[A-Z]|\.\.\.", shown):
        return [shown]
    if isinstance(param.type, (click.IntRange, click.FloatRange)) and param.type.min is not None:
        return [str(param.type.min + (0 if not param.type.min_open else 0.5))]
    return ["1"] if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)) else ["x"]


@pytest.mark.parametrize(("words", "option", "shown"), _synopsis(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v))
def test_every_synopsis_option_is_accepted_by_the_parser(words, option, shown) -> None:
    """Each option the synopsis shows exists on its command and its parser accepts it, with every listed choice
    (`--device auto|cpu|cuda`: all three) or the synopsis's example value."""
    command = _command(words)
    if not words:  # interpret --version: an eager option that prints and exits
        assert run_cli([option]).exit_code == 0
        return
    param = next((p for p in command.params if option in (*p.opts, *p.secondary_opts)), None)
    assert isinstance(param, click.Option), f"`interpret {' '.join(words)}` has no option {option}"
    arguments = []  # what the command needs besides the option tested: its required arguments and options
    for other in command.params:
        if other.required and other is not param:
            arguments += ["rollout"] if isinstance(other, click.Argument) else [other.opts[0], "x"]
    for value in _sample(param, shown) or [None]:
        context = command.make_context(" ".join(words), [*arguments, option, *([value] if value else [])])
        if value and isinstance(param.type, click.Choice):
            assert context.params[param.name] in (value, (value,)), (option, value)


def run_cli(args: list[str]) -> Result:
    from interpret.cli.main import cli

    return CliRunner().invoke(cli, args, catch_exceptions=False)


# Runs that together give every option of the synopsis on tiny models ({cls}: a BERT classifier, {llama}: a
# language model that generates without ending early, {t5}: an encoder-decoder; {data}: four labelled texts).
RUNS: list[list[str]] = [
    ["report", "--model", "{llama}", "--text", "the cat", "-a", "rollout", "-a", "integrated_gradients", "--set",
     "integrated_gradients.steps=4", "--generate", "2", "--layers", "0,-1", "--heads", "0,3", "--max-bytes", "20MB",
     "--max-memory", "8GB", "--max-length", "16", "--device", "cpu", "--dtype", "float32", "--allow-pickle", "--seed",
     "1", "-o", "{tmp}/generated.json", "--format", "json", "--evidence", "--removal", "mask", "--streaming", "auto", "-v",
     "--progress"],
    ["report", "--model", "{llama}", "--text", "the cat sat on", "--continuation", "the mat", "-a", "rollout",
     "--streaming", "on", "-o", "-", "--format", "json", "--no-evidence", "-q", "--no-progress"],
    ["report", "--model", "{llama}", "--text", "the cat sat on", "--target", "mat", "--contrast", "dog", "-a", "rollout",
     "--no-evidence", "--streaming", "off", "-o", "{tmp}/token.html", "--format", "html", "-q"],
    ["report", "--model", "{cls}", "--input", "{data}.jsonl", "-a", "rollout", "--target", "positive", "--contrast",
     "negative", "--removal", "delete", "-o", "{tmp}/labels.html", "-q"],
    ["report", "--model", "{cls}", "--input", "{data}.csv", "-a", "rollout", "--target", "1", "--removal", "zero",
     "--allow-missing-weights", "-o", "{tmp}/index.html", "-q"],
    ["report", "--model", "{t5}", "--text", "the cat", "--decoder-text", "a red dog", "-a", "rollout", "--no-evidence",
     "-o", "-", "-q"],
    ["report", "--model", "{cls}", "--text", "the cat sat", "--text-pair", "a dog saw red", "-a", "rollout",
     "-o", "{tmp}/pair.html", "-q"],
    ["analyzers", "list"],
    ["analyzers", "list", "--check"],
    ["analyzers", "show", "rollout"],
    ["collect", "--model", "{t5}", "--text", "the cat", "--decoder-text", "a red dog", "--names", "*hook_pattern",
     "--names", "*hook_resid_post", "--layers", "0,-1", "--heads", "0,3", "--reduce", "mean", "-o", "{tmp}/t5.safetensors", "-q"],
    ["collect", "--model", "{llama}", "--text", "the cat", "--reduce", "max", "-o", "{tmp}/llama.safetensors", "-q"],
    ["audit", "--model", "{cls}", "--input", "{data}.jsonl", "-a", "rollout", "--set", "rollout.head_fusion=max",
     "--batch-size", "2", "--target", "gold", "-o", "{tmp}/audit", "--evidence", "--engine", "local", "--drivers", "3",
     "--driver-rows", "2", "--removal", "mask", "--slice-by", "label", "-q", "--no-progress"],
    ["audit", "--model", "{cls}", "--input", "{data}.csv", "-a", "rollout", "--target", "prediction", "-o", "{tmp}/audit",
     "--fresh", "--skip-invalid", "--streaming", "off", "--max-memory", "8GB", "--progress"],
    ["evaluate", "--model", "{cls}", "--text", "the cat sat", "-a", "rollout", "--checks", "erasers,sanity", "--removal", "mask",
     "--format", "json"],
    ["evaluate", "--model", "{cls}", "--input", "{data}.jsonl", "-a", "rollout", "--format", "text"],
    ["evaluate", "--checks", "tasks", "-a", "rollout", "--format", "json", "-o", "{tmp}/tasks.json", "-q"],
    ["models", "gpt2", "whisper", "--status", "supported", "--refresh", "--format", "json"],
    ["models", "bert", "--status", "unsupported", "--status", "unknown", "--format", "text"],
    ["models", "bert", "--probe", "--status", "unprobed"],
    ["heads", "--input", "{data}.jsonl", "--model", "{cls}", "--label-column", "label", "--fraction", "0.5", "--threshold",
     "0.5", "--prune-to", "{tmp}/pruned", "--store", "removed", "--max-flops", "5e13", "--max-memory", "8GB", "-o",
     "{tmp}/heads.html", "-q"],
    ["heads", "--input", "{data}.jsonl", "--model", "{cls}", "--prune-to", "{tmp}/pruned", "--force", "--store", "zeroed",
     "-o", "{tmp}/heads-zeroed.html", "-q"],
    ["--version"],
]
# Shown in the synopsis, accepted by the parser (above), but not run here: they need what a test machine lacks.
NOT_RUN = {("audit", "--address"): "an existing Ray cluster", ("audit", "--num-gpus-per-worker"): "GPUs in a Ray cluster"}


def test_the_runs_give_every_synopsis_option() -> None:
    runs = [*RUNS, *(shlex.split(line)[1:] for line in _examples() if _NEEDS_A_CLUSTER not in line)]
    given = {(run[0] if not run[0].startswith("-") else "", arg) for run in runs for arg in run if arg.startswith("-")}
    missing = [(" ".join(words), option) for words, option, _ in _synopsis()
               if ((words[0] if words else ""), option) not in given | set(NOT_RUN)]
    assert not missing, f"add a run with these synopsis options to RUNS: {missing}"


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The tiny models and the four labelled texts the runs use, made once per test process."""
    from hf_tiny import save_tiny, save_tiny_classifier

    root = tmp_path_factory.mktemp("readme")
    rows = [("the cat sat on the mat", "positive"), ("a dog saw red", "negative"), ("red blue mat", "positive"),
            ("the dog", "negative")]
    (root / "data.jsonl").write_text("".join(json.dumps({"text": t, "label": l}) + "\n" for t, l in rows), encoding="utf-8")
    (root / "data.csv").write_text("text,label\n" + "".join(f"{t},{l}\n" for t, l in rows), encoding="utf-8")
    return {"cls": str(save_tiny_classifier(root / "cls")), "llama": str(save_tiny("llama", root / "llama")),
            "t5": str(save_tiny("t5", root / "t5")), "data": str(root / "data")}


@pytest.mark.parametrize("args", RUNS, ids=lambda run: " ".join(a for a in run if not a.startswith("{"))[:60])
def test_synopsis_commands_run(args, places, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli([arg.format(tmp=tmp_path, **places) for arg in args])
    assert result.exit_code == 0, (args, result.stderr)


def _examples() -> list[str]:
    """Return every `interpret ...` command line of the README's fenced code blocks, the synopsis left out."""
    text = README.read_text(encoding="utf-8").replace(SYNOPSIS.group(0), "")
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("interpret ")]


# The README's placeholders, and the example that needs a Ray cluster with GPUs (checked by the parser only).
_PLACEHOLDERS = {"./my-classifier": "{cls}", "data.jsonl": "{data}.jsonl"}
_NEEDS_A_CLUSTER = "--address auto"


@pytest.mark.parametrize("line", _examples())
def test_readme_examples_run(line, places, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `interpret ...` example of the README runs as written (the default model where it names none, the
    tiny classifier for `./my-classifier`), and exits 0; the one for an existing Ray cluster is parsed only. Where
    Ray is not installed (it is the `ray` extra), a Ray example says how to install it, as the README says."""
    args = [_PLACEHOLDERS.get(arg, arg).format(**places) for arg in shlex.split(line)[1:]]
    if _NEEDS_A_CLUSTER in line:
        _command(tuple(args[:1])).make_context(args[0], args[1:])
        return
    monkeypatch.chdir(tmp_path)
    result = run_cli(args)
    if "--engine" in args and importlib.util.find_spec("ray") is None:
        assert result.exit_code == 2 and 'pip install "transformer-audit[ray]"' in result.stderr, result.stderr
        return
    assert result.exit_code == 0, (line, result.stderr)


def test_family_table_shows_no_failing_test() -> None:
    """The family table is written from the matrix's results and never advertises a failing test; the writer
    refuses to write one, naming what failed."""
    import xml.etree.ElementTree as ElementTree

    sys.path.insert(0, str(README.parent / "tests" / "collect"))
    from family_table import END, START, results

    table = README.read_text(encoding="utf-8").split(START, 1)[1].split(END, 1)[0]
    assert "failed" not in table.replace("expected to fail", "")
    junit = ElementTree.fromstring('<testsuite><testcase name="test_a[gpt2-sdpa]"/><testcase name="test_b[gpt2]">'
                                   '<failure/></testcase></testsuite>')
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "junit.xml"
        ElementTree.ElementTree(junit).write(path)
        counts, failed = results(path)
    assert counts["gpt2"]["passed"] == 1 and failed == ["test_b[gpt2]"]
