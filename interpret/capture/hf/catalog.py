"""What every model type the installed transformers knows offers for capture, found without building one.

For each model type, its base model class (transformers' AutoModel mapping) is built from the type's default
config on the `meta` device (shapes only: no memory, no weights, whatever the model's size) and handed to the
adapter that serves the type, whose probe pass runs there too. The outcome per type is a `TypeSupport`:
`supported` (with the adapter, the kind and the hook points offered and not offered, with reasons),
`unsupported` (the adapter's one-line reason: no attention, attention computed outside transformers'
interface, a hybrid, ...) or `unknown` (the meta-device probe itself could not run, e.g. an input the probe
cannot make; such a model is probed again, on its own weights, when it is captured). Probing all ~800 types
takes minutes, so a type is probed only when it is asked for (`catalog`) or used; `listing` says what is known
without building a model: the cached outcome, else `unprobed` with the adapter that claims the type and the
class transformers maps it to. The table is cached
per toolkit, transformers and torch version and per content of the adapters' code (this package's modules,
so a table written by other adapter code is never read) under `interpret.files.cache.cache_dir()`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from interpret.capture.sites import Capturable
from interpret.errors import InterpretError, UnsupportedModelError
from interpret.files.atomic import write_atomically
from interpret.files.cache import cache_dir
from interpret.runtime.versions import library_versions

Status = Literal["supported", "unsupported", "unknown", "unprobed"]
_LAYER = re.compile(r"blocks\.\d+\.")
# A type whose meta-device probe stops at a value (a `.item()`, a device check) is probed again on the CPU with
# random weights when its default config has at most this many parameters (4 GB of float32, seconds to build).
CPU_PROBE_PARAMETERS = 1_000_000_000
# What a probe failure says when it stopped at the meta device itself: a value it does not hold (`.item()`), or a
# constant the model's own code made on the CPU meeting a meta tensor (SEW-D's `masked_fill` value).
_META_LIMITS = ("meta", "to be on same device")


@dataclass(frozen=True)
class TypeSupport:
    """What one model type offers: status, adapter, kind, hook points (folded: `blocks.{i}.attn.hook_pattern`)
    offered and not offered (with the reason), or why it is not supported; shared: how layers share modules
    (ALBERT runs one layer module for every layer: each layer is captured from its own call), else empty;
    probed_on: where the probe ran (`meta`; `cpu` where the meta device lacked a value the model reads; empty
    for an unprobed row)."""

    model_type: str
    status: Status
    adapter: str = ""
    kind: str = ""
    model_class: str = ""
    offered: tuple[str, ...] = ()
    missing: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    shared: str = ""
    probed_on: Literal["meta", "cpu", ""] = "meta"


def model_types() -> list[str]:
    """Return every model type the installed transformers knows, sorted."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def describe(model_type: str) -> TypeSupport:
    """Return what `model_type` offers, from its base model built with the default config on the meta device;
    where that probe stops at a value the meta device does not hold (a `.item()`, a device check), from the
    same model built on the CPU with random weights, if its parameters fit `CPU_PROBE_PARAMETERS`."""
    try:
        model, name = _build(model_type, "meta")
    except _NoModelClass:
        return TypeSupport(model_type, "unknown", reason="transformers has no model class for this model type")
    except Exception as err:  # a default config that transformers itself cannot build on meta
        return TypeSupport(model_type, "unknown", reason=f"cannot build on the meta device: {_short(err)}")
    outcome = _probe(model_type, model, name)
    if outcome.status != "unknown" or not any(sign in outcome.reason for sign in _META_LIMITS):
        return outcome
    parameters = sum(param.numel() for param in model.parameters())
    del model
    if parameters > CPU_PROBE_PARAMETERS:
        return replace(outcome, reason=(
            f"{outcome.reason.rstrip('.')}; the probe needs values the meta device does not hold, and the default"
            f" config's {parameters / 1e9:.1f}B parameters exceed the CPU probe's {CPU_PROBE_PARAMETERS / 1e9:.0f}B:"
            " a model of this type is probed on its own weights when it is captured."))
    try:
        model, name = _build(model_type, "cpu")
    except Exception as err:  # built on meta, not on the CPU: said as it is
        return replace(outcome, reason=f"{outcome.reason.rstrip('.')}; on the CPU it cannot be built: {_short(err)}")
    return replace(_probe(model_type, model, name), probed_on="cpu")


