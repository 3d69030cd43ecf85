"""Trained weights the package ships (`interpret/data/models/NAME.safetensors`), each checked against its sha256.

The known-answer models (the marker toy model, the five task models) and the default model's sentiment head
are trained once, checked, and shipped, so that what the tests and reports assert about them is the same on
every machine: training is not reproducible bit for bit across CPUs and thread counts. `read_weights` refuses
a file whose sha256 is not the one `SHA256SUMS` beside it lists (the format of `sha256sum -c`), in one line;
`write_weights` is the only writer, used by the retraining scripts (benchmarks/train_toy.py,
benchmarks/default_head.py --write), and records the new digest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from safetensors.torch import load, save
from torch import Tensor

from interpret.errors import ModelLoadError
from interpret.files.atomic import write_atomically

MODELS_DIR = Path(__file__).resolve().parent / "models"
SUMS = "SHA256SUMS"


def read_weights(name: str, directory: Path | None = None) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Return (tensors, metadata) of `name`.safetensors in `directory` (default MODELS_DIR), after checking its
    sha256 against `directory`/SHA256SUMS."""
    directory = MODELS_DIR if directory is None else directory
    path = directory / f"{name}.safetensors"
    expected = _sums(directory).get(path.name)
    if expected is None:
        raise ModelLoadError(f"{directory / SUMS} lists no {path.name}; reinstall transformer-audit.")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ModelLoadError(f"cannot read {path} ({error.strerror}); reinstall transformer-audit.") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise ModelLoadError(
            f"{path} has sha256 {actual[:16]}…, not the {expected[:16]}… that {SUMS} lists: the file is damaged or "
            "was changed; reinstall transformer-audit (or retrain it: benchmarks/train_toy.py)."
        )
    header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
    return load(data), header.get("__metadata__") or {}


def write_weights(
    name: str, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None, directory: Path | None = None
) -> Path:
    """Return the path `tensors` were written to as `name`.safetensors in `directory` (default MODELS_DIR), its
    sha256 recorded in SHA256SUMS there (both written atomically)."""
    directory = MODELS_DIR if directory is None else directory
    data = save({key: tensor.detach().cpu().contiguous() for key, tensor in tensors.items()}, metadata)
    path = write_atomically(directory / f"{name}.safetensors", data)
    sums = _sums(directory) | {path.name: hashlib.sha256(data).hexdigest()}
    write_atomically(directory / SUMS, "".join(f"{digest}  {file}\n" for file, digest in sorted(sums.items())))
    return path


def _sums(directory: Path) -> dict[str, str]:
    """Return file name -> sha256 from `directory`/SHA256SUMS ({} when there is none)."""
    path = directory / SUMS
    if not path.is_file():
        return {}
    lines = (line.split(maxsplit=1) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {file.lstrip("*"): digest for digest, file in lines}
