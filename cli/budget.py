"""The refusals of the estimates (`interpret.estimate`), made before the model loads: length limits, the report's
size and memory, the head study's FLOPs and memory.

The counts come from the checkpoint's tokenizer.json without torch (`interpret.estimate.facts.count_tokens`) and
are checked again with the transformers tokenizer the run will use, still before the weights load. A refusal
(usage error, exit 2, one line) names the options that would make the run fit, with numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

from interpret.cli import prerun
from interpret.cli.output import usage_error
from interpret.cli.preflight import ModelPlan, Source
from interpret.estimate.facts import ModelFacts, count_tokens
from interpret.estimate.heads import CPU_FLOPS_BUDGET, GPU_FLOPS_BUDGET, HeadsCost, estimate_heads, fraction_within
from interpret.estimate.memory import (
    CAPTURE_BUDGET, default_memory, human_bytes, longest_within, round_up, round_up_bytes, sci,
)
from interpret.estimate.report import JSON_MIN_BYTES_PER_VALUE, ReportEstimate


def check_lengths(
    counts: Sequence[int],
    limit: int | None,
    max_length: int | None,
    source: Source,
    continuation_counts: Sequence[int] = (),
    continuation_option: str = "--continuation",
) -> list[int]:
    """Return each text's length as the model will see it, or a usage error naming the first text too long.

    counts: tokens per text (special tokens included); continuation_counts: tokens of each text's
    continuation (given, or the most `--generate N` writes, named by `continuation_option`), which stays whole
    when --max-length cuts the text (`interpret.inputs.encode`).
    """
    if max_length is not None and limit is not None and max_length > limit:
        raise usage_error(f"--max-length {max_length} exceeds the model's limit of {limit} tokens; use at most {limit}.")
    follow = list(continuation_counts) or [0] * len(counts)
    lengths = []
    for i, (count, extra) in enumerate(zip(counts, follow)):
        total = count + extra
        if max_length is None and limit is not None and total > limit:
            raise usage_error(
                f"{source.name(i, len(counts))} has {total} tokens but the model accepts at most {limit};"
                f" shorten it or truncate with --max-length {limit}."
            )
        cap = max_length if max_length is not None else limit
        if cap is not None and extra >= cap:
            raise usage_error(
                f"the {continuation_option} of {source.name(i, len(counts))} is {extra} tokens, which leaves no room"
                f" for the text within {cap}; shorten it: the continuation stays whole while the text is cut."
            )
        lengths.append(min(total, cap) if cap is not None else total)
    return lengths


def estimated_lengths(
    plan: ModelPlan, texts: Sequence[str], max_length: int | None, source: Source, pairs: Sequence[str] | None = None,
) -> list[int] | None:
    """Return `check_lengths` of the counts (of each text with its pair, when `pairs` are given) from the
    checkpoint's tokenizer.json, without torch (None without one)."""
    counts = count_tokens(plan.checkpoint.directory, texts, pairs=pairs)
    return None if counts is None else check_lengths(counts, plan.length_limit(), max_length, source)


def exact_lengths(
    plan: ModelPlan, texts: Sequence[str], max_length: int | None, source: Source, device: str,
    pairs: Sequence[str] | None = None,
) -> list[int]:
    """Return `check_lengths` of the counts (of each text with its pair, when `pairs` are given) of the tokenizer
    the run will use (`prerun.load_tokenizer`)."""
    tokenizer = prerun.load_tokenizer(plan, device)
    return check_lengths(prerun.exact_counts(tokenizer, texts, pairs=pairs), plan.length_limit(), max_length, source)


def check_budget(
    estimate: ReportEstimate,
    facts: ModelFacts,
    *,
    fmt: str,
    max_bytes: int,
    max_memory: int | None,
) -> None:
    """Raise a usage error naming what would make the report fit when it passes a limit; else return."""
    if estimate.capture_bytes > CAPTURE_BUDGET:
        fit = longest_within(CAPTURE_BUDGET, facts.n_layers * facts.n_heads)
        raise usage_error(
            f"the run would capture {human_bytes(estimate.capture_bytes)} of attention per example ({facts.n_layers}"
            f" layers × {facts.n_heads} heads × {estimate.tokens}² tokens, float32), over the"
            f" {human_bytes(CAPTURE_BUDGET)} capture budget; truncate the input with --max-length {fit}, or run"
            " the analyzers streamed (--streaming auto)."
        )
    if estimate.output_bytes > max_bytes:
        raise usage_error(_size_refusal(estimate, fmt, max_bytes))
    if max_memory is not None and estimate.memory_bytes > max_memory:
        parts = ", ".join(f"{name} {human_bytes(size)}" for name, size in estimate.parts.items() if size)
        raise usage_error(
            f"the run would need about {human_bytes(estimate.memory_bytes)} of memory ({parts}), over --max-memory"
            f" {human_bytes(max_memory)}; truncate the input (--max-length), run fewer analyzers (-a) or fewer"
            " examples, embed fewer layers or heads (--layers, --heads), or raise --max-memory."
        )


