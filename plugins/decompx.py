"""DecompX (Modarressi et al. 2023, ACL): each input token's signed share of the explained logit, from its
decomposition propagated through every block (attention, residuals, norms, the feed-forward network) and the
classification head, in one pass over the trace (`decompx_math` states the propagation).

Read from the forward pass, fixed (as the paper fixes them): the attention weights (restated in the working
precision from the query and key the kernel received, since the captured pattern is float32, and checked
against it), each norm's divisor, each MLP
neuron's slope f(ζ)/ζ, and the head's own divisors (L2 normalisation, final norm) and slopes (tanh, GELU).
The model's weights come from its modules, each identified numerically: the value projection is the affine
module inside the attention whose columns reproduce `hook_v`, the MLP's input projections (one, or a gate and
an up projection) and its one activation module reproduce `mlp.hook_post`.

Heads: the default model's (mean pooling over real tokens, L2 normalisation, a linear layer), BERT's pooler
(dense, tanh) and classifier, RoBERTa's and ELECTRA's classification heads (dense, tanh or GELU, out_proj),
DistilBERT's (pre_classifier, ReLU, classifier), a decoder's sequence classifier (final norm, score) and a
decoder language model's next-token logits (final norm, unembedding; a continuation's steps add up). The
explained score is the target's logit, minus the contrast's with `--contrast`; the final layer's bias goes
over the tokens by AbsDot on the whole logit vector.

Arrays (batch first; padding zero):
    readout [batch, key]  each token's signed contribution; Σ_k readout = score.
    score   [batch]       the model's own score (logit or logit difference) the readout decomposes.
Checks: `completeness` (the readout adds up to the model's score), `embedding_error` (the decomposition of the
head's last input, e.g. the L2-normalised sentence embedding, adds up to the real one), `decomposition_error`
(every block's output), `pattern_error` (the restated attention weights are the kernel's), all invariant;
`linearisation_error` (warning): the activations' lines reproduce the model's activation outputs.
Families: post-norm LayerNorm encoders (BERT, RoBERTa, DistilBERT, ELECTRA, MiniLM) and sequential pre-norm
decoders (GPT-2, Llama, Qwen2, Mistral); refused with the reason: other kinds, heads and block layouts.
Working precision (`precision`): the model's (float32 for a float32 model), or float64. Cost per example:
O(L · n² · d · d_mlp) time (n real tokens, about 0.8·n forward passes of arithmetic), whatever the batching;
`benchmarks/decompx.py` measures it. The examples of a batch are decomposed together (a leading batch axis,
each example over its own real positions, padded to the chunk's longest; padding rows and tokens hold exactly
zero, so an example's shares are its shares alone), longest first in chunks of about CHUNK_BYTES
(O(chunk · n² · d_mlp) memory). The model's modules are identified once per model (`_model_blocks`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.estimate.memory import check_memory
from interpret.plugins import _decompose
from interpret.plugins import decompx_math as dm
from interpret.plugins._attention import readout_weights, target_of
from interpret.plugins._decompose import NormParams
from interpret.target import Target
from interpret.trace import Trace

IDENTIFY_TOLERANCE = 1e-4  # relative: a module reproduces a captured tensor (float32 rounding is ~1e-7)
PATTERN_TOLERANCE = 1e-4  # absolute, on attention weights in [0, 1]
WARN_LINEARISATION = 1e-4  # relative


@dataclass(frozen=True)
class Ffn:
    """An MLP as (weight [d_in, d_out], bias [d_out]) pairs: f(x up) W_down, or f(x gate) ⊙ (x up) W_down."""

    up: tuple[Tensor, Tensor]
    gate: tuple[Tensor, Tensor] | None
    act: Callable[[Tensor], Tensor]
    down: tuple[Tensor, Tensor]


@dataclass(frozen=True)
class Block:
    """One block's weights (CPU, the working precision) and the attention scaling its pattern is restated with.

    value: W_V [d, head · d_value], b_V [head · d_value]; out: W_O [head · d_value, d], b_O [d]. attn_norm /
    mlp_norm: post-norm, the norms after the attention and after the MLP; pre-norm, the norms before them.
    """

    value: tuple[Tensor, Tensor]
    out: tuple[Tensor, Tensor]
    post_norm: bool
    attn_norm: NormParams
    mlp_norm: NormParams
    ffn: Ffn
    scale: float


@dataclass(frozen=True)
class Stage:
    """One step of a head before its last linear layer: an affine map, an activation, a norm, or L2 normalisation."""

    kind: Literal["affine", "act", "norm", "l2"]
    affine: tuple[Tensor, Tensor] | None = None
    act: Callable[[Tensor], Tensor] | None = None
    norm: NormParams | None = None


@dataclass(frozen=True)
class Head:
    """A decision head: `stages` applied to the pooled vector, then logits = x W + b (W [d, classes], b [classes])."""

    stages: tuple[Stage, ...]
    weight: Tensor
    bias: Tensor


@dataclass(frozen=True)
class DecompXParams:
    """DecompX's working precision (the target and contrast come from the decision)."""

    precision: Literal["auto", "float64"] = field(
        default="auto",
        metadata={"help": "auto: float64 for a float64 model, float32 otherwise (twice as fast; the model's own"
                          " rounding is ~1e-7 there); float64: always"},
    )


