"""`build_report`: turn a Trace and the analyzers' results into a Report (sections, tokens, layer/head selection)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from interpret.analysis.result import AnalyzerResult, Check, NamedArray, View
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError, ReportError
from interpret.evidence.evidence import Evidence
from interpret.inputs import Encoded
from interpret.reading.text import display_tokens
from interpret.report.model import ExampleTokens, RunInfo, Section, section_keys
from interpret.report.report import Report
from interpret.trace import Trace

# float32 softmax rows sum to one within ~1e-6; a larger error means the capture is not a true pattern.
PATTERN_ROW_SUM_TOLERANCE = 1e-4

# (array name, prefix, suffix, query side, key side, view title) of every attention stack a trace may hold.
_STACKS = (
    ("pattern", "", "attn.hook_pattern", "encoder", "encoder", "Attention by layer and head"),
    ("encoder", "encoder.", "attn.hook_pattern", "encoder", "encoder", "Encoder self-attention by layer and head"),
    ("decoder", "decoder.", "attn.hook_pattern", "decoder", "decoder", "Decoder self-attention by layer and head"),
    ("cross", "decoder.", "cross_attn.hook_pattern", "decoder", "encoder",
     "Cross-attention (decoder → encoder) by layer and head"),
)


def build_report(
    trace: Trace,
    results: Sequence[AnalyzerResult],
    run: RunInfo,
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    top_k: int = 5,
    ids: Sequence[str | None] | None = None,
    evidence: Evidence | None = None,
) -> Report:
    """Return the Report of `results` on `trace`: one section per result, then the attention section.

    layers / heads: the model layers and heads to embed in the HTML (negatives count from the end; default
    every captured one). They cut the attention patterns and any analyzer array with a `layer` or `head`
    axis; export() still writes the analyzers' arrays whole.
    ids: each example's id from the input file (shown beside it), when it had one.
    evidence: the faithfulness evidence of the results' readouts (`interpret.evidence.evaluate_evidence`).
    """
    for result in results:
        _check_batch(result, trace.encoded.batch)
    captured_layers = _captured_layers(trace)
    head_ids = _captured_heads(trace)
    layer_sel = list(captured_layers) if layers is None else sorted(
        _chosen("layer", layers, captured_layers, trace.meta.n_layers)
    )
    head_sel = _select_heads(heads, head_ids, trace)
    keys = section_keys([result.analyzer for result in results] + ["attention"])
    sections = [
        Section(
            key=key, title=result.title, kind="analyzer", result=result,
            description=_summary(result), layers=tuple(captured_layers), heads=tuple(head_ids),
        )
        for key, result in zip(keys, results)
    ]
    attention = _attention_result(trace, layer_sel, [head_ids.index(h) for h in head_sel])
    if attention is not None:
        sections.append(
            Section(
                key=keys[-1], title="Attention patterns", kind="attention", result=attention,
                description=f"The patterns the model computed ({trace.meta.attention}), embedded layers and heads.",
                layers=tuple(layer_sel), heads=tuple(head_sel),
            )
        )
    return Report(
        run=run,
        sections=tuple(sections),
        examples=examples_of(trace.encoded, ids),
        layers=tuple(layer_sel),
        heads=tuple(head_sel),
        top_k=top_k,
        evidence=evidence,
    )


def examples_of(encoded: Encoded, ids: Sequence[str | None] | None = None) -> tuple[ExampleTokens, ...]:
    """Return each example's tokens, special-token and real-position flags (padded to `pos`), its text, its
    pair's text (text pairs) and its id."""
    texts, pairs = encoded.texts or (), encoded.pairs or ()
    out = []
    for b in range(encoded.batch):
        fields = _side(encoded, b, "")
        if encoded.decoder is not None:
            fields.update(_side(encoded.decoder, b, "decoder_"))
        if encoded.image is not None:  # a dual encoder's image: its class token and patches
            fields.update(_side(encoded.image, b, "image_"))
        fields["words"] = tuple(encoded.word_ids[b]) if encoded.word_ids else ()
        id_ = ids[b] if ids is not None and b < len(ids) else None
        out.append(ExampleTokens(**fields, text=texts[b] if b < len(texts) else None, id=id_,
                                 text_pair=pairs[b] if b < len(pairs) else None))
    return tuple(out)


def _side(encoded: Encoded, b: int, prefix: str) -> dict[str, tuple]:
    """Return example `b`'s tokens, special and real flags and display forms of one side, keyed `prefix` + field."""
    return {
        f"{prefix}tokens": tuple(str(token) for token in encoded.tokens[b]),
        f"{prefix}special": tuple(bool(flag) for flag in encoded.special[b].tolist()),
        f"{prefix}real": tuple(bool(flag) for flag in (encoded.attention_mask[b] != 0).tolist()),
        f"{prefix}display": tuple(display_tokens(encoded.tokens[b], encoded.scheme)),
    }


