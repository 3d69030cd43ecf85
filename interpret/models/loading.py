"""`load`: a Hugging Face model and its tokenizer (or image processor, or audio feature extractor), safely.

Safe means: no code from the checkpoint ever runs (`trust_remote_code=False` is passed explicitly, and a
config that asks for remote code is refused before transformers sees it, so nothing can prompt or hang);
weights are read from safetensors unless the caller opts into pickle checkpoints with `allow_pickle=True`;
a local directory, and by default a hub name, is read with `local_files_only=True`: a hub name that is not in
the local Hugging Face cache fails at once (`interpret.estimate.checkpoint.locate`) instead of retrying the network.

Complete means: a weight of the loaded class that the checkpoint lacks (transformers' `missing_keys`) is a
refusal naming it, since transformers would run with random numbers in its place; `allow_missing_weights=True`
accepts them, initialised with a fixed seed, and `load_notes` names them for the report's header. Weights tied
to others (a language model head tied to the embeddings) and buffers a class recreates are not missing.

The toolkit's own pruned format (`interpret heads --prune-to`, `interpret.heads.pruned_bert`) is read with the
package's classes, registered with the Auto classes here (its modeling file is never run), and given back as
the stock class with every head, the removed ones zero (`interpret.heads.store.expanded`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from interpret.errors import ModelLoadError
from interpret.estimate.checkpoint import PICKLE_SUFFIXES, check_local_checkpoint, is_pruned, locate, weight_files

log = logging.getLogger("interpret")

__all__ = [
    "PICKLE_SUFFIXES", "check_local_checkpoint", "load", "load_notes", "load_preprocessor", "random_weights",
    "resolve_device", "resolve_dtype",
]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model")
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
_RANDOM = "_interpret_random_weights"  # attributes `load` sets on the model it returns (see load_notes)
_PRUNED = "_interpret_pruned_from"
_SHOWN = 3  # missing tensors named in a message


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


def _model_class(config: Any, pruned: bool) -> Any:
    """Return the class named first in config.architectures that transformers ships (or, for the toolkit's
    pruned format, that interpret.heads.pruned_bert defines), else AutoModel."""
    import transformers

    ours: dict[str, type] = {}
    if pruned:
        from interpret.heads import pruned_bert

        ours = {cls.__name__: cls for cls, _ in pruned_bert.PRUNED_CLASSES.values()}
    for name in getattr(config, "architectures", None) or []:
        cls = ours.get(str(name)) if pruned else getattr(transformers, str(name), None)
        if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
            return cls
    return transformers.AutoModel


def random_weights(model: nn.Module) -> tuple[str, ...]:
    """Return the names of the tensors `load(..., allow_missing_weights=True)` initialised at random because the
    checkpoint lacks them (() for a complete checkpoint, or a model `load` did not make)."""
    return tuple(getattr(model, _RANDOM, ()))


def load_notes(model: nn.Module) -> tuple[tuple[str, str], ...]:
    """Return what a report's reader must know about how `load` read `model`, as (label, text) pairs: the
    tensors that are random, and a pruned model given back with every head."""
    notes = []
    missing = random_weights(model)
    if missing:
        notes.append(("Random weights", f"{len(missing)} tensor(s) of {type(model).__name__} are not in the checkpoint"
                      f" and were initialised at random (seed 0): {', '.join(missing)}"))
    pruned = getattr(model, _PRUNED, None)
    if pruned:
        notes.append(("Pruned model", pruned))
    return tuple(notes)


def load(
    path_or_name: str | os.PathLike[str],
    device: str | torch.device = "auto",
    dtype: str | torch.dtype | None = None,
    *,
    attn_implementation: str | None = None,
    allow_pickle: bool = False,
    allow_missing_weights: bool = False,
    local_files_only: bool | None = None,
    revision: str | None = None,
) -> tuple[nn.Module, Any | None]:
    """Return (model in eval mode on `device`, its preprocessor, or None when none is saved): the tokenizer, the
    image processor of a vision model, or the feature extractor of a speech encoder on raw audio (`load_preprocessor`).

    path_or_name: a local directory, or a hub name found in the local Hugging Face cache (both read offline);
        `interpret.load()` with no name is the built-in default model (`interpret.api.load`).
    dtype: None loads float32; "auto" keeps the checkpoint's dtype; or "bfloat16", "float16", a torch.dtype.
    attn_implementation: "sdpa" (transformers' default), "eager", ...; the collector returns the true
        pattern under any of them.
    allow_pickle: accept .bin/.pt checkpoints (pickle can run code: only for files you trust).
    allow_missing_weights: run with weights of the class that the checkpoint lacks initialised at random
        (seed 0; `load_notes` and the report name them) instead of refusing the checkpoint.
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
    directory: Path | None = None
    if local_files_only is False and not is_local:
        offline = False  # the caller asked for the network: transformers may download the name
    else:
        checkpoint = locate(location, allow_pickle=allow_pickle, revision=revision)  # raises at once
        location = str(checkpoint.directory) if not checkpoint.hub else location
        directory, offline = checkpoint.directory, True
    pruned = directory is not None and is_pruned(directory)
    if pruned:
        from interpret.heads import pruned_bert

        pruned_bert.register()  # its classes come from this package; the checkpoint's copy is never run
    common: dict[str, Any] = {"trust_remote_code": False, "local_files_only": offline, "revision": revision}
    try:
        config = transformers.AutoConfig.from_pretrained(location, **common)
    except Exception as err:  # transformers raises OSError, ValueError or KeyError for bad checkpoints
        raise ModelLoadError(
            f"cannot read the config of {location!r} ({_short(err)}); give a directory saved with save_pretrained,"
            " or a hub name that is cached (offline) or reachable."
        ) from None
    if getattr(config, "auto_map", None) and not pruned:
        raise ModelLoadError(
            f"{location!r} asks for remote code (auto_map); interpret.load never runs code from a checkpoint."
        )
    options: dict[str, Any] = {"config": config, "dtype": torch_dtype, "use_safetensors": None if allow_pickle else True}
    if attn_implementation is not None:
        options["attn_implementation"] = attn_implementation
    model_class = _model_class(config, pruned)
    try:
        with torch.random.fork_rng(devices=[]):  # weights the checkpoint lacks are drawn the same every time
            torch.manual_seed(0)
            model, info = model_class.from_pretrained(location, **common, **options, output_loading_info=True)
    except Exception as err:
        raise ModelLoadError(_load_failure(model_class.__name__, location, directory, err, allow_pickle)) from None
    missing = sorted(info.get("missing_keys") or ())
    if missing and not allow_missing_weights:
        shown = ", ".join(missing[:_SHOWN]) + (f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else "")
        raise ModelLoadError(
            f"{location!r} lacks {len(missing)} weight(s) of {model_class.__name__}: {shown}; transformers would run"
            " them with random numbers. Give the complete checkpoint, or pass allow_missing_weights=True (CLI:"
            " --allow-missing-weights) to run with them random (the report names them)."
        )
    if info.get("unexpected_keys"):
        log.info("%d tensor(s) of %s are not used by %s", len(info["unexpected_keys"]), location, model_class.__name__)
    if pruned:
        from interpret.heads.store import expanded

        heads = ", ".join(map(str, model.config.heads_per_layer))
        stored = f"model type {model.config.model_type} ({heads} heads stored per layer)"
        model = expanded(model)
        setattr(model, _PRUNED, f"{stored}, read as {type(model).__name__} with all {model.config.num_attention_heads}"
                f" heads per layer: each removed head's weights are zero (uniform attention, adds nothing)")
    if missing:
        setattr(model, _RANDOM, tuple(missing))
        log.warning("%d weight(s) of %s are random: %s", len(missing), location, ", ".join(missing))
    model = model.to(torch_device).eval()
    log.info("loaded %s from %s on %s (%s)", type(model).__name__, location, torch_device, model.dtype)
    main_input = getattr(model, "main_input_name", "input_ids")
    # an audio encoder reads clips with its feature extractor; a speech encoder-decoder (Whisper, Speech2Text)
    # also needs its tokenizer: its processor holds both, where one is saved
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    vision = main_input == "pixel_values"
    audio = main_input == "input_values" or (main_input == "input_features" and not encoder_decoder)
    if main_input == "input_features" and encoder_decoder and (not is_local or any(
            (Path(location) / name).is_file() for name in _PROCESSOR_FILES)):
        return model, load_preprocessor(location, speech_seq2seq=True, is_local=is_local, **common)
    return model, load_preprocessor(location, vision=vision, audio=audio, is_local=is_local, **common)


def _load_failure(cls: str, location: str, directory: Path | None, err: BaseException, allow_pickle: bool) -> str:
    """Return the message for a checkpoint transformers could not load: the damaged weight file named when one
    is (safetensors checks its header and sizes), else transformers' reason."""
    files = weight_files(directory) if directory is not None else []
    for path in (path for path in files if path.name.endswith(".safetensors")):
        from safetensors import safe_open

        try:
            with safe_open(path, framework="pt"):
                pass
        except Exception as damage:  # noqa: BLE001 - SafetensorError, OSError: any reason the header is unusable
            return (f"the weight file {str(path)!r} is damaged ({_short(damage, 120)}); download or save the model"
                    " again.")
    pickled = directory is not None and not allow_pickle and any(
        path.name.endswith(PICKLE_SUFFIXES) for path in directory.iterdir()
    )
    hint = ", or pass allow_pickle=True (CLI: --allow-pickle) for its trusted .bin checkpoint" if pickled else ""
    return f"cannot load {cls} from {location!r} ({_short(err)}); check the checkpoint's files{hint}."


def load_preprocessor(
    location: str, *, vision: bool = False, audio: bool = False, speech_seq2seq: bool = False, is_local: bool = True,
    warn: bool = True, **common: Any
) -> Any | None:
    """Return the image processor (vision), the feature extractor (audio: a speech encoder, whose
    `input_values` or `input_features` it makes), the processor (speech_seq2seq: its feature extractor and the
    decoder's tokenizer) or the tokenizer of the model at `location`, or None if none is saved.

    warn: log a warning when there is none (a caller that reports it itself passes False).
    common: the keyword arguments of `from_pretrained` (`load` passes trust_remote_code=False, local_files_only
    and revision); without them the files are read offline and no remote code runs.
    """
    import transformers

    common = {"trust_remote_code": False, "local_files_only": True, **common}
    loader = (transformers.AutoImageProcessor if vision else transformers.AutoFeatureExtractor if audio
              else transformers.AutoProcessor if speech_seq2seq else transformers.AutoTokenizer)
    files = _PROCESSOR_FILES if vision or audio or speech_seq2seq else _TOKENIZER_FILES
    if is_local and not any((Path(location) / name).is_file() for name in files):
        if warn:
            log.warning("%s holds no %s; pass the model's input tensors (ids, pixels, audio) to collect", location,
                        loader.__name__)
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