class DecompX:
    """DecompX: each token's signed share of the explained logit through every block and the head."""

    name = "decompx"  # literals, so that `interpret analyzers list` reads them without importing torch
    summary = "DecompX (Modarressi et al. 2023): each token's signed share of the logit, through every block and the head."
    version = "1.0"
    requires = (
        "*attn.hook_q", "*attn.hook_k", "*attn.hook_pattern", "*attn.hook_v", "*hook_resid_pre", "*hook_attn_out",
        "*ln2.hook_normalized", "*mlp.hook_post", "*hook_mlp_out", "*hook_resid_post",
    )
    needs_model = True
    provides = ("readout",)
    Params = DecompXParams

    def run(self, trace: Trace, params: DecompXParams, ctx: RunContext) -> AnalyzerResult:
        """Return the readout and the model's scores (arrays and checks as the module docstring lists)."""
        if trace.meta.kind not in ("encoder", "decoder"):
            raise AnalyzerError(f"{NAME} decomposes text encoders and decoders; this is a {trace.meta.kind} model.")
        if ctx.model is None or ctx.runner is None:
            raise AnalyzerError(f"{NAME} reads the model's weights; pass model= to analyze.")
        if ctx.runner.reader.kind == "similarity":
            raise AnalyzerError(f"{NAME} decomposes a class or token logit; this model's decision is a text-image"
                                " similarity, a cosine of two towers' outputs, which it does not decompose.")
        head = _head(ctx, ctx.runner.reader, trace.meta.kind)
        batch, pos = trace.encoded.batch, trace.encoded.pos
        d_mlp = int(trace["blocks.0.mlp.hook_post"].shape[-1])
        d_model = int(trace["blocks.0.hook_resid_pre"].shape[-1])
        lengths = trace.encoded.attention_mask.sum(-1).cpu()
        float64 = params.precision == "float64" or trace["blocks.0.hook_resid_pre"].dtype == torch.float64
        dtype = torch.float64 if float64 else torch.float32
        per_square = dtype.itemsize * (4 * d_model + 3 * d_mlp)  # bytes per (row, token): a few [.., d] and [.., d_mlp]
        longest = int(lengths.max())
        check_memory(NAME, per_square * longest**2, f"[token, token, d_mlp] tensors at n={longest}")
        blocks = _model_blocks(ctx, trace, dtype)
        head = replace(head, stages=_cast(head.stages, dtype))  # its last layer is cast per column when used
        scores = torch.tensor(_model_scores(trace, ctx), dtype=torch.float64)
        readout = torch.zeros(batch, pos + 1, dtype=torch.float64)  # the last column takes the padding (dropped)
        errors = dict.fromkeys(("completeness", "embedding_error", "decomposition_error", "pattern_error", "linearisation_error"), 0.0)
        for examples in _chunks(lengths, per_square):
            chunk = _chunk(trace, ctx, examples)
            last = _body(trace, blocks, chunk, errors, dtype)
            contributions = _decision_parts(last, trace, chunk, head, errors)  # [example, token]
            total, want = contributions.sum(-1), scores[chunk.examples]
            scale = torch.maximum(torch.maximum(want.abs(), contributions.abs().sum(-1)), torch.tensor(1e-30))
            errors["completeness"] = max(errors["completeness"], float(((total - want).abs() / scale).max()))
            where = torch.where(chunk.valid, chunk.index, pos)
            readout[chunk.examples[:, None], where] = contributions
        tolerance = 1e-6 if trace["blocks.0.hook_resid_pre"].dtype == torch.float64 else 1e-3
        checks = {
            "completeness": Check(errors["completeness"], tolerance, "relative |Σ_k readout − the model's score (logit or difference)|"),
            "embedding_error": Check(errors["embedding_error"], tolerance, "relative |Σ_k parts − the real vector the head's last layer reads|"),
            "decomposition_error": Check(errors["decomposition_error"], tolerance, "relative |Σ_k X[i, k] − each block's real output|"),
            "pattern_error": Check(errors["pattern_error"], PATTERN_TOLERANCE, "largest |restated α − captured α|: softmax(q·kᵀ·scale) is the kernel's"),
            "linearisation_error": Check(
                errors["linearisation_error"], WARN_LINEARISATION,
                "relative |θ ⊙ ζ − the model's activation output| of every MLP (the slope's guard near 0, precision)", "warning",
            ),
        }
        return AnalyzerResult(
            analyzer=NAME, version=self.version, params={},
            arrays={"readout": NamedArray(to_numpy(readout[:, :pos]), ("batch", "key")), "score": NamedArray(to_numpy(scores), ("batch",))},
            checks=checks,
            views=(View("token_strip", "readout", "DecompX: each token's share of the explained logit"),),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=True),
        )


