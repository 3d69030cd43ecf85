"""Byte-identity of what users keep, before and after a refactor (issue 25: "behaviour is unchanged").

Three runs, each through the command line exactly as a user types it:

- ``readme``: the README sentence on the built-in default model, as the HTML page and as JSON, and once more with
  classes side by side (``--target positive --contrast negative``: the class comparison's re-runs);
- ``audit``: a 50-row audit of the shipped held-out sentences with evidence (every table it writes);
- ``long``: a 4,096-token report on a seeded tiny Llama-shaped model (4 layers, 4 heads), streamed, as JSON.

Usage, once in each checkout to compare (each with its own environment), then compare the two folders::

    python benchmarks/identical.py run OUT_BEFORE        # in the old checkout
    python benchmarks/identical.py run OUT_AFTER         # in the new one
    python benchmarks/identical.py compare OUT_BEFORE OUT_AFTER

``compare`` prints one row per file (identical, differs, only on one side) and, for a text file that differs,
its first differing line on each side; it exits 1 when anything differs. A report's creation time and wall time
(the JSON's `run.created` and `run.wall_seconds`, the page's "Created" line) are blanked before comparing: they
are the only things two identical runs write differently. An audit's parts are left out: where one part ends
depends on the wall time (`runner.PART_SECONDS`), never what the final tables hold.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

README_SENTENCE = "The service was slow, but the food was wonderful."
AUDIT_ROWS = 50
LONG_TOKENS = 4096
# A report's creation time and wall time: JSON fields, and the page's line (the page also holds the JSON).
VOLATILE = (
    (re.compile(rb'"created": ?"[^"]*"'), b'"created": ""'),
    (re.compile(rb'"wall_seconds": ?[0-9.e+-]+'), b'"wall_seconds": 0'),
    (re.compile(rb"<dt>Created</dt><dd>[^<]*</dd>"), b"<dt>Created</dt><dd></dd>"),
)


def _cli(*args: str, cwd: Path | None = None) -> None:
    """Run `python -m interpret ARGS` offline (in `cwd`); stop with its stderr if it fails."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "interpret", *args], env=env, capture_output=True, text=True, cwd=cwd)
    if done.returncode:
        sys.exit(f"interpret {' '.join(args[:1])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _tiny_llama(directory: Path) -> None:
    """Save a seeded Llama-shaped model (4 layers, 4 heads, 8192 positions) and a word-level tokenizer."""
    import torch
    import transformers

    from interpret.reference import vocab

    tokenizer = vocab.word_tokenizer("the cat sat on mat a dog saw red blue".split(), model_max_length=8192)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, pad_token_id=0, bos_token_id=2, eos_token_id=3,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def run(out: Path) -> None:
    """Write the three runs' outputs under `out` (which must not exist yet)."""
    out.mkdir(parents=True)
    readme = out / "readme"
    readme.mkdir()
    _cli("report", "--text", README_SENTENCE, "-o", str(readme / "report.html"), "-q")
    _cli("report", "--text", README_SENTENCE, "--format", "json", "-o", str(readme / "report.json"), "-q")
    _cli("report", "--text", README_SENTENCE, "--target", "positive", "--contrast", "negative", "-o",
         str(readme / "classes.html"), "-q")

    rows = Path(__file__).resolve().parents[1] / "interpret" / "data" / "sentiment_heldout.jsonl"
    data = out / "audit-input.jsonl"
    data.write_text("".join(rows.read_text(encoding="utf-8").splitlines(keepends=True)[:AUDIT_ROWS]), "utf-8")
    _cli("audit", "--input", str(data), "--evidence", "-o", str(out / "audit"), "-q", "--no-progress")

    model = out / "tiny-llama"
    _tiny_llama(model)
    words = " ".join(["cat"] * (LONG_TOKENS - 2))  # the word tokenizer adds [CLS] and [SEP]
    # run from `out`, naming the model relatively: the report names the model as given
    _cli("report", "--model", model.name, "--text", words, "--streaming", "on", "--format", "json",
         "-o", str(out / "long" / "report.json"), "-q", cwd=out)


def _steady(data: bytes) -> bytes:
    """Return `data` with a report's creation time and wall time blanked."""
    for pattern, blank in VOLATILE:
        data = pattern.sub(blank, data)
    return data


def _first_difference(a: bytes, b: bytes) -> str:
    left, right = a.decode("utf-8", "replace").splitlines(), b.decode("utf-8", "replace").splitlines()
    for number, (x, y) in enumerate(zip(left, right), start=1):
        if x != y:
            return f"line {number}: {x[:160]!r} | {y[:160]!r}"
    return f"one side has {abs(len(left) - len(right))} more lines"


def compare(before: Path, after: Path) -> int:
    """Print one row per file under either folder; return 1 when any compared file differs."""
    names = sorted({p.relative_to(root).as_posix() for root in (before, after) for p in root.rglob("*")
                    if p.is_file() and "tiny-llama" not in p.parts and "parts" not in p.parts})
    differs = 0
    for name in names:
        a, b = before / name, after / name
        if not (a.is_file() and b.is_file()):
            state, differs = f"only in {'before' if a.is_file() else 'after'}", differs + 1
        elif _steady(a.read_bytes()) == _steady(b.read_bytes()):
            state = "identical" if a.read_bytes() == b.read_bytes() else "identical but for creation and wall time"
        else:
            state, differs = "DIFFERS  " + _first_difference(_steady(a.read_bytes()), _steady(b.read_bytes())), differs + 1
        print(f"{name:<44} {state}")
    print(json.dumps({"files": len(names), "differ": differs}))
    return 1 if differs else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run").add_argument("out", type=Path)
    both = sub.add_parser("compare")
    both.add_argument("before", type=Path)
    both.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.out)
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
