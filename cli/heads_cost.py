"""`interpret heads`'s cost bound: the pruning loop's worst case estimated from config.json and the exact token
counts, before the weights load (interpret.heads.cost says what is counted), refused in one line above
--max-flops or --max-memory."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from interpret.cli import prerun
from interpret.cli.output import usage_error
from interpret.cli.preflight import ModelPlan
from interpret.estimate import BASE_MEMORY, human_bytes, physical_memory

_FF_KEYS = ("intermediate_size", "ffn_dim", "n_inner", "d_ff", "encoder_ffn_dim", "hidden_dim")
_HEAD_SIZE_KEYS = ("head_dim", "attention_head_size", "d_kv", "kv_channels")


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


def _shape(plan: ModelPlan) -> dict[str, int]:
    """Return d_model, d_ff and d_attn (heads × head size) from config.json (its text config when it has one)."""
    from interpret.streaming.estimate import hidden_size

    facts = plan.facts
    try:
        config = plan.checkpoint.config()
    except Exception:  # noqa: BLE001 - an unreadable config was refused earlier; estimate from the defaults
        config = {}
    sources = [config, config.get("text_config") or {}]
    d_model = hidden_size(plan.checkpoint.directory, facts.n_heads)

    def first(keys: Sequence[str]) -> int | None:
        for source in sources:
            for key in keys:
                value = source.get(key)
                if isinstance(value, int) and value > 0:
                    return value
        return None

    head_size = first(_HEAD_SIZE_KEYS)
    return {
        "d_model": d_model,
        "d_ff": first(_FF_KEYS) or 4 * d_model,
        "d_attn": head_size * facts.n_heads if head_size else d_model,
    }


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
) -> Any:
    """Return the run's HeadsCost, or a usage error (one line) when it passes the FLOPs or the memory budget."""
    from interpret.heads.cost import CPU_FLOPS_BUDGET, GPU_FLOPS_BUDGET, estimate_heads, fraction_within, round_up, sci

    facts = plan.facts
    itemsize = {"float16": 2, "bfloat16": 2, "auto": facts.weight_itemsize}.get(dtype or "float32", 4)
    weight_bytes = plan.checkpoint.weight_bytes()
    parameters = weight_bytes // max(facts.weight_itemsize, 1)
    language_model = facts.decision == "token" and not default_head
    shape = _shape(plan)

    def cost_of(chosen: float):
        return estimate_heads(
            lengths, batch_size=batch_size, n_layers=facts.n_layers, n_heads=facts.n_heads, parameters=parameters,
            vocab=facts.vocab_size or 0, language_model=language_model, label_free=label_free and not language_model,
            fraction=chosen, itemsize=itemsize, weight_bytes=parameters * itemsize, **shape,
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
    memory = cost.memory_bytes + (0 if gpu else BASE_MEMORY)
    limit = max_memory or _default_memory(gpu)
    if limit is not None and memory > limit:
        raise usage_error(
            f"one importance batch would need about {human_bytes(memory)} (the batch's activations kept for the"
            f" backward pass and the weights), over --max-memory {human_bytes(limit)}; lower --batch-size, truncate"
            " the input (--max-length), or raise --max-memory."
        )
    return cost


def _default_memory(gpu: bool) -> int | None:
    """Return 80% of the GPU's memory (gpu) or of this machine's, None when unknown."""
    if gpu:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory * 0.8)
    memory = physical_memory()
    return int(memory * 0.8) if memory else None