NAME = DecompX.name
SUFFIXES = tuple(glob.removeprefix("*") for glob in DecompX.requires)
CHUNK_BYTES = 256 * 1024**2  # the examples decomposed together hold about this much at most (≥ 10⁴ rows of 16 tokens)


@dataclass(frozen=True)
class Chunk:
    """Examples decomposed together, each over its own real positions in order, padded to the longest (n).

    examples [batch]: their indices in the trace; index [batch, n]: the trace position of each real token (0
    past the example's end); valid [batch, n]: real, not padding. rows [batch, row] / row_valid: the positions
    (into n) the decision reads at the last block. Scored steps [step]: step_example (into batch), weights
    [step, row] over the rows, ids and contrasts (−1: none).
    """

    examples: Tensor
    index: Tensor
    valid: Tensor
    rows: Tensor
    row_valid: Tensor
    step_example: Tensor
    weights: Tensor
    ids: Tensor
    contrasts: Tensor


def _chunks(lengths: Tensor, per_square: int) -> list[Tensor]:
    """Return the examples in chunks, longest first, each padded to its first (longest) example's length n
    and holding about CHUNK_BYTES at most (per example per_square · n² bytes; one example at least)."""
    order = torch.argsort(lengths, descending=True, stable=True)
    chunks, at = [], 0
    while at < len(order):
        size = max(1, CHUNK_BYTES // max(per_square * int(lengths[order[at]]) ** 2, 1))
        chunks.append(order[at:at + size])
        at += size
    return chunks


def _chunk(trace: Trace, ctx: RunContext, examples: Tensor) -> Chunk:
    """Return the Chunk of `examples`: their real positions and the rows and steps their decisions score."""
    mask = trace.encoded.attention_mask.bool().cpu()
    real = [torch.nonzero(mask[int(b)]).flatten() for b in examples]
    n = max(len(r) for r in real)
    index, valid = torch.zeros(len(real), n, dtype=torch.long), torch.zeros(len(real), n, dtype=torch.bool)
    needed, steps = [], []
    for e, (b, positions) in enumerate(zip(examples.tolist(), real)):
        index[e, :len(positions)], valid[e, :len(positions)] = positions, True
        target = target_of(ctx.targets, b)
        if target is None or target.kind == "none":
            raise AnalyzerError(f"{NAME} explains a decision; example {b} has none to score.")
        example_steps = _steps(target, positions)
        rows = sorted({int(row) for weights, _, _ in example_steps for row in np.flatnonzero(weights)})
        needed.append(rows)
        steps += [(e, weights[rows], token, versus) for weights, token, versus in example_steps]
    width = max(len(rows) for rows in needed)
    rows_t, row_valid = torch.zeros(len(real), width, dtype=torch.long), torch.zeros(len(real), width, dtype=torch.bool)
    for e, rows in enumerate(needed):
        rows_t[e, :len(rows)], row_valid[e, :len(rows)] = torch.as_tensor(rows, dtype=torch.long), True
    weights = torch.zeros(len(steps), width, dtype=torch.float64)
    for s, (_, w, _, _) in enumerate(steps):
        weights[s, :len(w)] = torch.as_tensor(w)
    return Chunk(
        examples, index, valid, rows_t, row_valid, torch.tensor([s[0] for s in steps]), weights,
        torch.tensor([s[2] for s in steps]), torch.tensor([-1 if s[3] is None else s[3] for s in steps]),
    )


def _steps(target: Target, real: Tensor) -> list[tuple[np.ndarray, int, int | None]]:
    """Return per scored step (row weights over the n real positions [n], target id, contrast id or None)."""
    contrast, positions = list(target.contrast) or [None] * len(target.ids), to_numpy(real)
    if target.kind == "class":
        return [(readout_weights("auto", target, positions), target.ids[0], contrast[0])]
    return [  # each token scored from its own row alone
        (readout_weights((int(position),), None, positions), token, versus)
        for position, token, versus in zip(target.positions, target.ids, contrast)
    ]


def _gather(trace: Trace, name: str, examples: Tensor, index: Tensor, valid: Tensor, dtype: torch.dtype) -> Tensor:
    """Return trace[name] of `examples` [batch] at the positions `index` [batch, n] (CPU, `dtype`; zero where
    not `valid` [batch, n]) [batch, n, ...]; an attention pattern [batch, head, n, n] over those queries and keys."""
    value = trace[name].detach()[examples.to(trace[name].device)].to("cpu", dtype)
    for axis in (2, 3) if name.endswith("hook_pattern") else (1,):
        shape = [1] * value.dim()
        shape[0], shape[axis] = index.shape
        value = value.gather(axis, index.view(shape).expand(*value.shape[:axis], index.shape[1], *value.shape[axis + 1:]))
        value = value.masked_fill(~valid.view(shape), 0.0)
    return value


def _rows(x: Tensor, rows: Tensor | None, row_valid: Tensor) -> Tensor:
    """Return x [batch, n, ...] at the `rows` [batch, row] (None: every position), zero at a padding row."""
    if rows is None:
        return x
    index = rows.view(*rows.shape, *[1] * (x.dim() - 2)).expand(*rows.shape, *x.shape[2:])
    return x.gather(1, index).masked_fill(~row_valid.view(*row_valid.shape, *[1] * (x.dim() - 2)), 0.0)


def _worst(got: Tensor, want: Tensor) -> float:
    """Return the largest per-example relative error max|got − want| / max|want| (over all but the first axis)."""
    axes = tuple(range(1, got.dim()))
    return float(((got - want).abs().amax(axes) / want.abs().amax(axes).clamp(min=1e-30)).max())


def _body(trace: Trace, blocks: list[Block], chunk: Chunk, errors: dict[str, float], dtype: torch.dtype) -> Float[Tensor, "batch row token d"]:
    """Return the last block's output decomposed over the chunk's decision rows [batch, row, token, d]; updates
    the errors of the restated pattern, the linearisation and each block's decomposed output against the real one.
    Padding rows and tokens stay exactly zero (their attention weights are zero, split_bias gives them no bias)."""
    parts: Tensor | None = None
    valid = chunk.valid
    pairs = valid[:, None, :, None] & valid[:, None, None, :]  # [batch, 1, query, key]
    for layer, block in enumerate(blocks):
        t = {suffix: _gather(trace, f"blocks.{layer}.{suffix}", chunk.examples, chunk.index, valid, dtype) for suffix in SUFFIXES}
        final = layer == len(blocks) - 1
        rows, row_valid = (chunk.rows, chunk.row_valid) if final else (None, valid)
        at = lambda x: _rows(x, rows, row_valid)  # noqa: E731
        pattern = dm.restated_pattern(t["attn.hook_q"], t["attn.hook_k"], (t["attn.hook_pattern"] > 0) & pairs, block.scale)
        errors["pattern_error"] = max(errors["pattern_error"], float((pattern - t["attn.hook_pattern"]).abs().max()))
        if final:  # the decision's rows (a padding row: zero)
            pattern = _rows(pattern.transpose(1, 2), rows, row_valid).transpose(1, 2)
        mask = row_valid[:, :, None] & valid[:, None, :]  # [batch, row, token]: the pairs that exist
        x = t["hook_resid_pre"]
        heads, n = pattern.shape[1], x.shape[1]
        if parts is None:  # the first block: every position is its own token, the value bias goes with α
            term = dm.first_attention(pattern, t["attn.hook_v"], block.out[0].view(heads, -1, x.shape[-1]))
            bias = block.out[1]
            residual = torch.zeros(*row_valid.shape, n, x.shape[-1], dtype=x.dtype)  # δ_ik x_i [batch, row, token, d]
            position = torch.arange(n).expand(len(x), n) if rows is None else rows
            residual[torch.arange(len(x))[:, None], torch.arange(row_valid.shape[1]), position] = at(x)
        else:
            keys = parts
            if not block.post_norm:
                keys = dm.normed(parts, block.attn_norm, _decompose.norm_scale(x, block.attn_norm)[..., None], pairs[:, 0])
            term = dm.attention(keys, pattern, block.value[0], block.out[0])
            bias = block.value[1] @ block.out[0] + block.out[1]
            residual = at(parts)
        mixed = residual + dm.split_bias(term, bias, mask)
        mid = at(x + t["hook_attn_out"])  # the real stream after the attention
        mlp_in = at(t["ln2.hook_normalized"])
        norm = block.attn_norm if block.post_norm else block.mlp_norm  # the norm the MLP's input goes through
        ffn_in = dm.normed(mixed, norm, _decompose.norm_scale(mid, norm)[..., None], mask)
        if block.post_norm:  # on the residual stream itself
            mixed = ffn_in
        ffn, linearised = dm.feed_forward(ffn_in, mlp_in, block.ffn.up, block.ffn.gate, block.ffn.act, block.ffn.down, mask)
        linearised = linearised.masked_fill(~row_valid[..., None], 0.0)  # a padding row's line is no model output
        errors["linearisation_error"] = max(errors["linearisation_error"], _worst(linearised, at(t["mlp.hook_post"])))
        parts = mixed + ffn
        if block.post_norm:
            closing = _decompose.norm_scale(mlp_in + at(t["hook_mlp_out"]), block.mlp_norm)[..., None]
            parts = dm.normed(parts, block.mlp_norm, closing, mask)
        errors["decomposition_error"] = max(errors["decomposition_error"], _worst(parts.sum(2), at(t["hook_resid_post"])))
    assert parts is not None
    return parts


def _decision_parts(last: Tensor, trace: Trace, chunk: Chunk, head: Head, errors: dict[str, float]) -> Float[Tensor, "batch token"]:
    """Return each example's tokens' shares of its score [batch, token] (float64; steps summed): every scored
    step's rows pooled and carried through the head (`_pooled`, `_logit_parts`); updates the embedding error."""
    name = f"blocks.{trace.meta.n_layers - 1}.hook_resid_post"
    hidden = _rows(_gather(trace, name, chunk.examples, chunk.index, chunk.valid, last.dtype), chunk.rows, chunk.row_valid)
    weights, example = chunk.weights.to(last.dtype), chunk.step_example
    same = len(example) == len(last) and bool((example == torch.arange(len(last))).all())
    parts = torch.einsum("sr,srkd->skd", weights, last if same else last[example])
    value = torch.einsum("sr,srd->sd", weights, hidden[example])
    valid = chunk.valid[example]  # [step, token]
    parts, value = _pooled(parts, value, head, valid)
    errors["embedding_error"] = max(errors["embedding_error"], _worst(parts.sum(1), value))
    shares = _logit_parts(parts, head, chunk.ids, chunk.contrasts, valid).double()
    return torch.zeros(len(last), last.shape[2], dtype=torch.float64).index_add_(0, example, shares)


def _pooled(
    parts: Float[Tensor, "step token d"], value: Float[Tensor, "step d"], head: Head, valid: Tensor
) -> tuple[Float[Tensor, "step token d"], Float[Tensor, "step d"]]:
    """Return (the decomposition of the vector the head's last layer reads [step, token, d], its real value
    [step, d]): the pooled rows through the head's stages."""
    for stage in head.stages:
        if stage.kind == "affine":
            assert stage.affine is not None
            weight, bias = stage.affine
            parts, value = dm.split_bias(parts @ weight, bias, valid), value @ weight + bias
        elif stage.kind == "act":
            assert stage.act is not None
            theta = dm.slope(value, stage.act)
            parts, value = parts * theta[:, None], stage.act(value)
        elif stage.kind == "norm":
            assert stage.norm is not None
            parts = dm.normed(parts, stage.norm, _decompose.norm_scale(value, stage.norm)[:, None], valid)
            value = _decompose.layer_norm(value, stage.norm)
        else:  # L2 normalisation, its divisor fixed by the real vector (as torch's normalize, eps 1e-12)
            divisor = value.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            parts, value = parts / divisor[:, None], value / divisor
    return parts, value


def _logit_parts(parts: Float[Tensor, "step token d"], head: Head, ids: Tensor, contrasts: Tensor, valid: Tensor) -> Float[Tensor, "step token"]:
    """Return each token's share of logit[id] − logit[contrast] per step (contrast −1: the logit alone): the
    last layer's bias split by AbsDot over the whole logit vector, as the paper's head decomposition does."""
    has = contrasts >= 0
    if bool(head.bias.any()):
        logits = dm.split_bias(parts @ head.weight.to(parts.dtype), head.bias.to(parts.dtype), valid)  # [step, token, class]
        pick = lambda column: logits.gather(2, column.clamp(min=0)[:, None, None].expand(-1, logits.shape[1], 1))[..., 0]  # noqa: E731
    else:  # a language model's unembedding: only the columns read, never the whole vocabulary
        pick = lambda column: torch.einsum("skd,ds->sk", parts, head.weight[:, column.clamp(min=0)].to(parts.dtype))  # noqa: E731
    return pick(ids) - torch.where(has[:, None], pick(contrasts), 0.0)


def _model_scores(trace: Trace, ctx: RunContext) -> list[float]:
    """Return each example's score as the decision defines it (logit, minus the contrast's; steps summed),
    from the trace's own output (the model is run again only for a trace saved without it)."""
    assert ctx.runner is not None
    if trace.output is None:
        with torch.no_grad():
            return [float(value) for value in ctx.score(trace.encoded).double().cpu()]
    with torch.no_grad():
        logits = ctx.runner.reader.logits(trace.output, trace.encoded).detach().double().cpu()
    scores = []
    for b, target in enumerate(ctx.targets):
        if target.kind == "class":
            value = logits[b, target.ids[0]] - (logits[b, target.contrast[0]] if target.contrast else 0.0)
        else:
            value = sum(
                logits[b, position, token] - (logits[b, position, target.contrast[i]] if target.contrast else 0.0)
                for i, (position, token) in enumerate(zip(target.positions, target.ids))
            )
        scores.append(float(value))
    return scores


def _cast(value: Any, dtype: torch.dtype) -> Any:
    """Return `value` (a tensor, a tuple or a dataclass of them, such as a Block or a Head) in `dtype`."""
    if isinstance(value, Tensor):
        return value.to(dtype)
    if isinstance(value, tuple):
        return tuple(_cast(item, dtype) for item in value)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: _cast(getattr(value, f.name), dtype) for f in fields(value)})
    return value


