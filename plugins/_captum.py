"""The one place the token-attribution analyzers meet Captum: the forward function, baselines, masks and the
reduction of the embedding axis.

Every Captum method here is called on `ScoreModule`, built from `ctx.score` (each row's target score [rows]
with autograd on, minus the contrast's when the target has one), so an attribution explains exactly the
decision the report shows. Rows carry their example's index as
Captum's `additional_forward_args`; Captum repeats that tensor with the inputs (`torch.cat([arg] * n_steps)`),
so a row of an integration path is scored against its own example's target, whatever the chunking
(`internal_batch_size`).

Baselines (Sundararajan et al. 2017, sec. 3 "a baseline input"):
    pad   every attributed token replaced by the pad token (the end-of-sequence token when there is none);
    mask  replaced by the mask token ([MASK], <mask>); refused when the tokenizer has none;
    zero  the embedding vector of every attributed token set to 0 (attribution in embedding space);
    text  the tokens of `baseline_text` (no special tokens) fill the attributed positions in order, padded
          with the pad token when shorter, cut when longer.
Tokens that are not attributed (padding, and special tokens unless `include_special`) keep their own id in
the baseline, so their attribution is exactly zero and they are not part of F(x) − F(baseline).

Per token, the embedding axis becomes one score by `sum` (signed: Σ_d attr[pos, d], the additive share of
the score that completeness is about) or `l2` (unsigned: ‖attr[pos, :]‖₂).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.analysis.params import as_dict
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.inputs import Encoded
from interpret.reading.text import Aggregation, aggregate, word_spans
from interpret.trace import Trace

Baseline = Literal["pad", "mask", "zero", "text"]
Reduction = Literal["sum", "l2"]


@dataclass(frozen=True)
class TokenParams:
    """Parameters shared by every token-attribution analyzer: the reduction and the special tokens."""

    reduce: Reduction = field(
        default="sum", metadata={"help": "embedding axis to one score per token: sum (signed) or l2 (norm, unsigned)"}
    )
    include_special: bool = field(
        default=False, metadata={"help": "attribute to special tokens ([CLS], [SEP], <s>) too; by default they keep their id"}
    )
    words: Aggregation = field(
        default="sum", metadata={"help": "subword scores to the words a person reads: sum (default) or max"}
    )


@dataclass(frozen=True)
class BaselineParams(TokenParams):
    """Token-attribution parameters with a baseline (what a token is compared with)."""

    baseline: Baseline = field(
        default="pad",
        metadata={"help": "what a token is compared with: pad (pad token), mask (mask token), zero (zero embedding), text (baseline_text)"},
    )
    baseline_text: str = field(
        default="", metadata={"help": "with baseline=text: the text whose tokens replace the attributed tokens"}
    )

    def __post_init__(self) -> None:
        if self.baseline == "text" and not self.baseline_text.strip():
            raise ValueError("baseline=text needs baseline_text, e.g. --set NAME.baseline_text='a b c'")
        if self.baseline != "text" and self.baseline_text:
            raise ValueError(f"baseline_text is read only with baseline=text (baseline is {self.baseline!r})")


@dataclass(frozen=True)
class TokenBatch:
    """The batch a Captum method attributes: ids, baselines and which positions are attributed.

    input_ids [batch, pos], baseline_ids [batch, pos] (the inputs where nothing is attributed),
    examples [batch] (each row's example index), attributed [batch, pos] (bool).
    """

    encoded: Encoded
    input_ids: Int[Tensor, "batch pos"]
    baseline_ids: Int[Tensor, "batch pos"]
    examples: Int[Tensor, " batch"]
    attributed: Bool[Tensor, "batch pos"]

    def rows(self, rows: Int[Tensor, " rows"]) -> TokenBatch:
        """Return the TokenBatch of the examples `rows` alone (same encoded batch, same example indices)."""
        rows = rows.to(self.input_ids.device)
        return TokenBatch(self.encoded, self.input_ids[rows], self.baseline_ids[rows], self.examples[rows],
                          self.attributed[rows])


def token_batch(trace: Trace, ctx: RunContext, params: TokenParams, analyzer: str) -> TokenBatch:
    """Return the TokenBatch of the trace's examples under `params` (refused for inputs that are not token ids)."""
    encoded = trace.encoded
    if encoded.input_ids is None:
        what = "pixels" if encoded.pixel_values is not None else "audio" if encoded.reads_media else "embeddings"
        raise AnalyzerError(f"{analyzer} attributes to token ids, but this trace's inputs are {what}; give text or ids.")
    device = ctx.device or encoded.input_ids.device
    input_ids = encoded.input_ids.to(device)
    real = encoded.attention_mask.to(device).bool()
    special = encoded.special.to(device).bool() if encoded.special is not None else torch.zeros_like(real)
    attributed = real if params.include_special else real & ~special
    if not bool(attributed.any(dim=1).all()):
        raise AnalyzerError(f"{analyzer}: an example has no token to attribute (only special tokens); pass include_special=true.")
    fill = _baseline_fill(ctx, params, attributed, analyzer) if isinstance(params, BaselineParams) else input_ids
    baseline_ids = torch.where(attributed, fill, input_ids)
    examples = torch.arange(encoded.batch, device=device)
    return TokenBatch(encoded, input_ids, baseline_ids, examples, attributed)


def _baseline_fill(ctx: RunContext, params: BaselineParams, attributed: Tensor, analyzer: str) -> Tensor:
    """Return the id each attributed position takes in the baseline [batch, pos] (the input's elsewhere)."""
    tokenizer = ctx.tokenizer
    pad = _token_id(tokenizer, "pad_token_id")
    pad = _token_id(tokenizer, "eos_token_id") if pad is None else pad
    if pad is None and params.baseline in ("pad", "text"):
        raise AnalyzerError(f"{analyzer}: the tokenizer has no pad or end-of-sequence token; use baseline=zero.")
    # pad or 0: a zero baseline replaces embeddings, not ids, and mask fills every position below
    fill = torch.full(attributed.shape, pad or 0, dtype=torch.long, device=attributed.device)
    if params.baseline == "mask":
        mask = _token_id(tokenizer, "mask_token_id")
        if mask is None:
            raise AnalyzerError(f"{analyzer}: the tokenizer has no mask token; use baseline=pad or baseline=zero.")
        fill[:] = mask
    elif params.baseline == "text":
        ids = list(tokenizer(params.baseline_text, add_special_tokens=False)["input_ids"])
        for row in range(attributed.shape[0]):
            positions = torch.nonzero(attributed[row]).flatten()
            count = min(len(ids), len(positions))
            fill[row, positions[:count]] = torch.tensor(ids[:count], dtype=torch.long, device=fill.device)
    return fill


def _token_id(tokenizer: Any, attribute: str) -> int | None:
    value = getattr(tokenizer, attribute, None)
    return int(value) if isinstance(value, int) else None


class ScoreModule(torch.nn.Module):
    """The decision's score, what every Captum method here differentiates: forward(ids [rows, pos] or embeddings
    [rows, pos, d_model], examples [rows]) -> score [rows]; `on` names the input ("input_ids" or
    "inputs_embeds"), `step` the target step scored alone (None: every step summed). A module over the model, so
    that methods which hook the model's modules (DeepLift) reach them."""

    def __init__(
        self, ctx: RunContext, encoded: Encoded, on: Literal["input_ids", "inputs_embeds"] = "inputs_embeds",
        step: int | None = None,
    ) -> None:
        super().__init__()
        self.model = ctx.model  # a submodule, so that the method's hooks reach the model's modules
        self.ctx, self.encoded, self.on, self.step = ctx, encoded, on, step

    def forward(self, inputs: Tensor, examples: Tensor) -> Tensor:
        return self.ctx.score(self.encoded, examples=examples, step=self.step, **{self.on: inputs})


def score_check(ctx: RunContext, trace: Trace, batch: TokenBatch, inputs: Tensor,
                via_embeddings: Tensor | None = None) -> Check:
    """Return the check that the function Captum differentiates is the decision's score: the score of the input
    embeddings [batch, pos, d_model] fed as `inputs_embeds` equals the score of the token ids (a model that
    derives anything else from the ids, such as positions after a padding index, would otherwise be attributed
    on another function than the one it decides with). via_embeddings: that score [batch], when the caller has
    it already; the ids' score is the trace's own pass where it can stand in (`traced_scores`), else a pass."""
    via_ids = traced_scores(ctx, trace, batch)
    with torch.no_grad():
        if via_embeddings is None:
            via_embeddings = ctx.score(batch.encoded, inputs_embeds=inputs, examples=batch.examples)
        if via_ids is None:
            via_ids = ctx.score(batch.encoded, input_ids=batch.input_ids, examples=batch.examples)
    error = float((via_embeddings - via_ids).abs().max())
    scale = max(1.0, float(via_ids.abs().max()))
    return Check(error, 1e-4 * scale, "largest |F(embeddings) − F(ids)|: the attributed function is the decision's score")


def traced_scores(ctx: RunContext, trace: Trace, batch: TokenBatch) -> Float[Tensor, " batch"] | None:
    """Return the decision's scores [batch] of the trace's own forward pass on the token ids (`trace.output`),
    the F(ids) side of `score_check` without running the model again; None where the trace kept no output or
    the batch is not the trace's examples in order on their own ids."""
    ids = trace.encoded.input_ids
    if trace.output is None or ids is None or batch.examples.tolist() != list(range(trace.encoded.batch)):
        return None
    if not torch.equal(batch.input_ids.cpu(), ids.cpu()):
        return None
    with torch.no_grad():
        return ctx.score_output(trace.output, trace.encoded)


def embeddings(ctx: RunContext, batch: TokenBatch, ids: Tensor | None = None) -> Float[Tensor, "batch pos d_model"]:
    """Return the embedding layer's output [batch, pos, d_model] for the batch's ids (or `ids`), detached."""
    with torch.no_grad():
        return ctx.embeddings(batch.encoded, input_ids=batch.input_ids if ids is None else ids).detach()


def baseline_embeddings(ctx: RunContext, batch: TokenBatch, params: BaselineParams) -> tuple[Tensor, Tensor]:
    """Return (input embeddings, baseline embeddings) [batch, pos, d_model] for the chosen baseline.

    The baseline of `zero` is the input with the attributed positions' vectors set to 0; of the other
    baselines the embedding layer's output for `baseline_ids`.
    """
    inputs = embeddings(ctx, batch)
    if params.baseline == "zero":
        return inputs, inputs * (~batch.attributed).unsqueeze(-1).to(inputs.dtype)
    return inputs, embeddings(ctx, batch, batch.baseline_ids)


def per_token(
    attr: Float[Tensor, "batch pos d_model"], how: Reduction, batch: TokenBatch
) -> Float[np.ndarray, "batch pos"]:
    """Return one score per token [batch, pos] in float64: Σ_d attr (sum) or ‖attr‖₂ (l2); 0 where not attributed."""
    values = attr.detach().double()
    return token_scores(values.sum(-1) if how == "sum" else values.norm(dim=-1), batch)


def token_scores(values: Tensor, batch: TokenBatch) -> Float[np.ndarray, "batch pos"]:
    """Return per-token scores [batch, pos] (already one per token) in float64, 0 where not attributed."""
    return to_numpy(values.detach().double() * batch.attributed.to(values.device).double())


def seed(ctx: RunContext) -> None:
    """Seed torch's and NumPy's global generators with the run's seed: Captum's sampling methods draw from both
    (GradientShap draws its α and baselines with `np.random`, its noise and LIME's subsets with torch)."""
    torch.manual_seed(ctx.seed)
    np.random.seed(ctx.seed)


def token_masks(batch: TokenBatch, d_model: int) -> list[Tensor]:
    """Return per example its feature mask [1, pos, d_model]: attributed position k (in order) is feature k,
    every other position one last feature whose baseline equals the input (so it never changes the score)."""
    masks = []
    for row in range(batch.input_ids.shape[0]):
        attributed = batch.attributed[row]
        groups = torch.full(attributed.shape, int(attributed.sum()), dtype=torch.long, device=attributed.device)
        groups[attributed] = torch.arange(int(attributed.sum()), device=attributed.device)
        masks.append(groups[None, :, None].expand(1, -1, d_model).contiguous())
    return masks


CPU_PATH_MB = 1024  # the path's memory per pass on the CPU (where it competes with everything else in RAM)


def path_rows(ctx: RunContext, batch: TokenBatch, budget_mb: int) -> int:
    """Return how many rows one forward pass over an integration path may hold within `budget_mb` MiB (0: half
    the free memory of the model's CUDA device, `CPU_PATH_MB` on the CPU): the examples' steps go through the
    model together, as many per pass as fit (on a GPU, one pass for a whole batch of short examples).

    An estimate, as the collector estimates a capture: a row of `pos` positions keeps, per layer, about
    12·d_model + 3·heads·pos floats per position for the backward pass (the residual, norms, query, key,
    value, the MLP's 4·d_model hidden units twice, the scores and pattern of every head), at the embedding
    dtype's size. Never below one row per example (Captum's smallest chunk).
    """
    layers, heads = ctx.gate_shape
    weight = ctx.embedding_layer().weight
    pos = batch.input_ids.shape[1]
    per_row = pos * layers * (12 * weight.shape[1] + 3 * heads * pos) * weight.element_size()
    if budget_mb:
        budget = budget_mb << 20
    elif weight.device.type == "cuda":
        budget = torch.cuda.mem_get_info(weight.device)[0] // 2
    else:
        budget = CPU_PATH_MB << 20
    return max(batch.input_ids.shape[0], budget // max(per_row, 1))


def word_arrays(trace: Trace, readout: np.ndarray, how: str) -> dict[str, NamedArray]:
    """Return the word-level scores beside the token-level readout, or {} when the tokens carry no word ids.

    word_readout [batch, word]: each word's score, `how` (sum or max) over its subword tokens
        (`interpret.reading.text.aggregate` over `word_spans` of the example's word ids); 0 past an example's words.
    word_start / word_stop [batch, word] (int): the [start, stop) token positions of each word; −1 past them.
    """
    spans = [word_spans(ids) for ids in trace.encoded.word_ids]
    width = max((len(s) for s in spans), default=0)
    if width == 0:
        return {}
    scores = np.zeros((len(spans), width))
    starts = np.full((len(spans), width), -1, dtype=np.int64)
    stops = np.full((len(spans), width), -1, dtype=np.int64)
    for b, example in enumerate(spans):
        if not example:
            continue
        scores[b, : len(example)] = aggregate(readout[b], example, how)
        starts[b, : len(example)] = [start for start, _ in example]
        stops[b, : len(example)] = [stop for _, stop in example]
    return {
        "word_readout": NamedArray(scores, ("batch", "word")),
        "word_start": NamedArray(starts, ("batch", "word")),
        "word_stop": NamedArray(stops, ("batch", "word")),
    }


def token_result(
    analyzer: Any, trace: Trace, params: TokenParams, readout: Float[np.ndarray, "batch key"], title: str,
    checks: dict[str, Check], *, signed: bool | None = None, scalars: dict[str, float] | None = None,
    views: tuple[View, ...] = (), **per_example: Float[np.ndarray, " batch"] | NamedArray,
) -> AnalyzerResult:
    """Return a token attribution's result: `readout` [batch, key] (signed unless reduced by l2, or as `signed`
    says), the `per_example` arrays ([batch] unless already named), the word arrays (`word_arrays`) and one token
    strip titled `title`, then `views`."""
    arrays = {"readout": NamedArray(readout, ("batch", "key"))}
    arrays.update({name: values if isinstance(values, NamedArray) else NamedArray(values, ("batch",))
                   for name, values in per_example.items()})
    return AnalyzerResult(
        analyzer=analyzer.name, version=analyzer.version, params=as_dict(params),
        arrays={**arrays, **word_arrays(trace, readout, params.words)}, scalars=scalars or {}, checks=checks,
        views=(View("token_strip", "readout", title), *views), tokens=tuple(tuple(row) for row in trace.encoded.tokens),
        readout_of=Readout("readout", signed=params.reduce == "sum" if signed is None else signed),
    )
