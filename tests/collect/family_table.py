"""The README's family table, written from the family matrix's test results (never by hand).

    python tests/collect/family_table.py

runs tests/collect/test_hf_matrix.py, and writes one row per family of `hf_tiny.MATRIX` between the
`<!-- family-table -->` markers of README.md: what the family exercises, its kind, the adapter that serves it,
the kernels it was loaded with, the hook points it does not offer, and how many of its matrix tests passed.
The matrix test `test_readme_family_table_matches_the_models` checks that every row's description still
matches the model (so a change that alters what a family offers needs the table written again).
A run with a failing (or erroring) test writes nothing: it names the failures and exits 1, so the README never
advertises a family with a failing test (`tests/test_readme.py` refuses such a table too).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
START, END = "<!-- family-table -->", "<!-- /family-table -->"
README_ROWS = "regenerate the table with: python tests/collect/family_table.py"
HEADER = (
    "| family | kind | what it exercises | adapter | kernels | hook points it does not offer | matrix tests |",
    "|---|---|---|---|---|---|---|",
)
_LAYER = re.compile(r"blocks\.\d+\.")


def family_row(family: str, model: Any, processor: Any) -> list[str]:
    """Return the row's cells that describe the family (all but the test results), from the model itself."""
    from hf_tiny import MATRIX

    from interpret.capture.api import capturable_for
    from interpret.capture.hf.registry import adapter_for

    spec = MATRIX[family]
    capturable = capturable_for(model, processor)
    missing = sorted({_LAYER.sub("blocks.{i}.", name) for name in capturable.unsupported})
    return [
        f"`{model.config.model_type}`",
        capturable.kind if spec.category != "dual" else "dual encoder",
        spec.what,
        adapter_for(model).name,
        ", ".join(spec.implementations),
        ", ".join(f"`{name}`" for name in missing) or "none",
    ]


def readme_rows() -> dict[str, list[str]]:
    """Return {family: the row's descriptive cells} from README.md's family table."""
    text = README.read_text(encoding="utf-8")
    if START not in text or END not in text:
        return {}
    block = text.split(START, 1)[1].split(END, 1)[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        family = cells[0].strip("`")
        rows[_family_named(family)] = cells[:-1]
    return rows


def _family_named(model_type: str) -> str:
    from hf_tiny import MATRIX

    for name, spec in MATRIX.items():
        if spec.config().model_type == model_type:
            return name
    return model_type


def results(junit: Path) -> tuple[dict[str, Counter[str]], list[str]]:
    """Return ({family: Counter(passed=..., skipped=...)}, the names of the tests that failed or erred) from a
    pytest junit file."""
    from hf_tiny import MATRIX

    counts: dict[str, Counter[str]] = {family: Counter() for family in MATRIX}
    failed = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(case.get("name", ""))
            continue
        match = re.search(r"\[(.+?)\]$", case.get("name", ""))
        if not match:
            continue
        family = next((f for f in sorted(MATRIX, key=len, reverse=True) if match.group(1).startswith(f)), None)
        if family is not None:
            counts[family]["skipped" if case.find("skipped") is not None else "passed"] += 1
    return counts, failed


def _expected(family: str) -> str:
    """Return what the matrix marks as expected to fail for `family`: each strict xfail's test and reason."""
    import test_hf_matrix

    found = set()
    for name, test in vars(test_hf_matrix).items():
        for mark in getattr(test, "pytestmark", []):
            params = mark.args[1] if mark.name == "parametrize" and len(mark.args) > 1 else ()
            for param in params:
                if getattr(param, "values", (None,))[0] == family:
                    found |= {f"{name}: {m.kwargs.get('reason', '')}" for m in param.marks if m.name == "xfail"}
    return "; ".join(sorted(found)) or "see the matrix"


def main() -> int:
    """Run the matrix, then write the table when every test passed (or failed as expected); return 0, or 1
    naming the failures and writing nothing."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "collect")]
    from hf_tiny import MATRIX, tiny_model, word_tokenizer

    from interpret.files.atomic import write_atomically

    with tempfile.TemporaryDirectory() as directory:
        junit = Path(directory) / "matrix.xml"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
             str(ROOT / "tests" / "collect" / "test_hf_matrix.py"), f"--junitxml={junit}",
             "--deselect", "tests/collect/test_hf_matrix.py::test_readme_family_table_matches_the_models"],
            cwd=ROOT,
        )
        counts, failed = results(junit) if junit.is_file() else ({}, ["the matrix (no results)"])
    if failed or done.returncode != 0:
        print(f"the matrix did not pass (pytest exit {done.returncode}; failed: {', '.join(failed) or 'none recorded'});"
              " README.md not written: fix the failures and run again.", file=sys.stderr)
        return 1
    lines = list(HEADER)
    for family, spec in MATRIX.items():
        model = tiny_model(family, "eager")
        processor = None if spec.category == "vision" else word_tokenizer()
        count = counts[family]
        verdict = f"{count['passed']} passed"
        if count["skipped"]:
            verdict += f", {count['skipped']} expected to fail ({_expected(spec.name)})"
        lines.append("| " + " | ".join([*family_row(family, model, processor), verdict]) + " |")
    text = README.read_text(encoding="utf-8")
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    write_atomically(README, f"{before}{START}\n" + "\n".join(lines) + f"\n{END}{after}")
    print(f"wrote {len(lines) - 2} rows to {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