# ---- reading the model -----------------------------------------------------------------------------------


def _affine(
    module: nn.Module, shape: tuple[int, int] | None = None, dtype: torch.dtype | None = None
) -> tuple[Tensor, Tensor] | None:
    """Return (W [d_in, d_out], b [d_out]) of a Linear or GPT-2 Conv1D (CPU, `dtype` or the module's own), read
    from its parameters (exact; no probe); None for another module, or one whose (d_in, d_out) is not `shape`."""
    from transformers.pytorch_utils import Conv1D

    if isinstance(module, nn.Linear):
        weight = module.weight.detach().T
    elif isinstance(module, Conv1D):
        weight = module.weight.detach()
    else:
        return None
    if shape is not None and tuple(weight.shape) != shape:
        return None
    weight = weight.to("cpu", dtype or weight.dtype)
    bias = module.bias.detach().to("cpu", weight.dtype) if module.bias is not None else torch.zeros(weight.shape[1], dtype=weight.dtype)
    return weight, bias


_IDENTIFIED: weakref.WeakKeyDictionary[nn.Module, tuple[list[tuple[Any, int, int]], dict[torch.dtype, list[Block]]]] = (
    weakref.WeakKeyDictionary()
)


def _model_blocks(ctx: RunContext, trace: Trace, dtype: torch.dtype) -> list[Block]:
    """Return every block's weights in `dtype` (`_blocks`), identified once per model and kept while it lives.

    The cache is keyed by the model object itself (weakly: it goes with the model) and holds, with the blocks,
    each parameter's (weak reference, storage address, version counter): a parameter replaced (a new
    Parameter, `.data` reassigned, the model moved or cast) or changed in place (`load_state_dict`, an
    optimiser's step, `mul_`) no longer matches, and the blocks are identified again from this trace. The
    trace's own checks (kind, every layer captured) run on every call."""
    _decompose.check_kind(trace, NAME)
    _decompose.check_layers(trace, NAME)
    model = ctx.model
    state = [(weakref.ref(p), p.data_ptr(), p._version) for p in model.parameters()]
    held = _IDENTIFIED.get(model)
    same = held is not None and len(held[0]) == len(state) and all(
        ref() is p and (address, version) == (p.data_ptr(), p._version) for (ref, address, version), p in zip(held[0], model.parameters())
    )
    if held is None or not same:
        held = _IDENTIFIED[model] = (state, {})
    if dtype not in held[1]:
        held[1][dtype] = [_cast(block, dtype) for block in _blocks(ctx, trace, dtype)]
    return held[1][dtype]


