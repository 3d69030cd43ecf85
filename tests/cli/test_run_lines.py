"""The lines a run prints on stderr besides its progress bar: the collector's capture line once per new peak,
not once per collect call; an audit's estimate of its time after the first batch."""

from __future__ import annotations

import re
from pathlib import Path

from cli_runner import run

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2}


def _captures(stderr: str) -> list[float]:
    """Return the bytes each "capture will hold N UNIT" line on stderr names, in order (bar redraws aside)."""
    sizes = []
    for piece in stderr.split("capture will hold ")[1:]:
        number, unit = piece.split()[:2]
        sizes.append(float(number) * UNITS[unit])
    return sizes


def _audit(classifier_dir: Path, tmp_path: Path, texts: list[str], *flags: str, analyzers: tuple[str, ...] = ("rollout",)) -> str:
    data = tmp_path / f"data{len(list(tmp_path.iterdir()))}.csv"
    data.write_text("text,label\n" + "".join(f"{text},positive\n" for text in texts), encoding="utf-8")
    result = run("audit", "--model", str(classifier_dir), "--input", str(data), "-o", str(data.with_suffix("")),
                 *(f"-a{name}" for name in analyzers), *flags)
    assert result.exit_code == 0, result.stderr
    return result.stderr


def test_an_audit_states_its_capture_once_not_once_per_batch(classifier_dir: Path, tmp_path: Path) -> None:
    # 20 rows of one length in batches of 8, 8, 4: before, one line for the decision's pass (0 B) and one per batch
    stderr = _audit(classifier_dir, tmp_path, ["the cat sat on the mat"] * 20)
    assert len(_captures(stderr)) == 1 and _captures(stderr)[0] > 0, stderr
    # -v shows every capture (the drivers' re-runs, 0 B each, left out)
    assert len(_captures(_audit(classifier_dir, tmp_path, ["the cat sat on the mat"] * 20, "-v", "--drivers", "0"))) == 4


def test_a_larger_later_capture_is_stated_again(classifier_dir: Path, tmp_path: Path) -> None:
    # the second batch's texts are longer: its capture is a new peak; the third batch's (short, 4 rows) is not
    texts = ["a dog"] * 8 + ["the cat sat on the mat and a dog saw the red mat"] * 8 + ["a dog"] * 4
    sizes = _captures(_audit(classifier_dir, tmp_path, texts))
    assert len(sizes) == 2 and sizes[0] < sizes[1], sizes


def test_an_audit_states_its_rows_analyzers_and_time_after_the_first_batch(classifier_dir: Path, tmp_path: Path) -> None:
    stderr = _audit(classifier_dir, tmp_path, ["the cat sat on the mat"] * 20, analyzers=("rollout", "attention_entropy"))
    lines = re.findall(r"auditing [^\n]*? took [0-9.]+ s\)", stderr)  # the bar redraws on the same line
    assert len(lines) == 1, stderr
    assert re.fullmatch(r"auditing 20 rows with rollout, attention_entropy: about [0-9]+ s"
                        r" \(first batch of 8 took [0-9.]+ s\)", lines[0]), lines[0]
    assert "auditing" not in _audit(classifier_dir, tmp_path, ["the cat sat on the mat"] * 20, "-q")