def _check_batch(result: AnalyzerResult, batch: int) -> None:
    if not isinstance(result, AnalyzerResult):
        raise ReportError(
            f"results must be AnalyzerResult objects; got {type(result).__name__}. Pass what analyze() returns."
        )
    for name, array in result.arrays.items():
        if array.axes and array.axes[0] == "batch" and array.values.shape[0] != batch:
            raise ReportError(
                f"{result.analyzer}.{name} has {array.values.shape[0]} examples but the trace has {batch};"
                " report the trace the analyzer ran on."
            )


def _summary(result: AnalyzerResult) -> str:
    """Return the analyzer's one-line summary from the registry ('' when it is not registered)."""
    from interpret.analysis import registry

    try:
        return str(registry.get(result.analyzer).summary)
    except AnalyzerError:
        return ""


def _captured_layers(trace: Trace) -> list[int]:
    """Return the model layers an analyzer's `layer` axis runs over: the main stack's captured layers."""
    found = trace.layers("attn.hook_pattern", "encoder." if trace.meta.kind == "encoder-decoder" else "")
    return found or list(trace.meta.layers)


def _captured_heads(trace: Trace) -> list[int | str]:
    """Return the model head behind each entry of the captured head axis ("mean"/"max" when reduced)."""
    if trace.meta.reduce:
        return [trace.meta.reduce]
    if trace.meta.heads is not None:
        return list(trace.meta.heads)
    return list(range(trace.meta.n_heads))


def _select_heads(heads: Sequence[int] | None, head_ids: list[int | str], trace: Trace) -> list[int | str]:
    if heads is None:
        return list(head_ids)
    if trace.meta.reduce:
        raise ReportError(
            f"heads={list(heads)} cannot be picked from a trace reduced over heads ({trace.meta.reduce});"
            " collect without reduce= to choose heads."
        )
    return _chosen("head", heads, head_ids, trace.meta.n_heads)


def _chosen(axis: str, asked: Sequence[int], captured: Sequence[int | str], count: int) -> list[Any]:
    """Return the asked layers or heads (negatives count back from `count`) without repeats, in the order asked;
    ReportError naming the first that was not captured."""
    chosen = []
    for item in asked:
        index = item + count if item < 0 else item
        if index not in captured:
            raise ReportError(
                f"{axis} {item} was not captured (captured {axis}s: {list(captured)}); pick {axis}s from those, or"
                f" collect it with {axis}s=."
            )
        if index not in chosen:
            chosen.append(index)
    return chosen


def _attention_result(trace: Trace, layers: list[int], head_index: list[int]) -> AnalyzerResult | None:
    """Return the raw patterns [batch, layer, head, query, key] of the selection as a result, or None."""
    arrays, views, checks = {}, [], {}
    for name, prefix, suffix, query_side, key_side, title in _STACKS:
        captured = trace.layers(suffix, prefix)
        if not captured or any(layer not in captured for layer in layers):
            continue
        # Heads are picked per layer before stacking: layers may differ in head count (Swin's stages).
        picked = torch.stack([trace[f"{prefix}blocks.{layer}.{suffix}"][:, head_index] for layer in layers], dim=1).detach()
        pattern = to_numpy(picked.to(torch.float32))
        arrays[name] = NamedArray(pattern, ("batch", "layer", "head", "query", "key"))
        views.append(View("head_grid", name, title, {"query_tokens": query_side, "key_tokens": key_side}))
        decoder = query_side == "decoder" and trace.encoded.decoder is not None
        queries = trace.encoded.decoder if decoder else trace.encoded
        checks[f"{name}_row_sum_error"] = Check(
            _row_sum_error(pattern, to_numpy(queries.attention_mask != 0)),
            PATTERN_ROW_SUM_TOLERANCE,
            f"largest |row sum − 1| of the {name} attention rows at real query positions",
        )
    if not arrays:
        return None
    return AnalyzerResult(
        analyzer="attention",
        version="1",
        params={"source": trace.meta.attention, "layers": list(layers), "heads": list(head_index)},
        arrays=arrays,
        checks=checks,
        views=tuple(views),
        tokens=tuple(tuple(row) for row in trace.encoded.tokens),
    )


def _row_sum_error(pattern: np.ndarray, real: np.ndarray) -> float:
    """Return the largest |row sum − 1| of `pattern` [batch, layer, head, query, key] over real queries."""
    sums = pattern.astype(np.float64).sum(axis=-1)  # [batch, layer, head, query]
    rows = sums.transpose(0, 3, 1, 2)[real[:, : sums.shape[-1]]]
    return float(np.abs(rows - 1.0).max(initial=0.0)) if rows.size else 0.0
