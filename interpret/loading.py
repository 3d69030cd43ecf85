"""`load`: a Hugging Face model and its tokenizer (or image processor), safely.

Safe means: no code from the checkpoint ever runs (`trust_remote_code=False` is passed explicitly, and a
config that asks for remote code is refused before transformers sees it, so nothing can prompt or hang);
weights are read from safetensors unless the caller opts into pickle checkpoints with `allow_pickle=True`;
a local directory, and by default a hub name, is read with `local_files_only=True`: a hub name that is not in
the local Hugging Face cache fails at once (`interpret.checkpoint.locate`) instead of retrying the network.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from interpret.checkpoint import PICKLE_SUFFIXES, check_local_checkpoint, locate
from interpret.errors import ModelLoadError

log = logging.getLogger("interpret")

__all__ = ["PICKLE_SUFFIXES", "check_local_checkpoint", "load", "load_preprocessor", "resolve_device", "resolve_dtype"]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model")
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


def resolve_device(device: str | torch.device) -> torch.device:
    """Return the torch device for `auto` (CUDA when available, else CPU), `cpu` or `cuda[:N]`."""
    name = str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device={name!r} but no CUDA device is available; use device='cpu' or 'auto'.")
        return torch.device(name)
    raise ModelLoadError(f"device={name!r} is not known; use 'auto', 'cpu' or 'cuda'.")


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str:
    """Return the torch dtype to load with: float32 by default, `auto` keeps the checkpoint's."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ModelLoadError(f"dtype={dtype!r} is not known; use one of {', '.join(_DTYPES)}, 'auto' or a torch.dtype.")


def _short(err: BaseException, limit: int = 160) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _model_class(config: Any) -> Any:
    """Return the transformers class named first in config.architectures, or AutoModel."""
    import transformers

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, str(name), None)
        if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
            return cls
    return transformers.AutoModel


def load(
    path_or_name: str | os.PathLike[str],
    device: str | torch.device = "auto",
    dtype: str | torch.dtype | None = None,
    *,
    attn_implementation: str | None = None,
    allow_pickle: bool = False,
    local_files_only: bool | None = None,
    revision: str | None = None,
) -> tuple[nn.Module, Any | None]:
    """Return (model in eval mode on `device`, tokenizer or image processor, or None when none is saved).

    path_or_name: a local directory, or a hub name found in the local Hugging Face cache (both read offline).
    dtype: None loads float32; "auto" keeps the checkpoint's dtype; or "bfloat16", "float16", a torch.dtype.
    attn_implementation: "sdpa" (transformers' default), "eager", ...; the collector returns the true
        pattern under any of them.
    allow_pickle: accept .bin/.pt checkpoints (pickle can run code: only for files you trust).
    local_files_only: None (default) reads only local files and refuses an uncached hub name at once;
        False lets transformers download a hub name that is not cached.
    The model class is the first of config.architectures that transformers ships (so task heads are kept),
    else AutoModel.
    """
    import transformers

    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype)
    location = os.fspath(path_or_name)
    is_local = Path(location).expanduser().is_dir()
    if local_files_only is False and not is_local:
        offline = False  # the caller asked for the network: transformers may download the name
    else:
        checkpoint = locate(location, allow_pickle=allow_pickle, revision=revision)  # raises at once
        location = str(checkpoint.directory) if not checkpoint.hub else location
        offline = True
    common: dict[str, Any] = {"trust_remote_code": False, "local_files_only": offline, "revision": revision}
    try:
        config = transformers.AutoConfig.from_pretrained(location, **common)
    except Exception as err:  # transformers raises OSError, ValueError or KeyError for bad checkpoints
        raise ModelLoadError(
            f"cannot read the config of {location!r} ({_short(err)}); give a directory saved with save_pretrained,"
            " or a hub name that is cached (offline) or reachable."
        ) from None
    if getattr(config, "auto_map", None):
        raise ModelLoadError(
            f"{location!r} asks for remote code (auto_map); interpret.load never runs code from a checkpoint."
        )
    options: dict[str, Any] = {"config": config, "dtype": torch_dtype, "use_safetensors": None if allow_pickle else True}
    if attn_implementation is not None:
        options["attn_implementation"] = attn_implementation
    model_class = _model_class(config)
    try:
        model = model_class.from_pretrained(location, **common, **options)
    except Exception as err:
        hint = (
            ", or pass allow_pickle=True (CLI: --allow-pickle) for a trusted .bin checkpoint" if not allow_pickle else ""
        )
        raise ModelLoadError(
            f"cannot load {model_class.__name__} from {location!r} ({_short(err)}); check the checkpoint's files{hint}."
        ) from None
    model = model.to(torch_device).eval()
    log.info("loaded %s from %s on %s (%s)", type(model).__name__, location, torch_device, model.dtype)
    vision = getattr(model, "main_input_name", "input_ids") == "pixel_values"
    return model, load_preprocessor(location, vision=vision, is_local=is_local, **common)


def load_preprocessor(
    location: str, *, vision: bool = False, is_local: bool = True, warn: bool = True, **common: Any
) -> Any | None:
    """Return the image processor (vision) or the tokenizer of the model at `location`, or None if none is saved.

    warn: log a warning when there is none (a caller that reports it itself passes False).
    common: the keyword arguments of `from_pretrained` (`load` passes trust_remote_code=False, local_files_only
    and revision); without them the files are read offline and no remote code runs.
    """
    import transformers

    common = {"trust_remote_code": False, "local_files_only": True, **common}
    loader = transformers.AutoImageProcessor if vision else transformers.AutoTokenizer
    files = _PROCESSOR_FILES if vision else _TOKENIZER_FILES
    if is_local and not any((Path(location) / name).is_file() for name in files):
        if warn:
            log.warning("%s holds no %s; pass token ids or pixel values to collect", location, loader.__name__)
        return None
    try:
        return loader.from_pretrained(location, **common)
    except OSError as err:
        if warn:
            log.warning("no %s for %s (%s)", loader.__name__, location, _short(err))
        return None
    except Exception as err:
        raise ModelLoadError(
            f"cannot load the {loader.__name__} of {location!r} ({_short(err)}); re-save it with save_pretrained."
        ) from None
