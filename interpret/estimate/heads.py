"""What `study_heads` will cost, estimated before the model loads: the passes over the dataset, their floating-point
operations, and the memory of one importance batch; and the bound the CLI refuses above.

Passes over the dataset (upper bound: each pruning curve is counted as if it ran until every head is off; it
usually stops sooner, after the first step below the threshold):

    label-free only   1 forward (the unpruned predictions the loss is taken against)
    importance        1 forward + 1 backward (the head map)
    entropy           1 forward (attention captured)
    per curve         1 forward (the original metric) + S × (1 forward + 1 backward + 1 forward)
    and once          1 forward of the first batch (the probe that tells a classifier from a language model)

where S = len(removal_schedule(heads, fraction)), the steps that take every head off at
max(1, ⌊fraction · remaining⌋) heads per step (interpret.heads.curve.step_size, the loop's own rule).

Floating-point operations of one forward over the dataset, with P the multiply-accumulate parameters, L layers,
d_attn = heads · head size, and every batch padded to its longest example (b rows of n tokens):

    Σ_batches  2 · P · b · n  +  4 · L · d_attn · b · n²

(2 FLOPs per parameter per token, Kaplan et al. 2020, "Scaling laws for neural language models", Sec. 2.1,
Table 1; plus the two attention products QKᵀ and AV, 2 · n² · d_attn each). The backward pass asks autograd for
the gradient of the gates only, so no weight gradient is formed: it costs about one forward (the input
gradients), counted as one. P = parameters − vocab · d_model for a model whose output is not over the vocabulary
(the input embedding is a lookup), all parameters for a language model (its output layer is a vocab × d_model
product, tied or not).

Memory of one importance batch (the backward keeps every layer's activations of the batch), per example of n
tokens, at `itemsize` bytes per value:

    L · (n · (10 · d_model + 2 · d_ff) + 2 · heads · n²) · itemsize

(q, k, v, the attention output, the output projection's input and output, two layer-norm inputs, the feed-forward
input and output: about 10 · d_model per token; the feed-forward's two d_ff-wide activations; the attention scores
and probabilities), plus the weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from interpret.estimate.facts import ModelFacts
from interpret.estimate.memory import BASE_MEMORY, sci

CPU_FLOPS_BUDGET = 5e13  # about a quarter of an hour at the 5e10 FLOP/s a few CPU cores sustain
GPU_FLOPS_BUDGET = 5e15  # about a quarter of an hour at the 5e12 FLOP/s one GPU sustains on small batches


def step_size(remaining: int, fraction: float) -> int:
    """Return how many heads one pruning step removes when `remaining` are still on."""
    return min(remaining, max(1, int(fraction * remaining)))


def removal_schedule(heads: int, fraction: float) -> list[int]:
    """Return the heads each step removes, from `heads` on until none is left (the loop's longest run)."""
    schedule, remaining = [], heads
    while remaining > 0:
        removed = step_size(remaining, fraction)
        schedule.append(removed)
        remaining -= removed
    return schedule


@dataclass(frozen=True)
class HeadsCost:
    """The estimate: steps per curve (at most), passes over the dataset, FLOPs, tokens per pass (padded) and
    the peak memory of the importance pass (one batch's activations plus the weights), in bytes; `resident`
    adds the process's own base on a CPU (on a GPU the batch and the weights are the device's memory)."""

    steps: int
    forwards: int
    backwards: int
    flops: float
    tokens: int
    memory_bytes: int

    def resident(self, gpu: bool) -> int:
        """Return the memory the importance batch needs on its device (see the class docstring)."""
        return self.memory_bytes + (0 if gpu else BASE_MEMORY)

    def describe(self) -> str:
        """Return the estimate in words, for a message or a summary."""
        return (f"{sci(self.flops)} FLOPs at most: 2 curves × up to {self.steps} steps, {self.forwards} forward and"
                f" {self.backwards} backward passes over {self.tokens:,} tokens (padded)")


def passes(steps_least: int, steps_most: int, label_free: bool) -> tuple[int, int]:
    """Return (forwards, backwards) over the dataset of a study whose curves ran `steps_least` and `steps_most`
    steps: label-free predictions, importance, entropy, and per curve its original metric and per step an
    importance pass and a metric pass."""
    steps = steps_least + steps_most
    return int(label_free) + 1 + 1 + 2 + 2 * steps, 1 + steps


def batch_lengths(lengths: Sequence[int], batch_size: int) -> list[tuple[int, int]]:
    """Return (rows, padded length) of each batch of `lengths` taken in order, `batch_size` at a time."""
    return [(len(lengths[i:i + batch_size]), max(lengths[i:i + batch_size])) for i in range(0, len(lengths), batch_size)]


def estimate_heads(
    facts: ModelFacts, lengths: Sequence[int], fraction: float, *, weight_bytes: int, batch_size: int,
    label_free: bool, default_head: bool = False, dtype: str | None = None,
) -> HeadsCost:
    """Return the HeadsCost of `study_heads` on `facts`'s model, examples of `lengths` tokens (special tokens
    included), pruning `fraction` of the heads still on per step.

    weight_bytes: the weight files' size (parameters × the saved dtype's bytes); dtype: --dtype (None: float32);
    default_head: the built-in model's sentiment head decides, so even a language model's study is a classifier's.
    """
    itemsize = facts.loaded_itemsize(dtype)
    parameters = weight_bytes // max(facts.weight_itemsize, 1)
    language_model = facts.decision == "token" and not default_head
    n_layers, n_heads, d_model = facts.n_layers, facts.n_heads, facts.d_model
    batches = batch_lengths(list(lengths), batch_size)
    steps = len(removal_schedule(n_layers * n_heads, fraction))
    forwards, backwards = passes(steps, steps, label_free and not language_model)
    matmul = parameters if language_model else max(parameters - (facts.vocab_size or 0) * d_model, 0)
    per_batch = [2.0 * matmul * rows * n + 4.0 * n_layers * facts.d_attn * rows * n * n for rows, n in batches]
    probe = per_batch[0] if per_batch else 0.0  # GatedModel.of runs the first batch once to read the decision
    tokens = sum(rows * n for rows, n in batches)
    activations = max(
        (rows * n_layers * (n * (10 * d_model + 2 * facts.d_ff) + 2 * n_heads * n * n) for rows, n in batches), default=0
    )
    return HeadsCost(
        steps=steps, forwards=forwards, backwards=backwards, flops=sum(per_batch) * (forwards + backwards) + probe, tokens=tokens,
        memory_bytes=(activations + parameters) * itemsize,
    )


def fraction_within(budget: float, cost_of: Callable[[float], HeadsCost]) -> float | None:
    """Return the smallest fraction among 0.2, 0.3, 0.5 whose cost (cost_of(fraction).flops) fits `budget`."""
    for fraction in (0.2, 0.3, 0.5):
        if cost_of(fraction).flops <= budget:
            return fraction
    return None