def _blocks(ctx: RunContext, trace: Trace, dtype: torch.dtype) -> list[Block]:
    """Return every block's weights in `dtype`, each module identified numerically on the trace's first example."""
    parts, module = _decompose.block_parts(ctx, trace, NAME), ctx.module
    real = torch.nonzero(trace.encoded.attention_mask[0].bool().cpu()).flatten()[None]
    first, everywhere = torch.zeros(1, dtype=torch.long), torch.ones_like(real, dtype=torch.bool)
    blocks = []
    for part in parts:
        layer, prefix = part.layer, f"blocks.{part.layer}."
        t = {suffix: _gather(trace, prefix + suffix, first, real, everywhere, dtype)[0] for suffix in SUFFIXES}
        kernel, out_proj, down = module(prefix + "attn.hook_v"), module(prefix + "attn.hook_z"), module(prefix + "mlp.hook_post")
        if part.post_norm:  # the closing norm: the block's one LayerNorm besides the attention's
            assert part.attn_norm is not None
            closing = _decompose.other_norms(ctx, layer)
            if len(closing) != 1:
                raise AnalyzerError(f"{NAME}: block {layer} has {len(closing)} norms besides the attention's; this post-norm layout is not supported.")
            attn_norm, value_in = part.attn_norm, t["hook_resid_pre"]
            mlp_norm = _decompose._norm_params(closing[0], f"closing block {layer}")
        else:
            attn_norm = _decompose._norm_params(module(prefix + "ln1.hook_normalized"), f"before block {layer}'s attention", rms=True)
            mlp_norm = _decompose._norm_params(module(prefix + "ln2.hook_normalized"), f"before block {layer}'s MLP", rms=True)
            value_in = _decompose.layer_norm(t["hook_resid_pre"], _cast(attn_norm, dtype))
        heads, d_value, d_model = part.out_weight.shape
        value = _value_projection(kernel, out_proj, value_in, t["attn.hook_v"], layer)
        ffn = _feed_forward(module(prefix + "hook_resid_post"), kernel, out_proj, down, t, layer)
        out = (part.out_weight.reshape(heads * d_value, d_model), part.out_bias)
        root = t["attn.hook_q"].shape[-1] ** -0.5
        candidates = [float(getattr(kernel, "scaling", root)), root]
        kept = t["attn.hook_pattern"] > 0
        restated = lambda s: dm.restated_pattern(t["attn.hook_q"][None], t["attn.hook_k"][None], kept[None], s)[0]  # noqa: E731
        scale = min(candidates, key=lambda s: float((restated(s) - t["attn.hook_pattern"]).abs().max()))
        blocks.append(Block(value, out, part.post_norm, attn_norm, mlp_norm, ffn, scale))
    return blocks


