"""Where a model's files are and what its config.json says, found at once and without torch or transformers.

`locate` answers without touching the network: a local directory saved with `save_pretrained`, or a hub
name whose files are in the local Hugging Face cache. Anything else is a one-line ModelLoadError that says
how to pass a local directory — never a half-minute of network retries. The checks on the directory (a
config without remote code, weights in safetensors unless pickle is allowed, an index whose shards all lie
inside the checkpoint) are the ones `interpret.load` applies before transformers sees the files, so a command
line can make them before importing torch. `weight_files` names the files the loader reads for the weights
(what the audit's weight digest hashes).

The one config with an `auto_map` that is accepted is the toolkit's own pruned format (`interpret heads
--prune-to`, model types "bert_pruned" / "roberta_pruned"): its classes are in this package, so
`interpret.load` reads it with them and never runs the modeling file beside it, which must be this
package's own byte for byte (a different file defines a different model than the one that would be audited).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interpret.errors import ModelLoadError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json")
# The weight files transformers reads from a directory, the first that exists (modeling_utils'
# _get_resolved_checkpoint_files: a single file before its index, safetensors before pickle).
_WEIGHT_NAMES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# The toolkit's pruned model types (interpret.heads.pruned_bert) -> the stock model type `interpret.load` gives.
PRUNED_TYPES = {"bert_pruned": "bert", "roberta_pruned": "roberta"}
PRUNED_MODULE = "modeling_bert_pruned"  # pruned_bert.MODULE_FILE without .py (a test keeps the two equal)


@dataclass(frozen=True)
class Checkpoint:
    """A located model.

    name: the name or path as given. directory: the folder holding its config.json (a hub snapshot in the
    cache for a hub name). hub: whether it was found in the Hugging Face cache rather than given as a path.
    """

    name: str
    directory: Path
    hub: bool = False

    @property
    def root(self) -> Path:
        """The folder the checkpoint's files may resolve into: its directory, or for a hub snapshot the model's
        folder in the cache (a snapshot's files are links to blobs beside it)."""
        return root_of(self.directory, self.hub)

    def config(self) -> dict[str, Any]:
        """Return config.json as a dict (ModelLoadError when it is not a readable JSON object)."""
        return read_json(self.directory / "config.json")

    def weight_bytes(self) -> int:
        """Return the size of the weight files the loader reads, following cache links."""
        return sum(path.stat().st_size for path in weight_files(self.directory) if not path.name.endswith(".json"))


def root_of(directory: Path, hub: bool) -> Path:
    """Return the folder a checkpoint's files may resolve into (see Checkpoint.root), symbolic links resolved."""
    return (directory.parent.parent if hub else directory).resolve()


def looks_like_path(name: str) -> bool:
    """Return whether `name` can only mean a filesystem path (a hub name is `name` or `org/name`)."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def locate(name: str | os.PathLike[str], *, allow_pickle: bool = False, revision: str | None = None) -> Checkpoint:
    """Return the Checkpoint of a local model directory or of a hub name cached locally; ModelLoadError at once
    for anything else (a missing path, a file, an invalid or uncached hub name, a directory without weights)."""
    text = os.fspath(name)
    if not text.strip():
        raise ModelLoadError("the model name is empty; give a directory saved with save_pretrained or a hub name.")
    local = Path(text).expanduser()
    if local.is_dir():
        check_local_checkpoint(local, allow_pickle)
        return Checkpoint(text, local)
    if local.exists():
        raise ModelLoadError(f"{text!r} is a file, not a model directory; give the directory saved with save_pretrained.")
    if looks_like_path(text):
        raise ModelLoadError(f"no model directory at {text!r}; give a directory saved with save_pretrained.")
    directory = cached_snapshot(text, revision)
    check_local_checkpoint(directory, allow_pickle)
    return Checkpoint(text, directory, hub=True)


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path:
    """Return the cached snapshot directory of hub model `repo_id` (its config.json is there), or raise at once."""
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except (HFValidationError, ValueError):
        raise ModelLoadError(
            f"{repo_id!r} is neither a model directory nor a valid hub name; give the path of a directory saved with"
            " save_pretrained (on the command line: --model ./my-model)."
        ) from None
    if not isinstance(found, str):
        raise ModelLoadError(
            f"{repo_id!r} is not a local directory and not in the Hugging Face cache ({constants.HF_HUB_CACHE});"
            " give the path of a directory saved with save_pretrained (on the command line: --model ./my-model),"
            f" or download the model first (hf download {repo_id})."
        )
    return Path(found).parent


def check_local_checkpoint(directory: Path, allow_pickle: bool, hub: bool = False) -> None:
    """Raise ModelLoadError unless `directory` holds a config without remote code (the toolkit's own pruned
    format excepted) and loadable weights, every shard an index names inside the checkpoint (`root_of`)."""
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{str(directory)!r} has no config.json; point to a saved model directory.")
    for name in _REMOTE_CODE_FILES:
        path = directory / name
        if path.is_file() and "auto_map" in read_json(path) and not (name == "config.json" and is_pruned(directory)):
            raise ModelLoadError(
                f"{str(path)!r} asks for remote code (auto_map); interpret.load never runs code from a checkpoint;"
                " use a model whose architecture transformers ships, or load it yourself after reviewing its code."
            )
    for index in (directory / name for name in _WEIGHT_NAMES if name.endswith(".json")):
        if index.is_file():
            shard_files(index, root_of(directory, hub))  # raises for a shard outside the checkpoint or missing
    files = [path.name for path in directory.iterdir() if path.is_file()]
    if any(name.endswith(".safetensors") or name.endswith(".safetensors.index.json") for name in files):
        return
    pickled = sorted(name for name in files if name.endswith(PICKLE_SUFFIXES) or name.endswith(".bin.index.json"))
    if not pickled:
        raise ModelLoadError(f"{str(directory)!r} holds no weights (no *.safetensors); save the model there first.")
    if not allow_pickle:
        raise ModelLoadError(
            f"{str(directory)!r} holds only pickle weights ({pickled[0]}); convert them to safetensors, or, if you"
            " trust the file, pass allow_pickle=True (on the command line: --allow-pickle)."
        )


def weight_files(directory: Path) -> list[Path]:
    """Return the files the loader reads for the weights of `directory`: the first of model.safetensors, its
    index and every shard the index names, pytorch_model.bin, its index and shards; [] when there is none."""
    for name in _WEIGHT_NAMES:
        path = directory / name
        if path.is_file():
            return [path, *shard_files(path)] if name.endswith(".json") else [path]
    return []


def shard_files(index: Path, root: Path | None = None) -> list[Path]:
    """Return the shards `index` names, in order; ModelLoadError for a malformed index, a shard that is missing
    or (given `root`) one whose path leaves `root` once symbolic links are resolved (transformers would read it
    from there: `os.path.join(directory, name)`)."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(name, str) for name in weight_map.values()):
        raise ModelLoadError(f"{str(index)!r} has no weight_map of tensor names to shard files; repair or re-save it.")
    shards = []
    for name in dict.fromkeys(weight_map.values()):
        path = index.parent / name
        if root is not None and not path.resolve().is_relative_to(root):
            raise ModelLoadError(
                f"{str(index)!r} names the shard {name!r}, which lies outside {str(root)!r} (links resolved): a"
                " checkpoint is read from its own directory only; copy the shard into it and name it there."
            )
        if not path.is_file():
            raise ModelLoadError(f"{str(index)!r} names the shard {name!r}, which is missing; restore it or re-save the model.")
        shards.append(path)
    return shards


def is_pruned(directory: Path) -> bool:
    """Return whether config.json in `directory` is the toolkit's own pruned format: a pruned model type, an
    auto_map naming only classes of the pruned modeling file, and that file (when present) this package's own;
    ModelLoadError for a pruned model type whose modeling file differs (it defines another model)."""
    config = read_json(directory / "config.json")
    if config.get("model_type") not in PRUNED_TYPES:
        return False
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict) or not all(
        isinstance(value, str) and value.startswith(f"{PRUNED_MODULE}.") for value in auto_map.values()
    ):
        return False
    modeling = directory / f"{PRUNED_MODULE}.py"
    if modeling.exists() and modeling.read_bytes() != _pruned_source().read_bytes():
        raise ModelLoadError(
            f"{str(modeling)!r} differs from this toolkit's pruned model ({_pruned_source()}), so it may define"
            " another model than the one interpret.load would read (its code is never run); write the model again"
            " with `interpret heads --prune-to`, or replace the file with the toolkit's after reviewing the change."
        )
    return True


def _pruned_source() -> Path:
    """Return the path of interpret/heads/pruned_bert.py (found without importing it: it imports transformers)."""
    return Path(__file__).resolve().parents[1] / "heads" / "pruned_bert.py"


def read_json(path: Path) -> dict[str, Any]:
    """Return the JSON object in `path`; ModelLoadError naming the file when it is unreadable or not an object."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{str(path)!r} is not readable JSON ({err}); repair or re-save the checkpoint.") from None
    if not isinstance(content, dict):
        raise ModelLoadError(f"{str(path)!r} does not hold a JSON object; repair or re-save the checkpoint.")
    return content