class _NoModelClass(LookupError):
    """transformers maps the model type to no model class."""


def _build(model_type: str, device: str) -> tuple[nn.Module, str]:
    """Return (the base model of `model_type` built from its default config on `device`, its class name), with
    eager attention and batched experts: on the meta device fused kernels have nothing to dispatch to and a
    per-expert loop reads the routing's values; the structure the probe reads is the same under every kernel.
    On the CPU the weights are random (transformers' own initialisation) and the random-number state is kept."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    with _quiet():
        config = CONFIG_MAPPING[model_type]()
        model_class = _model_class(type(config), MODEL_MAPPING_NAMES, model_type)
        if model_class is None:
            raise _NoModelClass(model_type)
        config._attn_implementation = "eager"
        with contextlib.suppress(AttributeError, TypeError, ValueError, KeyError):
            config._experts_implementation = "batched_mm"
        with torch.device(device), torch.random.fork_rng(devices=[]):
            model = model_class(config).eval()
    return model, model_class.__name__


def _probe(model_type: str, model: nn.Module, name: str) -> TypeSupport:
    """Return what the adapter serving `model` makes of it: supported with its hook points, or why not."""
    from interpret.capture.hf.registry import adapter_for, hf_capturable

    adapter = adapter_for(model).name
    try:
        with _quiet():
            capturable = hf_capturable(model, None)
    except UnsupportedModelError as err:
        status: Status = "unknown" if "probe forward pass" in str(err) else "unsupported"
        return TypeSupport(model_type, status, adapter=adapter, model_class=name, reason=str(err))
    except InterpretError as err:
        return TypeSupport(model_type, "unknown", adapter=adapter, model_class=name, reason=str(err))
    except Exception as err:  # an adapter that fails on shapes alone
        return TypeSupport(model_type, "unknown", adapter=adapter, model_class=name, reason=_short(err))
    offered = tuple(dict.fromkeys(_fold(site.name) for site in capturable.sites))
    missing: dict[str, str] = {}
    for hook, why in capturable.unsupported.items():
        missing.setdefault(_fold(hook), why)
    return TypeSupport(model_type, "supported", adapter, capturable.kind, name, offered, missing,
                       shared=sharing(capturable))


def sharing(capturable: Capturable) -> str:
    """Return how the layers share block modules (ALBERT runs one for all its layers), or "" when each has its own."""
    runs = [site for site in capturable.sites if site.name.endswith(".hook_resid_pre") and site.calls > 1]
    if not runs:
        return ""
    blocks = len({id(site.module) for site in runs})
    return (f"{len(runs)} layers run {blocks} block module{'s' if blocks > 1 else ''} in turn (weights shared across"
            " layers); each layer is captured from its own call")


def _model_class(config_class: type, base: dict[str, Any], model_type: str) -> type | None:
    """Return the base model class of a model type: transformers' AutoModel mapping, else the model class
    named after the config (`AlignTextConfig` -> `AlignTextModel`, for the towers of composite models), else
    the first task model another Auto mapping gives, else (for a tower transformers exports no class for,
    e.g. `qwen2_5_omni_audio_encoder`) the model class of the type's own modeling module built from exactly
    this config, a base model before a task model."""
    import importlib

    import transformers
    from transformers.models.auto import modeling_auto

    names: list[Any] = [base.get(model_type), config_class.__name__.removesuffix("Config") + "Model"]
    names += [getattr(modeling_auto, mapping).get(model_type) for mapping in sorted(dir(modeling_auto))
              if mapping.startswith("MODEL_FOR_") and mapping.endswith("_MAPPING_NAMES")
              and isinstance(getattr(modeling_auto, mapping), dict)]
    for name in names:
        if isinstance(name, (tuple, list)):
            name = name[0] if name else None
        found = getattr(transformers, name, None) if isinstance(name, str) else None
        if _is_model_class(found):  # `modeling_auto` also imports CONFIG_MAPPING_NAMES: config classes
            return found
    try:
        module = importlib.import_module(config_class.__module__.replace(".configuration_", ".modeling_"))
    except ImportError:
        return None
    own = [cls for name, cls in vars(module).items() if _is_model_class(cls) and cls.config_class is config_class
           and not name.endswith("PreTrainedModel")]
    return min(own, key=lambda cls: "For" in cls.__name__, default=None)


def _is_model_class(cls: object) -> bool:
    """Whether `cls` is a transformers model class."""
    from transformers import PreTrainedModel

    return isinstance(cls, type) and issubclass(cls, PreTrainedModel)


def catalog(
    types: Iterable[str] | None = None,
    *,
    refresh: bool = False,
    progress: Callable[[Iterable[str]], Iterator[str]] | None = None,
) -> list[TypeSupport]:
    """Return the support of `types` (default: every known model type), from the cache where it has them."""
    wanted = list(types) if types is not None else model_types()
    path = cache_path()
    cached = {} if refresh else _read(path)
    todo = [model_type for model_type in wanted if model_type not in cached]
    for model_type in (progress or iter)(todo):
        cached[model_type] = describe(model_type)
    if todo:
        write_atomically(path, json.dumps({key: asdict(value) for key, value in sorted(cached.items())}, indent=1))
    return [cached[model_type] for model_type in wanted]


def listing(types: Iterable[str] | None = None) -> list[TypeSupport]:
    """Return the support of `types` (default: every known model type) without probing any: the cached row, else
    an `unprobed` one naming the adapter that claims the type (the generic one when none does) and the base class
    transformers' AutoModel mapping gives (a tuple's first; empty when it has none)."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    from interpret.capture.hf.registry import model_types as claimed

    cached, adapters = _read(cache_path()), claimed()

    def unprobed(model_type: str) -> TypeSupport:
        name = MODEL_MAPPING_NAMES.get(model_type, "")
        return TypeSupport(model_type, "unprobed", adapters.get(model_type, "generic"),
                           model_class=name[0] if isinstance(name, (tuple, list)) else name, probed_on="")

    return [cached.get(model_type) or unprobed(model_type) for model_type in (model_types() if types is None else types)]


def cache_path() -> Path:
    """Return the cache file of this toolkit, transformers and torch version and this adapter code."""
    versions = library_versions()
    key = "-".join(f"{name}{versions.get(name, '0')}" for name in ("transformer-audit", "transformers", "torch"))
    return cache_dir() / "model-types" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}-{_code_digest()}.json"


@functools.cache
def _code_digest() -> str:
    """Return a short digest of the adapters' code (every module of this package)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _read(path: Path) -> dict[str, TypeSupport]:
    """Return the cached table, or nothing when it is missing or unreadable (it is then rebuilt)."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
        return {key: TypeSupport(**{**value, "offered": tuple(value["offered"])}) for key, value in content.items()}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def _fold(name: str) -> str:
    return _LAYER.sub("blocks.{i}.", name)


def _short(err: BaseException, limit: int = 160) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Yield with transformers' and Python's warnings silenced (default configs warn about themselves)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def as_dicts(rows: Iterable[TypeSupport]) -> list[dict[str, Any]]:
    """Return the rows as plain dicts (for JSON output)."""
    return [asdict(row) for row in rows]
