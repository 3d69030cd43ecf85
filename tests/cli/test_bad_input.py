"""Every bad command line an adversarial tester tried (and more): one stderr line, the right exit code, no
traceback, a message naming only options that exist — and no model loaded, since the input alone shows it."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from cli_runner import run

from interpret.cli.main import cli

TEXT = "the cat sat on the mat"
LONG = " ".join(["the cat sat"] * 30)  # 92 tokens with [CLS] and [SEP]; the tiny models take 64


def _files(root: Path) -> dict[str, Path]:
    """Input and output files the table refers to by name."""
    files = {
        "data": ("data.jsonl", '{"text": "the cat sat", "label": "positive"}\n{"text": "a dog saw red"}\n'),
        "labels": ("labels.jsonl", '{"text": "the cat sat", "label": "happy"}\n'),
        "not_json": ("bad.jsonl", "{not json}\n"),
        "surrogate": ("surrogate.jsonl", '{"text": "bad \\ud800 text"}\n'),
        "empty": ("empty.jsonl", ""),
        "no_text_column": ("columns.csv", "sentence,label\nhi,1\n"),
        "wrong_suffix": ("data.txt", "the cat sat\n"),
        "plain_file": ("some-file", "not a directory\n"),
        "empty_text": ("empty.csv", "text,label\nthe cat,positive\n\"  \",negative\n"),
    }
    paths = {}
    for key, (name, content) in files.items():
        paths[key] = root / name
        paths[key].write_text(content, encoding="utf-8")
    paths["latin1"] = root / "latin1.jsonl"
    paths["latin1"].write_bytes('{"text": "caf\xe9"}\n'.encode("latin-1"))
    paths["folder"] = root / "folder"
    paths["folder"].mkdir()
    return paths


# (id, command line, exit code, fragment of the message). Placeholders: {cls} {gpt2} {t5} {vit} {clip} {bare} {pickle}
# model directories, {no_config} {bad_json} {remote_code} {unknown_type} broken ones, {tmp} a scratch folder,
# {unwritable} a folder that refuses new files, and the input files of `_files` by key.
R = ["report", "--model", "{cls}", "-a", "rollout"]
CASES = [
    # --layers / --heads
    ("layers-comma", [*R, "--text", TEXT, "--layers", ","], 2, "--layers ',' has an empty item"),
    ("layers-empty", [*R, "--text", TEXT, "--layers", ""], 2, "--layers '' has an empty item"),
    ("layers-double-comma", [*R, "--text", TEXT, "--layers", "0,,1"], 2, "empty item"),
    ("layers-word", [*R, "--text", TEXT, "--layers", "x"], 2, "'x' is not a layer index"),
    ("layers-float", [*R, "--text", TEXT, "--layers", "1.5"], 2, "'1.5' is not a layer index"),
    ("layers-too-high", [*R, "--text", TEXT, "--layers", "7"], 2, "layer 7 does not exist; this model has 2 layers"),
    ("layers-too-low", [*R, "--text", TEXT, "--layers", "-3"], 2, "layer -3 does not exist"),
    ("layers-repeated", [*R, "--text", TEXT, "--layers", "0,0"], 2, "names layer 0 twice"),
    ("layers-same-from-end", [*R, "--text", TEXT, "--layers", "0,-2"], 2, "same layer twice"),
    ("heads-too-high", [*R, "--text", TEXT, "--heads", "4"], 2, "head 4 does not exist; this model has 4 heads"),
    ("heads-word", [*R, "--text", TEXT, "--heads", "all"], 2, "'all' is not a head index"),
    # --target / --contrast
    ("target-index-too-high", [*R, "--text", TEXT, "--target", "7"], 2, "class 7 does not exist"),
    ("target-negative", [*R, "--text", TEXT, "--target", "-1"], 2, "class -1 does not exist"),
    ("target-unknown-label", [*R, "--text", TEXT, "--target", "neutral"], 2, "'neutral' is neither a class name nor a class index"),
    ("target-typo", [*R, "--text", TEXT, "--target", "positve"], 2, "Did you mean 'positive'?"),
    ("target-empty", [*R, "--text", TEXT, "--target", " "], 2, "--target is empty"),
    ("contrast-equals-target", [*R, "--text", TEXT, "--target", "positive", "--contrast", "positive"], 2, "equals --target"),
    ("contrast-same-class", [*R, "--text", TEXT, "--target", "1", "--contrast", "positive"], 2, "same class"),
    ("contrast-unknown", [*R, "--text", TEXT, "--contrast", "5"], 2, "class 5 does not exist"),
    ("target-bare-model", ["report", "--model", "{bare}", "--text", TEXT, "--target", "positive"], 2, "makes no decision to target"),
    ("target-token-unknown", ["report", "--model", "{gpt2}", "-a", "rollout", "--text", TEXT, "--target", "zebra"], 2, "not in the vocabulary"),
    ("target-token-id", ["report", "--model", "{gpt2}", "-a", "rollout", "--text", TEXT, "--target", "99999"], 2, "token id 99999 does not exist"),
    # analyzers and --set
    ("analyzer-typo", [*R, "--text", TEXT, "-a", "rolout"], 2, "Did you mean 'rollout'?"),
    ("analyzer-empty", [*R, "--text", TEXT, "-a", ""], 2, "analyzer '' is unknown"),
    ("set-unknown-key", [*R, "--text", TEXT, "--set", "rollout.head_fusoin=max"], 2, "Did you mean 'head_fusion'?"),
    ("set-bad-choice", [*R, "--text", TEXT, "--set", "rollout.head_fusion=median"], 2, "must be one of mean, max, min"),
    ("set-not-run", [*R, "--text", TEXT, "--set", "flow.rows=all"], 2, "add -a flow"),
    ("set-no-form", [*R, "--text", TEXT, "--set", "nonsense"], 2, "NAME.KEY=VALUE"),
    ("set-out-of-range", [*R, "--text", TEXT, "--set", "rollout.residual=2"], 2, "residual=2.0 is outside [0, 1]"),
    ("set-nan", [*R, "--text", TEXT, "--set", "rollout.residual=nan"], 2, "outside [0, 1]"),
    ("set-not-integer", [*R, "--text", TEXT, "--set", "rollout.start_layer=x"], 2, "must be an integer"),
    ("set-twice", [*R, "--text", TEXT, "--set", "rollout.residual=0.5", "--set", "rollout.residual=0.6"], 2, "twice"),
    ("set-contradiction", [*R, "--text", TEXT, "--set", "rollout.per_layer=true", "--set", "rollout.rows=readout"], 2, "per_layer needs rows='all'"),
    # texts and input files
    ("text-blank", [*R, "--text", "   "], 2, "--text is empty"),
    ("text-empty-second", [*R, "--text", TEXT, "--text", ""], 2, "--text is empty (the 2nd one)"),
    ("text-not-utf8", [*R, "--text", "caf\udce9"], 2, "not UTF-8"),
    ("no-input", ["report", "--model", "{cls}"], 2, "--text TEXT or --input FILE"),
    ("text-and-input", [*R, "--text", TEXT, "--input", "{data}"], 2, "exactly one of them"),
    ("input-missing", [*R, "--input", "{tmp}/missing.jsonl"], 2, "cannot read"),
    ("input-suffix", [*R, "--input", "{wrong_suffix}"], 2, "neither .jsonl nor .csv"),
    ("input-not-json", [*R, "--input", "{not_json}"], 2, "line 1 is not JSON"),
    ("input-lone-surrogate", [*R, "--input", "{surrogate}"], 2, "lone surrogate"),
    ("input-empty", [*R, "--input", "{empty}"], 2, "is empty"),
    ("input-no-text-column", [*R, "--input", "{no_text_column}"], 2, "no 'text' column"),
    ("input-not-utf8", [*R, "--input", "{latin1}"], 2, "is not UTF-8"),
    ("input-directory", [*R, "--input", "{folder}"], 2, "is a directory"),
    ("text-too-long", [*R, "--text", LONG], 2, "has 92 tokens but the model accepts at most 64"),
    ("max-length-over-limit", [*R, "--text", TEXT, "--max-length", "1000"], 2, "exceeds the model's limit of 64"),
    ("max-length-zero", [*R, "--text", TEXT, "--max-length", "0"], 2, "--max-length"),
    # outputs
    ("output-under-a-file", [*R, "--text", TEXT, "-o", "{plain_file}/r.html"], 2, "is a file, not a folder"),
    ("output-trailing-slash", [*R, "--text", TEXT, "-o", "{tmp}/newdir/"], 2, "is a directory"),
    ("output-existing-folder", [*R, "--text", TEXT, "-o", "{folder}"], 2, "is a directory"),
    ("output-name-too-long", [*R, "--text", TEXT, "-o", "{tmp}/" + "x" * 250 + ".html"], 2, "too long"),
    ("output-unwritable", [*R, "--text", TEXT, "-o", "{unwritable}/r.html"], 2, "cannot be written"),
    ("format-unknown", [*R, "--text", TEXT, "--format", "xml"], 2, "'xml' is not one of"),
    # size and memory limits
    ("max-bytes-zero", [*R, "--text", TEXT, "--max-bytes", "0"], 2, "less than one byte"),
    ("max-bytes-word", [*R, "--text", TEXT, "--max-bytes", "lots"], 2, "is not a size"),
    ("max-bytes-negative", [*R, "--text", TEXT, "--max-bytes", "-5MB"], 2, "is not a size"),
    ("max-bytes-too-small", [*R, "--text", TEXT, "--max-bytes", "100"], 2, "above --max-bytes 100 B"),
    ("max-memory-zero", [*R, "--text", TEXT, "--max-memory", "0"], 2, "--max-memory '0' is less than one byte"),
    ("max-memory-too-small", [*R, "--text", TEXT, "--max-memory", "1MB"], 2, "over --max-memory 1 MB"),
    # run options
    ("seed-negative", [*R, "--text", TEXT, "--seed", "-1"], 2, "--seed"),
    ("device-unknown", [*R, "--text", TEXT, "--device", "tpu"], 2, "'tpu' is not one of"),
    ("dtype-unknown", [*R, "--text", TEXT, "--dtype", "float8"], 2, "'float8' is not one of"),
    ("option-unknown", [*R, "--text", TEXT, "--colour"], 2, "No such option '--colour'"),
    # the model
    ("model-missing-dir", ["report", "--model", "{tmp}/nope", "--text", TEXT], 2, "no model directory"),
    ("model-is-a-file", ["report", "--model", "{plain_file}", "--text", TEXT], 2, "is a file, not a model directory"),
    ("model-uncached-hub-name", ["report", "--model", "some-org/never-cached-model", "--text", TEXT], 2, "not in the Hugging Face cache"),
    ("model-invalid-hub-name", ["report", "--model", "bad name!!", "--text", TEXT], 2, "neither a model directory nor a valid hub name"),
    ("model-pickle-only", ["report", "--model", "{pickle}", "--text", TEXT], 2, "--allow-pickle"),
    ("model-no-config", ["report", "--model", "{no_config}", "--text", TEXT], 2, "has no config.json"),
    ("model-config-not-json", ["report", "--model", "{bad_json}", "--text", TEXT], 2, "is not readable JSON"),
    ("model-remote-code", ["report", "--model", "{remote_code}", "--text", TEXT], 2, "remote code"),
    ("model-unknown-type", ["report", "--model", "{unknown_type}", "--text", TEXT, "-a", "rollout"], 2, "no adapter captures model type 'no-such-family'"),
    ("model-empty-name", ["report", "--model", "", "--text", TEXT], 2, "the model name is empty"),
    ("model-no-tokenizer", ["report", "--model", "{no_tokenizer}", "--text", TEXT, "-a", "rollout"], 2, "has no tokenizer"),
    ("model-vision", ["report", "--model", "{vit}", "--text", TEXT], 2, "is a vision model"),
    ("model-dual-report", ["report", "--model", "{clip}", "--text", TEXT], 2, "is a text-image dual encoder (clip)"),
    ("model-dual-collect", ["collect", "--model", "{clip}", "--text", TEXT], 2, "explain its pairs in Python"),
    ("model-dual-audit", ["audit", "--model", "{clip}", "--input", "{data}"], 2, "reads texts alone"),
    ("encoder-decoder-needs-decoder-text", ["report", "--model", "{t5}", "--text", TEXT], 2, "--decoder-text"),
    ("decoder-text-on-encoder", [*R, "--text", TEXT, "--decoder-text", "a dog"], 2, "--decoder-text is for encoder-decoder models"),
    ("decoder-text-count", ["report", "--model", "{t5}", "--text", TEXT, "--decoder-text", "a", "--decoder-text", "b"], 2, "2 --decoder-text for 1 text"),
    # language-model options
    ("generate-zero", [*R, "--text", TEXT, "--generate", "0"], 2, "--generate"),
    ("generate-on-classifier", [*R, "--text", TEXT, "--generate", "2"], 2, "--generate needs a language model"),
    ("generate-with-target", ["report", "--model", "{gpt2}", "--text", TEXT, "--generate", "2", "--target", "cat"], 2, "drop --target"),
    ("generate-with-decoder-text", ["report", "--model", "{t5}", "--text", TEXT, "--decoder-text", "a", "--generate", "2"], 2, "drop --decoder-text"),
    ("continuation-on-classifier", [*R, "--text", TEXT, "--continuation", "a dog"], 2, "--continuation needs a decoder language model"),
    ("continuation-count", ["report", "--model", "{gpt2}", "--text", TEXT, "--continuation", "a", "--continuation", "b"], 2, "one --continuation per text"),
    ("continuation-empty", ["report", "--model", "{gpt2}", "--text", TEXT, "--continuation", " "], 2, "--continuation is empty"),
    ("continuation-with-target", ["report", "--model", "{gpt2}", "--text", TEXT, "--continuation", "a", "--target", "cat"], 2, "drop --target"),
    # collect
    ("collect-name-typo", ["collect", "--model", "{cls}", "--text", TEXT, "--names", "blocks.*.attn.hook_patern"], 2, "Did you mean"),
    ("collect-layer", ["collect", "--model", "{cls}", "--text", TEXT, "--layers", "9"], 2, "layer 9 does not exist"),
    ("collect-heads-comma", ["collect", "--model", "{cls}", "--text", TEXT, "--heads", ","], 2, "empty item"),
    ("collect-stdout", ["collect", "--model", "{cls}", "--text", TEXT, "-o", "-"], 2, "binary safetensors file"),
    ("collect-text-empty", ["collect", "--model", "{cls}", "--text", ""], 2, "--text is empty"),
    ("collect-output-folder", ["collect", "--model", "{cls}", "--text", TEXT, "-o", "{folder}"], 2, "is a directory"),
    ("collect-reduce", ["collect", "--model", "{cls}", "--text", TEXT, "--reduce", "median"], 2, "'median' is not one of"),
    ("collect-no-text", ["collect", "--model", "{cls}"], 2, "Missing option '--text'"),
    ("collect-encoder-decoder", ["collect", "--model", "{t5}", "--text", TEXT], 2, "one --decoder-text per --text"),
    # audit
    ("audit-input-missing", ["audit", "--model", "{cls}", "--input", "{tmp}/missing.jsonl"], 2, "cannot read"),
    ("audit-batch-size", ["audit", "--model", "{cls}", "--input", "{data}", "--batch-size", "0"], 2, "--batch-size"),
    ("audit-gold-unlabelled", ["audit", "--model", "{cls}", "--input", "{data}", "--target", "gold"], 2, "data.jsonl line 2 has no label"),
    ("audit-gold-foreign-label", ["audit", "--model", "{cls}", "--input", "{labels}", "--target", "gold", "-a", "rollout"], 2, "labels.jsonl line 1: 'happy' is neither a class name"),
    ("audit-foreign-label", ["audit", "--model", "{cls}", "--input", "{labels}", "-a", "rollout"], 2, "labels.jsonl line 1: 'happy' is neither a class name"),
    ("report-foreign-label", ["report", "--model", "{cls}", "--input", "{labels}", "-a", "rollout"], 2, "labels.jsonl line 1: 'happy' is neither a class name"),
    ("audit-empty-text", ["audit", "--model", "{cls}", "--input", "{empty_text}", "-a", "rollout"], 2, "empty.csv line 3 has an empty text"),
    ("audit-stdout", ["audit", "--model", "{cls}", "--input", "{data}", "-o", "-"], 2, "writes a directory of tables"),
    ("audit-output-is-file", ["audit", "--model", "{cls}", "--input", "{data}", "-o", "{plain_file}"], 2, "is a file"),
    ("audit-encoder-decoder", ["audit", "--model", "{t5}", "--input", "{data}"], 2, "is an encoder-decoder T5ForConditionalGeneration; the audit reads one text"),
    ("audit-set-key", ["audit", "--model", "{cls}", "--input", "{data}", "-a", "rollout", "--set", "rollout.nope=1"], 2, "has no parameter 'nope'"),
    ("audit-target-choice", ["audit", "--model", "{cls}", "--input", "{data}", "--target", "label"], 2, "'label' is not one of"),
    ("audit-text-too-long", ["audit", "--model", "{cls}", "--input", "{long_data}"], 2, "example 1 has 92 tokens"),
    # analyzers and the group itself
    ("show-typo", ["analyzers", "show", "rolout"], 2, "Did you mean 'rollout'?"),
    ("show-missing-name", ["analyzers", "show"], 2, "Missing argument 'NAME'"),
    ("list-format", ["analyzers", "list", "--format", "xml"], 2, "'xml' is not one of"),
    ("analyzers-unknown-command", ["analyzers", "frobnicate"], 2, "No such command 'frobnicate'"),
    ("unknown-command", ["frobnicate"], 2, "No such command 'frobnicate'"),
]
# Tokens a message may name because they are the bad value itself.
FOREIGN = {"option-unknown": {"--colour"}}


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-inputs")
    paths = _files(root)
    paths["tmp"] = root
    paths["long_data"] = root / "long.jsonl"
    paths["long_data"].write_text(f'{{"text": "{TEXT}"}}\n{{"text": "{LONG}"}}\n', encoding="utf-8")
    return paths


def _options_of(args: list[str]) -> set[str]:
    """Return every option name the command that `args` invokes (and the top-level group) accepts."""
    names = {"--help", "-h", "--version"}
    command: click.Command = cli
    context = click.Context(cli)
    for word in args:
        if not isinstance(command, click.Group):
            break
        sub = command.get_command(context, word)
        if sub is None:
            break
        command = sub
        names |= {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    return names


@pytest.mark.parametrize(("case", "args", "code", "fragment"), CASES, ids=[case[0] for case in CASES])
def test_bad_command_line(
    case: str, args: list[str], code: int, fragment: str, places: dict[str, Path], loads: list[str],
    classifier_dir: Path, gpt2_dir: Path, t5_dir: Path, vit_dir: Path, clip_dir: Path, bare_dir: Path,
    pickle_dir: Path, odd_dirs: dict[str, Path], unwritable_dir: Path,
) -> None:
    names = {"cls": classifier_dir, "gpt2": gpt2_dir, "t5": t5_dir, "vit": vit_dir, "clip": clip_dir, "bare": bare_dir,
             "pickle": pickle_dir, "unwritable": unwritable_dir, **odd_dirs, **places}
    filled = [re.sub(r"\{(\w+)\}", lambda m: str(names[m.group(1)]), word) for word in args]
    result = run(*filled)
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    message = lines[0]
    assert message.startswith("error: ") and "Traceback" not in result.stderr
    assert fragment in message, message
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])(?![\w-])", message))
    unknown = named - _options_of(filled) - FOREIGN.get(case, set())
    assert not unknown, f"{message!r} names options that do not exist: {unknown}"
    assert loads == [], f"the model was loaded although the command line alone shows the problem: {loads}"
    assert result.stdout == ""


def test_the_table_covers_every_command() -> None:
    commands = {args[0] for _, args, _, _ in CASES}
    assert {"report", "collect", "audit", "analyzers"} <= commands
    assert len(CASES) >= 60
