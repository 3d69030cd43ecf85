"""A text far longer than the model can read is refused before any tokenizer sees it (`interpret.reading.text_size`):
a real 20 MB one-line input through every command that tokenizes texts, exit 2 and one line in under 2 s, with
neither tokenizers, transformers nor torch imported; the bound is 256 bytes for each token the model reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import run
from hf_tiny import word_tokenizer

from interpret.errors import InputError
from interpret.inputs import encode
from interpret.reading.text_size import BYTES_PER_TOKEN, NO_LIMIT_TOKENS, byte_bound, check_text_bytes

BIG = 20_000_000
MINILM_BOUND = BYTES_PER_TOKEN * 512  # the default model reads at most 512 tokens


def _words(size: int) -> str:
    return ("the cat sat on the mat " * (size // 23 + 1))[:size]


@pytest.fixture(scope="module")
def big_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSON Lines file whose second example is one 20 MB line."""
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    path.write_text(json.dumps({"text": "a dog saw red"}) + "\n" + json.dumps({"text": _words(BIG)}) + "\n")
    return path


def _commands(source: Path, out: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", "--input", str(source), "-o", str(out / "r.html")],
        "audit": ["audit", "--input", str(source), "-o", str(out / "audit")],
        "evaluate": ["evaluate", "--input", str(source)],
        "heads": ["heads", "--input", str(source), "-o", str(out / "heads.html")],
    }


@pytest.fixture(scope="module")
def warm() -> None:
    """The command line's modules imported and its entry points read once, so the timing is the refusal's own."""
    for command in ("report", "audit", "evaluate", "heads", "collect"):
        assert run(command, "--help").exit_code == 0


@pytest.mark.parametrize("command", ["report", "audit", "evaluate", "heads", "collect"])
def test_a_20_mb_text_is_refused_before_tokenizing(command: str, big_input: Path, tmp_path: Path, warm: None) -> None:
    args = _commands(big_input, tmp_path).get(command) or ["collect", "--text", _words(BIG), "-o", str(tmp_path / "t")]
    started = time.perf_counter()
    result = run(*args)
    seconds = time.perf_counter() - started
    assert result.exit_code == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    name = "--text" if command == "collect" else "big.jsonl example 1"
    assert lines == [
        f"error: {name} is 20,000,000 bytes, more than the {MINILM_BOUND:,} a text may have (256 bytes for each token:"
        " the model reads at most 512 tokens); it is refused before tokenizing, so shorten it or split it into several"
        " texts."
    ]
    assert seconds < 2, f"{command} took {seconds:.2f} s to refuse"


@pytest.mark.parametrize("command", ["report", "audit", "evaluate", "heads"])
def test_the_refusal_runs_no_tokenizer_and_imports_nothing_heavy(command: str, big_input: Path, tmp_path: Path) -> None:
    probe = (
        "import atexit, json, sys, runpy\n"
        "atexit.register(lambda: print('HEAVY=' + json.dumps([m for m in ('torch', 'transformers', 'tokenizers',"
        " 'numpy') if m in sys.modules]), file=sys.stderr))\n"
        f"sys.argv = ['interpret', *{_commands(big_input, tmp_path)[command]!r}]\n"
        "runpy.run_module('interpret', run_name='__main__')\n"
    )
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - started
    assert done.returncode == 2 and "is 20,000,000 bytes" in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == "HEAVY=[]", done.stderr
    print(f"{command}: refused in {seconds:.2f} s wall, interpreter start included")


def test_the_bound_is_bytes_per_token_of_the_model_limit() -> None:
    assert byte_bound(512) == 131_072 and byte_bound(None) == BYTES_PER_TOKEN * NO_LIMIT_TOKENS == 1 << 20
    check_text_bytes([_words(131_072)], 512)  # exactly the bound passes
    with pytest.raises(InputError, match=r"^text 1 is 131,073 bytes, more than the 131,072"):
        check_text_bytes(["a dog", _words(131_073)], 512)
    # bytes, not characters: 32,769 four-byte characters pass the character count but not the byte bound
    with pytest.raises(InputError, match="is 131,076 bytes"):
        check_text_bytes(["😀" * 32_769], 512)
    with pytest.raises(InputError, match=r"has no token limit \(counted as 4096\)"):
        check_text_bytes([_words((1 << 20) + 1)], None)


def test_encode_refuses_before_tokenizing() -> None:
    tokenizer = word_tokenizer()
    started = time.perf_counter()
    with pytest.raises(InputError, match="text 0 is 20,000,000 bytes, more than the 16,384"):
        encode(tokenizer, _words(BIG), limit=64, max_length=16)
    with pytest.raises(InputError, match="continuation 0 is 20,000,000 bytes"):
        encode(tokenizer, "a dog", limit=64, continuations=_words(BIG))
    assert time.perf_counter() - started < 2
    assert encode(tokenizer, _words(16_384), limit=64, max_length=16).truncated == (True,)  # at the bound: cut
