"""What an audit's results depend on, each as a short text: the components of its fingerprint.

A resumed audit reuses finished parts only when every component is what it was: the model's weights (by
content, not by path), their dtype, the device type, the attention kernel the model runs with
(`interpret.audit.kernel`), the tokenizer's vocabulary and settings, the decision
head, the analyzers with their versions and parameters, the target mode, the batching, and the input (the
examples as read with the class each label names, and, when known, the input file's bytes). A component that differs is named in the refusal.

Weights are hashed either from the files the model was loaded from (`model_dir`: config.json and the weight
files the loader reads, `interpret.estimate.checkpoint.weight_files`: the single file, or the index and every shard it
names; each file's sha256 is memoised by path, size, inode, mtime and ctime in `interpret.files.file_digest`, so an
unchanged checkpoint is not read again) or, without a directory, from the model's tensors in memory (names,
dtypes, shapes and bytes: exact even for a model changed after loading). A model loaded with tensors the
checkpoint lacks (`interpret.models.loading.random_weights`) is hashed from its tensors, and the component names them.
The tokenizer is hashed from what it loaded (`tokenizer_digest`), not from its files.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from interpret.analysis import registry
from interpret.arrays import to_numpy
from interpret.audit.kernel import describe
from interpret.estimate.checkpoint import weight_files
from interpret.files.file_digest import content_digest, file_sha256
from interpret.models.loading import random_weights
from interpret.reading.datasets import Example, Skipped

FORMAT = 5  # bump when the layout or the tables change, so old parts are never mixed with new ones
_DIGEST = 16  # hex digits shown per digest: 64 bits, enough to tell versions apart in a message


def fingerprint_parts(
    *,
    examples: Sequence[Example],
    gold: tuple[Sequence[int | None], Sequence[str]] = ((), ()),
    analyzers: Sequence[str],
    params: Mapping[str, Mapping[str, Any]],
    batch_size: int,
    max_length: int | None,
    model_id: str,
    model: nn.Module,
    tokenizer: Any,
    head: nn.Module | None,
    seed: int,
    target: str,
    model_dir: str | Path | None = None,
    input_file: str | Path | None = None,
    evidence: bool = False,
    patterns: bool = True,
    skipped: Sequence[Skipped] | None = None,
    removal: str | None = None,
    streamed: Sequence[str] = (),
) -> dict[str, str]:
    """Return the audit's identity as component name → short text (JSON-ready; compared one by one); `gold`:
    each example's gold class and the model's class names (`interpret.audit.runner.gold_classes`); `patterns`:
    whether the audit captures attention patterns (which picks its kernel, `interpret.audit.kernel`); `skipped`:
    the input rows skipped for an empty text (None: none could be); `removal`: how the evidence removes tokens;
    `streamed`: the analyzers run streamed, named "rollout (streamed)" in the analyzers component (an audit of
    the old `streaming_rollout` names that, so it never resumes parts computed the other way).
    The drivers and slices are not part of it: they are computed from the finished parts on every run."""
    return {
        "format": str(FORMAT),
        "examples": examples_digest(examples, *gold),
        "input_file": "not given" if input_file is None else f"sha256 {file_sha256(input_file)[:_DIGEST]}",
        "analyzers": ",".join(f"{name} (streamed)" if name in streamed else name for name in analyzers),
        "analyzer_versions": analyzer_versions(analyzers),
        "params": json.dumps(params, sort_keys=True, default=str),
        "batch_size": str(batch_size),
        "max_length": str(max_length),
        "model_id": model_id,
        "weights": weights_digest(model, model_dir),
        "dtype": dtypes_of(model),
        "device": device_type_of(model),
        "attention": describe(model, patterns),
        "tokenizer": tokenizer_digest(tokenizer),
        "head": module_digest(head),
        "seed": str(seed),
        "target": target,
        "evidence": ("measured" + (f" with removal {removal}" if removal else "")) if evidence else "not measured",
        "skipped": "not skipping" if skipped is None else skipped_digest(skipped),
    }


def examples_digest(examples: Sequence[Example], gold: Sequence[int | None] = (), classes: Sequence[str] = ()) -> str:
    """Return "N examples, sha256 …" of the examples' row ids, ids, texts, labels as given, the classes
    they name (`gold`, with the model's class names `classes`) and text pairs (where there are), in order."""
    named = gold or (None,) * len(examples)
    rows = (json.dumps([e.row, e.id, e.text, e.label, g, *(() if e.text_pair is None else (e.text_pair,))]).encode("utf-8")
            for e, g in zip(examples, named))
    digest = content_digest(itertools.chain([json.dumps(list(classes)).encode("utf-8")], rows))
    return f"{len(examples)} examples, sha256 {digest[:_DIGEST]}"


def skipped_digest(skipped: Sequence[Skipped]) -> str:
    """Return "N rows, sha256 …" of the input rows skipped for an empty text (row, line and id of each)."""
    listed = json.dumps([list(entry) for entry in skipped]).encode()
    return f"{len(skipped)} rows, sha256 {content_digest([listed])[:_DIGEST]}"


def analyzer_versions(analyzers: Sequence[str]) -> str:
    """Return "name version (distribution version)" of each analyzer, comma-separated."""
    entries = registry.entries()
    described = []
    for name in analyzers:
        entry = entries[name]
        described.append(f"{name} {registry.get(name).version} ({entry.distribution} {entry.dist_version})")
    return ", ".join(described)


def weights_digest(model: nn.Module, model_dir: str | Path | None = None) -> str:
    """Return "files sha256 …" of config.json and the weight files the loader reads from `model_dir`, or
    "tensors sha256 …" of the model's tensors (without a directory, or when some were initialised at random)."""
    random = random_weights(model)
    directory = Path(model_dir) if model_dir is not None else None
    files = weight_files(directory) if directory is not None and directory.is_dir() and not random else []
    if files:
        named = [(path.relative_to(directory).as_posix(), path) for path in [directory / "config.json", *files]]
        digest = content_digest(f"{name} {file_sha256(path)}".encode() for name, path in named)
        return f"files sha256 {digest[:_DIGEST]}"
    digest = f"tensors sha256 {tensors_digest(model.state_dict().items())[:_DIGEST]}"
    return f"{digest} ({len(random)} random: {', '.join(random)})" if random else digest


def tensors_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """Return the sha256 of each tensor's name, dtype, shape and raw bytes (any dtype, bfloat16 included)."""

    def pieces() -> Iterable[bytes]:
        for name, tensor in named:
            flat = tensor.detach().reshape(-1).contiguous().cpu()
            yield f"{name} {flat.dtype} {tuple(tensor.shape)}".encode()
            yield to_numpy(flat.view(torch.uint8)).tobytes() if flat.numel() else b""

    return content_digest(pieces())


def dtypes_of(model: nn.Module) -> str:
    """Return the model's parameter and buffer dtypes, e.g. "float32" or "bfloat16,float32"."""
    found = {str(t.dtype).removeprefix("torch.") for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()}
    return ",".join(sorted(found)) or "none"


def device_type_of(model: nn.Module) -> str:
    """Return the device types the model's parameters live on, e.g. "cpu" or "cuda"."""
    found = {t.device.type for t in model.parameters()}
    return ",".join(sorted(found)) or "cpu"


def tokenizer_digest(tokenizer: Any) -> str:
    """Return "sha256 …" of what decides the tokens: the vocabulary (or the fast tokenizer's whole serialised
    pipeline), the special tokens, padding and truncation sides and the length limit."""
    pieces: list[bytes] = [type(tokenizer).__qualname__.encode()]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        pieces.append(backend.to_str().encode("utf-8"))  # holds the vocabulary, normaliser and merges
    elif callable(getattr(tokenizer, "get_vocab", None)):
        pieces.append(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode("utf-8"))
    settings = {
        key: getattr(tokenizer, key, None)
        for key in ("padding_side", "truncation_side", "model_max_length", "add_prefix_space", "do_lower_case")
    }
    special = getattr(tokenizer, "special_tokens_map", None)
    pieces.append(json.dumps({"settings": settings, "special": special}, sort_keys=True, default=str).encode())
    return f"sha256 {content_digest(pieces)[:_DIGEST]}"


def module_digest(module: nn.Module | None) -> str:
    """Return a short hash of a module's class, labels and tensors (the head is part of what is audited)."""
    if module is None:
        return "none"
    label = f"{type(module).__qualname__} {getattr(module, 'labels', None)}".encode()
    return content_digest([label, tensors_digest(module.state_dict().items()).encode()])[:_DIGEST]


def difference(found: Mapping[str, str], wanted: Mapping[str, str]) -> str:
    """Return the components that differ in words, e.g. "dtype (float32 there, float16 now), weights"."""
    changed = [key for key in wanted if found.get(key) != wanted[key]]
    if not changed:
        return "settings"
    described = []
    for key in changed:
        there, now = str(found.get(key, "none")), str(wanted[key])
        if key == "params":
            described.append(_params_difference(there, now))
        else:
            described.append(key if len(there) + len(now) > 120 else f"{key} ({there} there, {now} now)")
    return ", ".join(described)


def _params_difference(there: str, now: str) -> str:
    '''Return e.g. "params (rollout.head_fusion: mean there, max now)" for the first parameter that differs.'''
    try:
        old, new = json.loads(there), json.loads(now)
    except ValueError:
        return "params"
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "params"
    for analyzer in sorted(set(old) | set(new)):
        before, after = old.get(analyzer) or {}, new.get(analyzer) or {}
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                text = f"{analyzer}.{key}: {before.get(key, 'unset')} there, {after.get(key, 'unset')} now"
                return f"params ({text[:160]})"
    return "params"