def _close(got: Tensor, want: Tensor) -> bool:
    return _decompose.relative(got, want) <= IDENTIFY_TOLERANCE


def _value_projection(kernel: nn.Module, out_proj: nn.Module, x: Tensor, value: Tensor, layer: int) -> tuple[Tensor, Tensor]:
    """Return (W_V [d, head · d_value], b_V) of the affine module inside the attention whose columns, on the
    attention's input x [n, d], reproduce every head of the captured value [n, head, d_value] (a fused query,
    key and value projection, and key/value heads shared by several query heads, alike)."""
    n, heads, d_value = value.shape
    scale = value.abs().max().clamp(min=1e-30)
    for module in kernel.modules():
        weight = getattr(module, "weight", None)
        if module is out_proj or not isinstance(weight, Tensor) or x.shape[-1] not in weight.shape:
            continue
        affine = _affine(module, (x.shape[-1], weight.numel() // x.shape[-1]), x.dtype)
        if affine is None or affine[0].shape[1] % d_value:
            continue
        out = (x @ affine[0] + affine[1]).view(n, -1, d_value)
        distance = (out[:, None] - value[:, :, None]).abs().amax(dim=(0, 3))  # [head, block of columns]
        matches = distance <= IDENTIFY_TOLERANCE * scale
        if bool((matches.sum(-1) == 1).all()):
            block = matches.int().argmax(-1)
            columns = (block[:, None] * d_value + torch.arange(d_value)).flatten()
            return affine[0][:, columns], affine[1][columns]
    raise AnalyzerError(
        f"{NAME}: no affine module inside block {layer}'s attention ({type(kernel).__name__}) reproduces its values;"
        " this attention is not supported."
    )


def _feed_forward(block: nn.Module, kernel: nn.Module, out_proj: nn.Module, down: nn.Module, t: dict[str, Tensor], layer: int) -> Ffn:
    """Return the block's MLP: its one activation module and the projections from d_model to d_mlp outside the
    attention, checked to reproduce mlp.hook_post from the MLP's input (ln2.hook_normalized)."""
    inside = {id(module) for module in kernel.modules()} | {id(out_proj), id(down)}
    mlp_in, post = t["ln2.hook_normalized"], t["mlp.hook_post"]
    acts = [m for m in block.modules() if id(m) not in inside and _is_activation(m)]
    shape = (mlp_in.shape[-1], post.shape[-1])
    projections = [a for m in block.modules() if id(m) not in inside and (a := _affine(m, shape, post.dtype)) is not None]
    lower = _affine(down, shape[::-1], post.dtype)
    if len(acts) == 1 and lower is not None:
        act = acts[0]
        pre = [mlp_in @ w + b for w, b in projections]
        if len(projections) == 1 and _close(act(pre[0]), post):
            return Ffn(projections[0], None, act, lower)
        if len(projections) == 2:
            for g, u in ((0, 1), (1, 0)):
                if _close(act(pre[g]) * pre[u], post):
                    return Ffn(projections[u], projections[g], act, lower)
    raise AnalyzerError(
        f"{NAME}: block {layer}'s MLP is not f(x W₁ + b₁) W₂ + b₂ or f(x W_g) ⊙ (x W_u) W₂ with one activation"
        f" module ({len(acts)} activations, {len(projections)} input projections found); it is not supported."
    )


def _is_activation(module: nn.Module) -> bool:
    """Whether `module` is a parameter-free activation (transformers' or torch's activation modules)."""
    where = type(module).__module__
    return where in ("transformers.activations", "torch.nn.modules.activation") and not any(True for _ in module.parameters())


def _head(ctx: RunContext, reader: Any, kind: str) -> Head:
    """Return the decision head as stages and a last linear layer, or refuse a head this does not decompose."""
    from interpret.models.sentiment_head import TEMPERATURE, CentroidHead, SentimentHead

    model = ctx.model
    name = type(model).__name__
    if reader.head is not None:
        if isinstance(reader.head, SentimentHead):
            return Head((Stage("l2"),), *_affine(reader.head.linear))  # type: ignore[misc]
        if isinstance(reader.head, CentroidHead):
            centroids = reader.head.centroids.detach().to("cpu", torch.float64)
            return Head((Stage("l2"),), TEMPERATURE * centroids.T, torch.zeros(len(centroids), dtype=torch.float64))
        raise AnalyzerError(f"{NAME} decomposes the default sentiment and centroid heads; {type(reader.head).__name__} is not one.")
    if reader.kind == "token" and kind == "decoder":
        unembed = model.get_output_embeddings()
        if not isinstance(unembed, nn.Linear):
            raise AnalyzerError(f"{NAME}: {name} has no linear output embedding (load it with its LM head).")
        return Head((Stage("norm", norm=_decompose.final_norm(ctx, NAME)),), *_affine(unembed))  # type: ignore[misc]
    if reader.kind == "class":
        classifier = getattr(model, "classifier", None)
        base = getattr(model, getattr(model, "base_model_prefix", ""), None)
        pooler = getattr(base, "pooler", None)
        pre = getattr(model, "pre_classifier", None)
        score = getattr(model, "score", None)
        if isinstance(classifier, nn.Linear) and pooler is not None and isinstance(getattr(pooler, "dense", None), nn.Linear):
            stages = (Stage("affine", _affine(pooler.dense)), Stage("act", act=pooler.activation))
            return Head(stages, *_affine(classifier))  # type: ignore[misc]
        if isinstance(getattr(classifier, "dense", None), nn.Linear) and isinstance(getattr(classifier, "out_proj", None), nn.Linear):
            act = getattr(classifier, "activation", None) or torch.tanh  # RoBERTa: tanh; ELECTRA: its activation
            return Head((Stage("affine", _affine(classifier.dense)), Stage("act", act=act)), *_affine(classifier.out_proj))  # type: ignore[union-attr,misc]
        if isinstance(pre, nn.Linear) and isinstance(classifier, nn.Linear):  # DistilBERT
            return Head((Stage("affine", _affine(pre)), Stage("act", act=torch.relu)), *_affine(classifier))  # type: ignore[misc]
        if kind == "decoder" and isinstance(score, nn.Linear):
            return Head((Stage("norm", norm=_decompose.final_norm(ctx, NAME)),), *_affine(score))  # type: ignore[misc]
    raise AnalyzerError(
        f"{NAME} decomposes sequence-classification heads (BERT, RoBERTa, ELECTRA, DistilBERT, decoders), decoder"
        f" language-model heads and the default sentiment head; {name}'s {reader.kind} decision is not one of them."
    )