def _size_refusal(estimate: ReportEstimate, fmt: str, max_bytes: int) -> str:
    """Return the refusal of a report whose attention views alone pass --max-bytes, with what would fit."""
    fits, longest = estimate.fitting(max_bytes)
    options = []
    if fits >= 1:
        if fits >= estimate.heads:  # whole layers fit: the last ones
            layers = ",".join(str(-k) for k in range(min(fits // estimate.heads, estimate.layers), 0, -1))
            example = f"--layers {layers}"
        else:
            example = f"--layers -1 --heads {','.join(str(h) for h in range(fits))}"
        options.append(f"embed at most {fits} layer-head pair{'s' if fits > 1 else ''} (e.g. {example})")
    if longest >= 16:
        options.append(f"truncate the input (--max-length {longest})")
    options.append("run the analyzers streamed, which embed no attention view (--streaming on)")
    options.append(f"or raise --max-bytes to {round_up_bytes(estimate.output_bytes)}")
    views = f"{estimate.layers} layers × {estimate.heads} heads × {estimate.tokens}×{estimate.tokens} tokens"
    if estimate.decoder_tokens:
        views += f" (and the decoder's {estimate.decoder_tokens} tokens)"
    amount = "at least" if fmt == "html" else "about"
    base = estimate.output_bytes - estimate.view_bytes
    scripts = f", plus {human_bytes(base)} of inline scripts" if base else ""
    return (
        f"the {fmt.upper()} report would be {amount} {human_bytes(estimate.output_bytes)} (attention views: {views} ×"
        f" {estimate.examples} example{'s' if estimate.examples != 1 else ''}{scripts}), above --max-bytes"
        f" {human_bytes(max_bytes)}; {', '.join(options)}."
    )


def check_report_size(report: Any, fmt: str, max_bytes: int) -> None:
    """Refuse (ReportError, exit 1) a report whose real size passes --max-bytes, before anything is written.

    The page is built and measured (and kept for writing); for JSON every value of every array is counted at
    the four bytes the shortest number takes, and the writer stops the moment the real text passes the limit.
    """
    from interpret.errors import ReportError

    size = len(report.page()) if fmt == "html" else JSON_MIN_BYTES_PER_VALUE * sum(
        array.values.size for section in report.sections for array in section.result.arrays.values()
    )
    if size <= max_bytes:
        return
    drawn = {
        section.key: sum(section.result.arrays[name].values.size for name in {view.array for view in section.result.views})
        for section in report.sections
    }
    largest = max(drawn, key=drawn.__getitem__)
    bound = "" if fmt == "html" else "at least "
    raise ReportError(
        f"the {fmt.upper()} report would be {bound}{human_bytes(size)}, above --max-bytes {human_bytes(max_bytes)}"
        f" (the largest section, {largest}, draws {drawn[largest]:,} values); run fewer analyzers (-a) or have them keep"
        " fewer rows (--set, see `interpret analyzers show NAME`), embed fewer layers or heads (--layers, --heads),"
        f" truncate the input (--max-length), or raise --max-bytes to {round_up_bytes(size)}."
    )


def parse_flops(value: str | None) -> float | None:
    """Return --max-flops as a number (None when not given); usage error when it is not a positive number."""
    if value is None:
        return None
    try:
        flops = float(value)
    except ValueError:
        flops = math.nan
    if not math.isfinite(flops) or flops <= 0:
        raise usage_error(f"--max-flops {value!r} is not a positive number; give e.g. --max-flops 2e14.")
    return flops


def check_cost(
    plan: ModelPlan,
    lengths: Sequence[int],
    *,
    batch_size: int,
    fraction: float,
    label_free: bool,
    default_head: bool,
    dtype: str | None,
    device: str,
    max_flops: float | None,
    max_memory: int | None,
) -> HeadsCost:
    """Return the run's HeadsCost, or a usage error (one line) when it passes the FLOPs or the memory budget."""
    cost_of = partial(
        estimate_heads, plan.facts, lengths, weight_bytes=plan.checkpoint.weight_bytes(), batch_size=batch_size,
        label_free=label_free, default_head=default_head, dtype=dtype,
    )
    cost = cost_of(fraction)
    gpu = prerun.on_cuda(device)
    budget = max_flops or (GPU_FLOPS_BUDGET if gpu else CPU_FLOPS_BUDGET)
    if cost.flops > budget:
        where = "" if max_flops else f" (the default on a {'GPU' if gpu else 'CPU'})"
        better = fraction_within(budget, cost_of) if fraction < 0.2 else None
        step = f", prune more heads per step (--fraction {better})" if better else ""
        raise usage_error(
            f"the head study would take {cost.describe()}, over --max-flops {sci(budget)}{where}; use fewer"
            f" examples, truncate them (--max-length){step}, or raise --max-flops to {round_up(cost.flops)}."
        )
    memory = cost.resident(gpu)
    limit = max_memory or default_memory(gpu)
    if limit is not None and memory > limit:
        raise usage_error(
            f"one importance batch would need about {human_bytes(memory)} (the batch's activations kept for the"
            f" backward pass and the weights), over --max-memory {human_bytes(limit)}; lower --batch-size, truncate"
            " the input (--max-length), or raise --max-memory."
        )
    return cost
