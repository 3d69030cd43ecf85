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
# Where transformers' own default config leaves a size unset that its model needs (Ministral's `head_dim`,
# Nemotron's `num_key_value_heads`, ESM's `vocab_size`) or lacks an attribute its model reads (T5Gemma 2's
# `dropout_rate`), the probe sets it the way checkpoints of such models do, in that config and its sub-configs,
# and says so in the row (`TypeSupport.completed`): attribute -> (how, value). Nothing is set in a default config
# whose model builds and probes as it is; in one that does not (a build that fails, or a probe pass that fails,
# as DeepSeek-V2's on its unset `num_experts_per_tok`), every unset size is set, then each missing attribute a
# build names.
_COMPLETIONS: dict[str, tuple[str, Callable[[Any], float]]] = {
    "head_dim": ("hidden_size // num_attention_heads", lambda config: config.hidden_size // config.num_attention_heads),
    "num_key_value_heads": ("num_attention_heads", lambda config: config.num_attention_heads),
    "vocab_size": ("64", lambda config: 64),
    "n_routed_experts": ("4", lambda config: 4),
    "num_experts_per_tok": ("2", lambda config: 2),
    "n_shared_experts": ("1", lambda config: 1),
    "shared_expert_intermediate_size": ("intermediate_size", lambda config: config.intermediate_size),
    "spatial_merge_size": ("2", lambda config: 2),
    "dropout": ("0.0", lambda config: 0.0),
    "dropout_rate": ("0.0", lambda config: 0.0),
    "sliding_window": ("4096", lambda config: 4096),
    "rope_theta": ("10000.0", lambda config: 10000.0),
    "clip_qkv": ("8.0", lambda config: 8.0),
    "default_language": ("languages[0]", lambda config: config.languages[0]),  # X-MOD's per-language adapters
    "vocabulary_map": ("{} (no image tokens: text alone)", lambda config: {}),  # Chameleon's, Emu3's image tokens
    "prediction_length": ("24", lambda config: 24),  # the time-series transformers' forecast horizon,
    "context_length": ("prediction_length", lambda config: config.prediction_length),  # and what they read of the past
    # Bamba's attention layers among its Mamba ones (its checkpoints: every ninth); none left every layer Mamba
    "attn_layer_indices": ("[num_hidden_layers // 2]", lambda config: [config.num_hidden_layers // 2]),
}
_CANNOT_MAKE = "which the generic adapter cannot make"  # `generic.probe_inputs`'s refusal of an input it cannot make
_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
_REBUILDS = 8  # attributes a default config may lack, one named per failed build


@dataclass(frozen=True)
class TypeSupport:
    """What one model type offers: status, adapter, kind, hook points (folded: `blocks.{i}.attn.hook_pattern`)
    offered and not offered (with the reason), or why it is not supported; shared: how the layers map onto block
    modules where it is not one layer per block (ALBERT runs one layer module for every layer: each layer is
    captured from its own call; Mllama skips its cross-attention blocks on text alone: the layers are the blocks
    that run), else empty;
    probed_on: where the probe ran (`meta`; `cpu` where the meta device lacked a value the model reads; empty
    for an unprobed row); completed: the default config's unset sizes and missing attributes the probe set to
    build it at all ("head_dim = hidden_size // num_attention_heads"), else empty."""

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
    completed: tuple[str, ...] = ()


def model_types() -> list[str]:
    """Return every model type the installed transformers knows, sorted."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def describe(model_type: str) -> TypeSupport:
    """Return what `model_type` offers, from its base model built with the default config on the meta device;
    where that probe stops at a value the meta device does not hold (a `.item()`, a device check), from the
    same model built on the CPU with random weights, if its parameters fit `CPU_PROBE_PARAMETERS`; where the
    default config builds but its probe fails, from the config completed (`_COMPLETIONS`) if that probe runs (or
    stops only where the meta device does)."""
    outcome = _describe(model_type, complete=False)
    if outcome.status != "unknown" or outcome.completed or not outcome.model_class or not _completable(model_type):
        return outcome
    completed = _describe(model_type, complete=True)
    further = completed.status != "unknown" or any(sign in completed.reason for sign in _META_LIMITS)
    return completed if further else outcome


def _completable(model_type: str) -> bool:
    """Whether the default config of `model_type` leaves unset a size `_COMPLETIONS` knows."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    with _quiet():
        try:
            return bool(_complete(CONFIG_MAPPING[model_type]()))
        except Exception:  # a config that refuses to be read globally (Diffusion Gemma's per-layer `head_dim`)
            return False


def _describe(model_type: str, *, complete: bool) -> TypeSupport:
    """`describe`, from the default config as it is (completed only where it does not build) or, with `complete`,
    with its unset sizes set first."""
    try:
        model, name, completed = _build(model_type, "meta", complete=complete)
    except _NoModelClass:
        owners = _owners(model_type)
        if not owners:
            return TypeSupport(model_type, "unknown", reason="transformers has no model class for this model type")
        return TypeSupport(model_type, "unsupported", reason=(
            "transformers has no model class for this model type: it configures a part of "
            + ", ".join(f"the {owner} model ({key})" for owner, key in owners)
            + f"; capture that model (`interpret models {owners[0][0]}` says what it offers)"))
    except Exception as err:  # a default config that transformers itself cannot build on meta
        return TypeSupport(model_type, "unknown", reason=f"cannot build on the meta device: {_short(err)}")
    outcome = replace(_probe(model_type, model, name), completed=completed)
    if outcome.status == "unsupported" and _CANNOT_MAKE in outcome.reason:
        return _with_owners(outcome)
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
        model, name, completed = _build(model_type, "cpu", complete=complete)
    except Exception as err:  # built on meta, not on the CPU: said as it is
        return replace(outcome, reason=f"{outcome.reason.rstrip('.')}; on the CPU it cannot be built: {_short(err)}")
    return replace(_probe(model_type, model, name), probed_on="cpu", completed=completed)


def _with_owners(outcome: TypeSupport) -> TypeSupport:
    """Return a refusal for an input the generic adapter cannot make that also names the models transformers
    configures this one as a part of (a Q-Former, a perceiver, an audio tower: what they hold feeds it)."""
    owners = _owners(outcome.model_type)
    if not owners:
        return outcome
    parts = ", ".join(f"the {owner} model ({key})" for owner, key in owners)
    return replace(outcome, reason=f"{outcome.reason.rstrip('.')}; transformers configures it as a part of {parts}.")


def _owners(model_type: str) -> list[tuple[str, str]]:
    """Return (model type, sub-config key) of every model type whose config holds `model_type`'s config as a
    part (SAM's `mask_decoder_config` for `sam_mask_decoder`), sorted."""
    return _parts().get(model_type, [])


@functools.cache
def _parts() -> dict[str, list[tuple[str, str]]]:
    """Return, per model type, the (model type, sub-config key) of the configs that hold it as a part, read once
    from every config class."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    found: dict[str, list[tuple[str, str]]] = {}
    for owner in sorted(CONFIG_MAPPING_NAMES):
        with contextlib.suppress(Exception):  # a config class transformers cannot import here (a missing extra)
            for key, sub in sorted((getattr(CONFIG_MAPPING[owner], "sub_configs", None) or {}).items()):
                part = getattr(sub, "model_type", None)
                if part and part != owner:
                    found.setdefault(part, []).append((owner, key))
    return found


class _NoModelClass(LookupError):
    """transformers maps the model type to no model class."""


def _build(model_type: str, device: str, *, complete: bool = False) -> tuple[nn.Module, str, tuple[str, ...]]:
    """Return (the base model of `model_type` built from its default config on `device`, its class name, what
    had to be set in that config to build it: `_COMPLETIONS`, tried only when the default config as it is cannot
    be built, or first with `complete`), with eager attention and batched experts: on the meta device fused kernels have
    nothing to dispatch to and a per-expert loop reads the routing's values; the structure the probe reads is
    the same under every kernel. On the CPU the weights are random (transformers' own initialisation) and the
    random-number state is kept."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    with _quiet():
        config = CONFIG_MAPPING[model_type]()
        model_class = _model_class(type(config), MODEL_MAPPING_NAMES, model_type)
        if model_class is None:
            raise _NoModelClass(model_type)
        if not complete:
            try:
                return _instantiate(model_class, config, device), model_class.__name__, ()
            except Exception:  # as it is, the default config does not build: complete it, then build again
                config = CONFIG_MAPPING[model_type]()
        completed = list(_complete(config))
        for _ in range(_REBUILDS):
            try:
                return _instantiate(model_class, config, device), model_class.__name__, tuple(completed)
            except AttributeError as err:
                added = _complete_missing(config, str(err))
                if not added:
                    raise
                completed.append(added)
        return _instantiate(model_class, config, device), model_class.__name__, tuple(completed)


def _instantiate(model_class: type, config: Any, device: str) -> nn.Module:
    """Return `model_class(config)` on `device` in eval mode, eager attention, batched experts, the random state kept."""
    config._attn_implementation = "eager"
    with contextlib.suppress(AttributeError, TypeError, ValueError, KeyError):
        config._experts_implementation = "batched_mm"
    with torch.device(device), torch.random.fork_rng(devices=[]):
        return model_class(config).eval()


def _configs(config: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield (dotted prefix, config) for `config` and every sub-config under it ("", "text_config.", ...)."""
    yield prefix, config
    for key in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "to_dict"):
            yield from _configs(sub, f"{prefix}{key}.")


def _complete(config: Any) -> tuple[str, ...]:
    """Set the sizes `config` (and its sub-configs) leaves unset that `_COMPLETIONS` knows; return what was set
    ("text_config.head_dim = hidden_size // num_attention_heads")."""
    done: list[str] = []
    for prefix, each in _configs(config):
        for attribute, (how, value) in _COMPLETIONS.items():
            if attribute in each.to_dict() and getattr(each, attribute, 0) is None:
                setattr(each, attribute, value(each))
                done.append(f"{prefix}{attribute} = {how}")
        if f"{prefix}vocab_size = 64" in done and getattr(each, "pad_token_id", 0) is None:
            each.pad_token_id = 0  # a config that sets no vocabulary sets no padding token either (ESM)
            done.append(f"{prefix}pad_token_id = 0")
        if _complete_mrope(each):
            done.append(f"{prefix}rope_parameters.mrope_section = {_MROPE}")
    return tuple(done)


_MROPE = "the rotary frequencies in three sections (t, h, w)"


def _complete_mrope(config: Any) -> bool:
    """Set the multimodal RoPE sections (`rope_parameters["mrope_section"]`: how many of the rotary frequencies
    rotate by the temporal, height and width position) of a config whose class reads them and that leaves them
    unset, so that they add up to the frequencies its rotary embedding makes, as every checkpoint's do; return
    whether it did. GLM-4V's model falls back on [8, 12, 12] (its checkpoints halve the 128-wide heads' rotary
    part), which its default config's full-width rotary part (64 frequencies) does not split; HunYuan-VL's on none."""
    rope = getattr(config, "rope_parameters", None)
    if "mrope_section" not in getattr(type(config), "ignore_keys_at_rope_validation", ()) or not isinstance(rope, dict):
        return False
    if rope.get("mrope_section") is not None:
        return False
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    partial = rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None)) or 1.0
    frequencies = len(range(0, int(head_dim * partial), 2))  # the inverse frequencies: one per pair of rotary dims
    third = frequencies // 3
    rope["mrope_section"] = [frequencies - 2 * third, third, third]
    return True


def _complete_missing(config: Any, error: str) -> str:
    """Set the attribute an AttributeError `error` says a config class of `config` lacks, where `_COMPLETIONS`
    knows it; return what was set ("text_config.dropout_rate = 0.0"), else ""."""
    found = _MISSING.search(error)
    if found is None or found.group(2) not in _COMPLETIONS:
        return ""
    owner, attribute = found.groups()
    how, value = _COMPLETIONS[attribute]
    done = ""
    for prefix, each in _configs(config):
        if type(each).__name__ == owner and attribute not in vars(each):
            setattr(each, attribute, value(each))
            done = done or f"{prefix}{attribute} = {how}"
    return done


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
    """Return how the layers map onto block modules where it is not one layer per block of the list: ALBERT runs
    one block module for all its layers; Mllama skips its cross-attention blocks on text alone, so its layers
    are the blocks that run. "" when each block of the list is one layer."""
    starts = [site for site in capturable.sites if site.name.endswith(".hook_resid_pre")]
    runs = [site for site in starts if site.calls > 1]
    if runs:
        blocks = len({id(site.module) for site in runs})
        return (f"{len(runs)} layers run {blocks} block module{'s' if blocks > 1 else ''} in turn (weights shared"
                " across layers); each layer is captured from its own call")
    skipped: dict[str, list[int]] = {}  # per block list, its blocks that did not run (`Capturable.skipped`)
    for path in capturable.skipped:
        parent, _, index = path.rpartition(".")
        skipped.setdefault(parent, []).append(int(index))
    notes = []
    for parent, indices in skipped.items():
        size = len(capturable.model.get_submodule(parent))
        notes.append(f"{size - len(indices)} of the {size} blocks of {parent!r} run on the probe's input (blocks"
                     f" {', '.join(map(str, sorted(indices)))} are skipped on it and change nothing); layer i is the"
                     " i-th block that runs")
    return "; ".join(notes)


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
        return {key: TypeSupport(**{**value, "offered": tuple(value["offered"]), "completed": tuple(value["completed"])})
                for key, value in content.items()}
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
