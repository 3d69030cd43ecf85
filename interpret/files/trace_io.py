"""Save and load a Trace as one safetensors file: the tensors, the Encoded inputs and the metadata."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from interpret.errors import InputError
from interpret.files.atomic import atomic_path
from interpret.inputs import Encoded
from interpret.trace import Trace, TraceMeta

_INPUT = "__input__."
FORMAT = "transformer-audit-trace/1"


def save_trace(trace: Trace, path: str | Path) -> Path:
    """Write `trace` to `path` (safetensors; metadata as JSON in the header) atomically; return the path."""
    path = Path(path)
    tensors = {name: tensor.detach().cpu().contiguous() for name, tensor in trace.tensors.items()}
    encoded = trace.encoded
    for field in ("input_ids", "attention_mask", "special", "inputs_embeds", "pixel_values", "input_features",
                  "input_values", "sample_mask"):
        value = getattr(encoded, field)
        if value is not None:
            tensors[_INPUT + field] = value.detach().cpu().contiguous()
    header = {
        "format": FORMAT,
        "meta": json.dumps(dataclasses.asdict(trace.meta), default=str),
        "tokens": json.dumps(encoded.tokens),
        "texts": json.dumps(list(encoded.texts) if encoded.texts else None),
        "truncated": json.dumps(list(encoded.truncated)),
        "continuation": json.dumps(list(encoded.continuation)),
        "word_ids": json.dumps([list(row) for row in encoded.word_ids]),
        "scheme": encoded.scheme,
    }
    if encoded.decoder is not None:
        header["decoder_tokens"] = json.dumps(encoded.decoder.tokens)
        for field in ("input_ids", "attention_mask", "special"):
            value = getattr(encoded.decoder, field)
            if value is not None:
                tensors[_INPUT + "decoder." + field] = value.detach().cpu().contiguous()
    with atomic_path(path) as temporary:
        save_file(tensors, str(temporary), metadata=header)
    return path


def load_trace(path: str | Path) -> Trace:
    """Return the Trace that `save_trace` wrote to `path`."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        header = handle.metadata() or {}
    if header.get("format") != FORMAT:
        raise InputError(f"{str(path)!r} is not a saved trace ({FORMAT}); write one with `interpret collect`.")
    tensors = load_file(str(path))
    inputs = {name[len(_INPUT):]: tensors.pop(name) for name in list(tensors) if name.startswith(_INPUT)}
    decoder = None
    if "decoder_tokens" in header:
        decoder = Encoded(
            attention_mask=inputs["decoder.attention_mask"],
            special=inputs["decoder.special"],
            input_ids=inputs.get("decoder.input_ids"),
            tokens=json.loads(header["decoder_tokens"]),
        )
    texts = json.loads(header["texts"])
    encoded = Encoded(
        attention_mask=inputs["attention_mask"],
        special=inputs["special"],
        input_ids=inputs.get("input_ids"),
        inputs_embeds=inputs.get("inputs_embeds"),
        pixel_values=inputs.get("pixel_values"),
        input_features=inputs.get("input_features"),
        input_values=inputs.get("input_values"),
        sample_mask=inputs.get("sample_mask"),
        tokens=json.loads(header["tokens"]),
        decoder=decoder,
        texts=None if texts is None else tuple(texts),
        truncated=tuple(json.loads(header["truncated"])),
        continuation=tuple(json.loads(header.get("continuation", "[]"))),
        word_ids=tuple(tuple(row) for row in json.loads(header.get("word_ids", "[]"))),
        scheme=header.get("scheme", "plain"),
    )
    meta = json.loads(header["meta"])
    meta["layers"] = tuple(meta["layers"])
    meta["heads"] = None if meta["heads"] is None else tuple(meta["heads"])
    meta["windows"] = tuple(meta.get("windows", ()))
    meta["scales"] = tuple(meta.get("scales", ()))
    meta["softcaps"] = tuple(meta.get("softcaps", ()))
    meta["sink_logits"] = tuple(tuple(logits) for logits in meta.get("sink_logits", ()))
    return Trace(tensors=tensors, encoded=encoded, meta=TraceMeta(**meta))


__all__ = ["load_trace", "save_trace"]
