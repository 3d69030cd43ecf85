"""Size and memory of a report, from the model's config and the inputs' token counts, before the model loads.

The part of a report that grows with tokens² × layers × heads is known before anything runs: the attention
views embed every selected layer and head of every example, [batch, layer, head, pos, pos] values, and the
run captures every layer's pattern, float32. `estimate_report` adds those up from `ModelFacts`
(config.json) and the token counts (`facts.count_tokens`, without torch), so a command line can refuse a
report that cannot fit before loading a model. `streamed_estimate` turns it into what a streamed run takes:
no pattern captured but, per example, each layer's queries, keys, values and z ([pos, d_model] each, float32
at most), no attention view embedded, per analyzer one block of pattern rows (`BLOCK_BYTES`) and its
float64 vectors, and what the streamed gradient pass keeps (`gradient_pass_bytes`).

What each figure means:
- `output_bytes` is the size of the attention views in the written file, as the format stores them: the
  page packs an array of 65 536 values or more as 16-bit integers in base64 (exactly 4 bytes per 3 values;
  smaller arrays as short decimals, at least 2 bytes a value), so for HTML it is a lower bound of the page;
  the JSON report writes every value as a full-precision number, measured at 21 bytes for an attention
  probability (a float32 written as the shortest double that round-trips, e.g. `0.012345679104328156,`)
  and 4 for a zero (`0.0,`: padding, and above the diagonal of a causal pattern), so for JSON it is the
  typical size. The page also inlines its scripts and styles (`page_base_bytes`, about 0.4 MB). Analyzer
  arrays come on top; the exact size is checked again before writing.
- `capture_bytes` is what the run captures per example: every layer's and head's pattern, float32.
- `memory_bytes` is an estimate of the peak resident memory: a fixed base for the interpreter and libraries,
  the weights, the capture held three times (the trace, the report's stacked copy, an analyzer's working
  copy), each analyzer's float64 working arrays, serializing the views, with evidence one removal pass
  (`evidence_bytes`: `interpret.estimate.memory.rows_per_pass` rows of `pass_row_bytes`, the pass's own
  bound), and where an analyzer runs the model backward its pass (`GradientPass`: `full_gradient_bytes`;
  streamed, `gradient_pass_bytes`). Approximate by nature and meant to err high; the CLI tests compare it
  with the measured peak of a run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from interpret.estimate.facts import ModelFacts
from interpret.estimate.memory import (
    BASE_MEMORY, BLOCK_BYTES, CUDA_HOST_MEMORY, gradient_policy, pass_row_bytes, rows_per_pass,
)

Format = Literal["html", "json"]

DEFAULT_MAX_BYTES = 20_000_000  # the report's own default limit (interpret.report.DEFAULT_MAX_BYTES)
PACK_THRESHOLD = 65_536  # arrays of this many values are packed as u16 (interpret.report.views)
# What autograd keeps of one block per token in the streamed gradient pass, in values of the model's dtype:
# 8 · d_model + 8 · d_attn + 4 · d_ff (norms, residuals, q, k, v, rotary copies, the attention's output and
# log-sum-exp, z, the MLP's gate, up, activation and product, and the pass's own q, k, v, z, ∂z). Measured on
# a Llama-shaped model (8 layers, d_model 512, d_ff 2048, CPU, float32): 52.5 kB per layer and token over a
# streamed rollout at 1,024 and 2,048 tokens, against 64 kB counted here.
GRADIENT_VALUES = (8, 8, 4)  # per d_model, d_attn, d_ff
_PAGE_MIN_BYTES_PER_VALUE = 2  # a short decimal and its comma
JSON_MIN_BYTES_PER_VALUE = 4  # "0.0," — every other float is longer
JSON_BYTES_PER_PROBABILITY = 21  # measured on softmax rows of 16 to 1024 keys: 20.4 to 22.1 bytes
_PAGE_WORK_BYTES_PER_VALUE = 32  # float64 copy, scaled copy, mask, u16, base64 bytes and text while packing
_JSON_WORK_BYTES_PER_VALUE = 40  # a Python float and its list slot per value, plus the encoder's chunks


@dataclass(frozen=True)
class ReportEstimate:
    """What a report will take, estimated before the model runs (see the module docstring).

    tokens: the padded length of the batch (the longest example), decoder_tokens the decoder side's (0 when
    none). view_values: how many attention values the views embed, view_bytes their size in the file;
    output_bytes: the file's size (a lower bound of an HTML page, the typical size of a JSON report);
    capture_bytes: captured patterns per example (the largest example's, as the capture budget counts it);
    memory_bytes: the estimated peak; parts: the terms of memory_bytes by name.
    """

    examples: int
    tokens: int
    decoder_tokens: int
    layers: int
    heads: int
    view_values: int
    view_bytes: int
    output_bytes: int
    capture_bytes: int
    memory_bytes: int
    parts: dict[str, int]

    def fitting(self, max_bytes: int) -> tuple[int, int]:
        """Return what would fit in `max_bytes`: (layer-head pairs at these tokens, tokens at these layers and
        heads); the views grow with the pairs and with tokens², the page's scripts stay."""
        room = max_bytes - (self.output_bytes - self.view_bytes)  # what the views may take besides the page
        per_pair = self.view_bytes / max(self.layers * self.heads, 1)
        pairs = int(room // per_pair) if per_pair and room > 0 else 0
        tokens = int(self.tokens * math.sqrt(room / self.view_bytes)) if room > 0 and self.view_bytes else 0
        return pairs, tokens


def estimate_report(
    facts: ModelFacts,
    lengths: Sequence[int],
    *,
    decoder_lengths: Sequence[int] = (),
    layers: int | None = None,
    heads: int | None = None,
    fmt: Format = "html",
    analyzers: int = 1,
    weight_bytes: int = 0,
    dtype: str | None = None,
    cuda: bool = False,
    evidence: bool = False,
    gradients: bool = False,
) -> ReportEstimate:
    """Return the ReportEstimate of explaining texts of `lengths` tokens with `facts`'s model.

    layers / heads: how many layers and heads the views embed (None: all). analyzers: how many run.
    weight_bytes / dtype: the weight files' size and the dtype they load in (--dtype; None: float32).
    cuda: the model runs on a CUDA device (its runtime's host memory, `CUDA_HOST_MEMORY`, on top).
    evidence: the run measures faithfulness (one removal pass of the longest example on top).
    gradients: an analyzer runs the model backward (`full_gradient_bytes` of the batch on top).
    """
    batch = len(lengths)
    n = max(lengths, default=0)
    d = max(decoder_lengths, default=0) if facts.kind == "encoder-decoder" else 0
    n_layers, n_heads = facts.n_layers, facts.n_heads
    shown_layers = n_layers if layers is None else layers
    shown_heads = n_heads if heads is None else heads
    pairs = shown_layers * shown_heads
    causal = facts.kind == "decoder"
    # One array per attention stack, as build_report embeds them: (values, nonzero values). Decoder and cross
    # stacks need the selected layers to exist in the decoder too; counting them whenever there is a decoder
    # errs high.
    stacks = [(pairs * batch * n * n, pairs * sum(_real_entries(m, causal) for m in lengths))]
    captured = [n_layers * n_heads * n * n]
    if d:
        pairs_d = facts.decoder_layers * facts.decoder_heads
        stacks += [
            (pairs * batch * d * d, pairs * sum(_real_entries(m, True) for m in decoder_lengths)),
            (pairs * batch * d * n, pairs * sum(m_d * m for m_d, m in zip(decoder_lengths, lengths))),
        ]
        captured += [pairs_d * d * d, pairs_d * d * n]
    view_values = sum(values for values, _ in stacks)
    view_bytes = sum(_stored_bytes(values, nonzero, fmt) for values, nonzero in stacks)
    output = view_bytes + (page_base_bytes() if fmt == "html" else 0)
    capture_example = 4 * sum(captured)
    work = _PAGE_WORK_BYTES_PER_VALUE if fmt == "html" else _JSON_WORK_BYTES_PER_VALUE
    parts = {
        "base": base_bytes(cuda),
        "weights": loaded_weight_bytes(facts, weight_bytes, dtype),
        "capture": 3 * batch * capture_example,
        "analyzers": analyzer_bytes(facts, analyzers, batch, capture_example, n * n + d * d + d * n),
        "serialize": work * view_values + 2 * output,
        "evidence": evidence_bytes(n, n_heads) if evidence else 0,
        "gradients": full_gradient_bytes(facts, n, batch, facts.loaded_itemsize(dtype)) if gradients else 0,
    }
    return ReportEstimate(
        examples=batch, tokens=n, decoder_tokens=d, layers=shown_layers, heads=shown_heads, view_values=view_values,
        view_bytes=view_bytes, output_bytes=output, capture_bytes=capture_example, memory_bytes=sum(parts.values()),
        parts=parts,
    )


def _real_entries(length: int, causal: bool) -> int:
    """Return how many entries of a [length, length] pattern can be nonzero (the lower triangle if causal)."""
    return length * (length + 1) // 2 if causal else length * length


def _stored_bytes(values: int, nonzero: int, fmt: Format) -> int:
    """Return the bytes one array of `values` numbers (`nonzero` of them not zero) takes in the report."""
    if fmt == "json":
        return JSON_BYTES_PER_PROBABILITY * nonzero + JSON_MIN_BYTES_PER_VALUE * (values - nonzero)
    if values >= PACK_THRESHOLD:
        return 4 * math.ceil(2 * values / 3)  # u16 little-endian, base64
    return _PAGE_MIN_BYTES_PER_VALUE * values


def page_base_bytes() -> int:
    """Return the bytes every HTML page holds whatever it shows: the inline scripts and styles (our own, d3 and
    jQuery), found beside the installed `interpret.report` without importing it (which imports torch)."""
    import importlib.util

    package = importlib.util.find_spec("interpret")
    for location in (package.submodule_search_locations or []) if package is not None else []:
        static = Path(location) / "report" / "static"
        if static.is_dir():
            files = [*static.glob("*.js"), *static.glob("*.css"), *static.glob("vendor/*.js")]
            return sum(path.stat().st_size for path in files)
    return 0


def base_bytes(cuda: bool) -> int:
    """Return the interpreter and libraries' memory (`BASE_MEMORY`; on CUDA its runtime's host memory on top)."""
    return BASE_MEMORY + (CUDA_HOST_MEMORY if cuda else 0)


def loaded_weight_bytes(facts: ModelFacts, weight_bytes: int, dtype: str | None) -> int:
    """Return the weight files' `weight_bytes` as they load with --dtype `dtype` (None: float32)."""
    return weight_bytes * facts.loaded_itemsize(dtype) // max(facts.weight_itemsize, 1)


def analyzer_bytes(facts: ModelFacts, analyzers: int, examples: int, capture_example: int, square: int) -> int:
    """Return the full analyzers' working arrays: per analyzer a float64 copy of one example's patterns
    (`capture_example` bytes captured in float32) and float64 [layers + 2, ...] results of `square` entries per
    layer (n² for one stack; an encoder-decoder's three stacks n² + d² + d·n) for each of the `examples`."""
    return analyzers * (2 * capture_example + examples * (facts.n_layers + 2) * square * 8)


def streamed_capture_bytes(facts: ModelFacts, tokens: int) -> int:
    """Return what a streamed run captures of one example of `tokens` tokens: each layer's q, k, v and z
    [tokens, d_model], float32."""
    return 4 * facts.n_layers * tokens * facts.d_model * 4


def streamed_analyzer_bytes(facts: ModelFacts, analyzers: int, examples: int, tokens: int) -> int:
    """Return the streamed analyzers' working memory: per analyzer one block of pattern rows (`BLOCK_BYTES`) and
    float64 [layers + 2, tokens] vectors for each of the `examples`."""
    return analyzers * (BLOCK_BYTES + 8 * (facts.n_layers + 2) * tokens * examples)


def evidence_bytes(tokens: int, heads: int) -> int:
    """Return one evidence removal pass over examples of `tokens` tokens (`rows_per_pass` rows of
    `pass_row_bytes`, the pass's own bound; 0 for no tokens)."""
    return rows_per_pass(tokens, heads) * pass_row_bytes(tokens, heads) if tokens else 0


def block_bytes(facts: ModelFacts, tokens: int, itemsize: int) -> int:
    """Return one block's activations over `tokens` tokens (batch × length): `GRADIENT_VALUES` per token of
    d_model, d_attn and d_ff, `itemsize` bytes each."""
    return itemsize * tokens * sum(k * width for k, width in zip(GRADIENT_VALUES, (facts.d_model, facts.d_attn, facts.d_ff)))


@dataclass(frozen=True)
class GradientPass:
    """An analyzer that runs the model backward: streamed or not, and its --set recompute / offload."""

    streamed: bool
    recompute: str = "auto"
    offload: str = "auto"

    @classmethod
    def of(cls, streamed: bool, params: Mapping[str, str]) -> GradientPass:
        """Return the pass of an analyzer with these --set params (recompute / offload, "auto" when not set)."""
        return cls(streamed, params.get("recompute", "auto"), params.get("offload", "auto"))

    def bytes(self, facts: ModelFacts, tokens: int, examples: int, itemsize: int, cuda: bool) -> int:
        """Return what this pass keeps for `examples` of `tokens` tokens: `gradient_pass_bytes` streamed,
        `full_gradient_bytes` otherwise."""
        if self.streamed:
            return gradient_pass_bytes(facts, tokens, examples, itemsize, cuda, self.recompute, self.offload)
        return full_gradient_bytes(facts, tokens, examples, itemsize)


def full_gradient_bytes(facts: ModelFacts, tokens: int, examples: int, itemsize: int) -> int:
    """Return what a backward pass to the captured patterns keeps for `examples` of `tokens` tokens: every
    block's activations (`block_bytes`, layers + 1 of them), every layer's pattern and its gradient ([head, n, n]
    twice, `itemsize` bytes) and their float64 product ∇A ⊙ A (`plugins/_pattern_grad.py`)."""
    saved = examples * facts.n_layers * facts.n_heads * tokens * tokens * (2 * itemsize + 8)
    return (facts.n_layers + 1) * block_bytes(facts, examples * tokens, itemsize) + saved


def gradient_pass_bytes(facts: ModelFacts, tokens: int, examples: int, itemsize: int, cuda: bool,
                        recompute: str = "auto", offload: str = "auto") -> int:
    """Return the host memory the streamed gradient pass keeps (`interpret.streaming.capture.gradient_pass`)
    for `examples` of `tokens` tokens, with one block's worth (`GRADIENT_VALUES` per token) for the gradients of
    the block the backward pass is in: where autograd keeps every block, every layer's activations and that;
    with blocks recomputed each block's input and one recomputed block's activations and gradients; on CUDA
    only what is offloaded to the host, the rest being on the device (the pass's own policy: `gradient_policy`,
    `OFFLOAD_TOKENS` tokens of batch × length for "auto")."""
    total = examples * tokens
    block = block_bytes(facts, total, itemsize)
    offloads, recomputes = gradient_policy(cuda, total, offload, recompute)
    if cuda:
        return facts.n_layers * block if offloads else 0
    if recomputes:
        return facts.n_layers * itemsize * total * facts.d_model + 2 * block
    return (facts.n_layers + 1) * block


def streamed_estimate(estimate: ReportEstimate, facts: ModelFacts, analyzers: int, fmt: str,
                      gradient_bytes: int = 0) -> ReportEstimate:
    """Return `estimate` as a streamed run takes it: O(pos·d_model) capture, no attention views, and
    `gradient_bytes` for the streamed gradient passes (the largest analyzer's `gradient_pass_bytes`: they run
    one after another; 0 for none)."""
    n = estimate.tokens
    capture = streamed_capture_bytes(facts, n)
    output = page_base_bytes() if fmt == "html" else 0
    parts = dict(estimate.parts)
    parts["capture"] = 3 * estimate.examples * capture
    parts["analyzers"] = streamed_analyzer_bytes(facts, analyzers, estimate.examples, n)
    parts["serialize"] = 2 * output
    parts["gradients"] = gradient_bytes
    return dataclasses.replace(
        estimate, layers=0, heads=0, view_values=0, view_bytes=0, output_bytes=output, capture_bytes=capture,
        memory_bytes=sum(parts.values()), parts=parts,
    )
