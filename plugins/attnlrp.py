"""AttnLRP (Achtibat et al. 2024, ICML, "AttnLRP: Attention-Aware Layer-wise Relevance Propagation for
Transformers"): each token's signed relevance for the explained score, from one forward and one backward pass.

Layer-wise relevance propagation sends the score back through the network, each operation splitting its
output's relevance R over its inputs by a rule. The paper states its rules in the Gradient × Input form (its
section 3, and the authors' "efficient" implementation, LXT): with each operation's backward replaced as
below, an input x's relevance is x ⊙ ∂'F/∂x, so one backward pass gives every token's. The rules:

    affine layers, residual sums   ε-rule with ε → 0: R_x = x ⊙ Wᵀ(R_y / y)       the plain gradient
    softmax s = softmax(x)         softmax rule: R_x = x ⊙ (R_s − s Σ R_s)        the plain gradient
    q·kᵀ and A·v (bilinear)        uniform rule: each factor half the product's   the gradient into q and k
                                   relevance                                      × ¼ (both products on their
                                                                                  path), into v × ½
    GELU, SiLU, ReLU, tanh         identity rule: R_x = R_y                       f(x)/x
    a gated MLP's act(g) · u       uniform rule                                   × ½ into the down projection
    LayerNorm                      its divisor σ a constant: the affine map       (I − 11ᵀ/d) · w/σ
                                   (x − mean x) · w/σ + b, then the ε-rule
    RMSNorm, the default head's    divisor a constant: elementwise out/x          out/x (0 where x = 0)
    L2 normalisation

Each rule changes the backward pass only: an operation's output becomes out + (lin − lin.detach()), which is
exactly out, with `lin` the rule's linear map of the input, so the score explained is the model's own. The
relevance is read at the token embeddings (the embedding layer's output x, as x ⊙ ∂'F/∂x with F = `ctx.score`:
the target's logit, minus the contrast's) and summed over the embedding axis (signed; biases,
position embeddings and the softmax's linearisation absorb the rest, so the readout need not add up to the
score). `tests/analyzers/test_attnlrp.py` checks it against the rules propagated one operation at a time.

Families: where every operation on the score's path has a rule (BERT and MiniLM with their pooler or the
default model's heads, ELECTRA, DistilBERT, GPT-2, Llama, Qwen2, Mistral); other families and other decision
heads are refused in one line (a nonlinearity written as a function, e.g. RoBERTa's classification head's
tanh, cannot take a rule).
Arrays (batch first; padding zero): readout [batch, key]. Check: `score_consistency` (the score differentiated,
from the embeddings, is the decision's, from the ids); a run where a layer's attention did not take its rule is
refused. Cost: one forward and one backward pass of the batch, and the check's forward pass (about 4 forward
passes; `benchmarks/gradients.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from interpret.analysis import AnalyzerResult, RunContext
from interpret.errors import AnalyzerError
from interpret.models.sentiment_head import CentroidHead, L2Normalize, SentimentHead
from interpret.plugins import _captum
from interpret.trace import Trace

FAMILIES = ("bert", "electra", "distilbert", "gpt2", "llama", "qwen2", "mistral")
ACTIVATIONS = (nn.GELU, nn.SiLU, nn.ReLU, nn.Tanh)  # and every module of transformers.activations
ZERO = 1e-6  # |x| below which an activation's f(x)/x is taken as its slope at 0 (GELU, SiLU: 0.5)


def _swap(out: Tensor, lin: Tensor) -> Tensor:
    """Return `out`'s values with `lin`'s gradient: out + (lin − lin.detach()) is exactly out."""
    return out.detach() + (lin - lin.detach())


def _out_over_x(out: Tensor, x: Tensor, near: Tensor, fill: float) -> Tensor:
    """Return out/x elementwise, detached, and `fill` where `near` (x at or too close to 0 to divide by)."""
    return torch.where(near, torch.full_like(x, fill), out / torch.where(near, torch.ones_like(x), x)).detach()


def _layer_norm(module: nn.LayerNorm, args: tuple[Tensor, ...], out: Tensor) -> Tensor:
    """LayerNorm with its divisor σ held constant: the affine map (x − mean x) · w/σ [..., d]."""
    x = args[0]
    sigma = (x.var(-1, unbiased=False, keepdim=True) + module.eps).sqrt().detach()
    lin = (x - x.mean(-1, keepdim=True)) / sigma
    return _swap(out, lin * module.weight if module.weight is not None else lin)


def _scale_by_ratio(module: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> Tensor:
    """A normalisation whose divisor is held constant: elementwise out/x (0 where x is exactly 0)."""
    x = args[0]
    return _swap(out, x * _out_over_x(out, x, x == 0, 0.0))


def _identity_rule(at_zero: float, module: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> Tensor:
    """An elementwise nonlinearity under the identity rule: the gradient f(x)/x (`at_zero`, its slope at 0, near 0)."""
    x = args[0]
    return _swap(out, x * _out_over_x(out, x, x.abs() < ZERO, at_zero))


def _half(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The input of a gated MLP's down projection, act(gate) · up, under the uniform rule: its gradient × ½."""
    return (_swap(args[0], args[0] * 0.5), *args[1:])


@contextmanager
def attnlrp_rules(ctx: RunContext) -> Iterator[set[int]]:
    """Within the context, every forward pass through the model and its decision head backpropagates AttnLRP's
    rules (module docstring); yields the ids of the attention modules whose kernel took its rule."""
    fired: set[int] = set()

    def wrap(kernel: Any) -> Any:
        def rule_kernel(module, query, key, value, attention_mask, *args, **kwargs):  # noqa: ANN001, ANN202
            fired.add(id(module))
            query, key, value = _swap(query, query * 0.25), _swap(key, key * 0.25), _swap(value, value * 0.5)
            return kernel(module, query, key, value, attention_mask, *args, **kwargs)

        return rule_kernel

    with ExitStack() as stack:
        for root in [ctx.model, *([ctx.head] if ctx.head is not None else [])]:
            for module in root.modules():
                hook = None
                if isinstance(module, nn.LayerNorm):
                    hook = module.register_forward_hook(_layer_norm)
                elif isinstance(module, L2Normalize) or type(module).__name__.endswith("RMSNorm"):
                    hook = module.register_forward_hook(_scale_by_ratio)
                elif isinstance(module, ACTIVATIONS) or type(module).__module__ == "transformers.activations":
                    # f(ZERO)/ZERO by the module's own forward (no hooks), once
                    at_zero = module.forward(torch.full((1,), ZERO, dtype=torch.float64)).item() / ZERO
                    hook = module.register_forward_hook(partial(_identity_rule, at_zero))
                elif all(hasattr(module, part) for part in ("gate_proj", "up_proj", "down_proj")):
                    hook = module.down_proj.register_forward_pre_hook(_half)
                if hook is not None:
                    stack.callback(hook.remove)
        stack.enter_context(ctx.attention_kernels(wrap))
        yield fired


class AttnLRPAnalyzer:
    """AttnLRP's relevance of each token for each example's own target score."""

    name = "attnlrp"
    summary = "AttnLRP (Achtibat et al. 2024): layer-wise relevance with attention-aware rules, one backward pass (signed)."
    version = "1.0"
    requires = ()
    needs_model = True
    provides = ("readout",)
    Params = _captum.TokenParams

    def run(self, trace: Trace, params: _captum.TokenParams, ctx: RunContext) -> AnalyzerResult:
        """Return each token's AttnLRP relevance (module docstring), or refuse a family without its rules."""
        family = getattr(getattr(ctx.model, "config", None), "model_type", None)
        if family not in FAMILIES:
            raise AnalyzerError(
                f"{self.name}: {type(ctx.model).__name__} is not a family whose every operation has an AttnLRP rule"
                f" ({', '.join(FAMILIES)}); use decompx or integrated_gradients."
            )
        if ctx.head is not None and not isinstance(ctx.head, (SentimentHead, CentroidHead)):
            raise AnalyzerError(
                f"{self.name}: the decision head {type(ctx.head).__name__} is not one whose operations have rules (the"
                " default model's heads are); use integrated_gradients."
            )
        batch = _captum.token_batch(trace, ctx, params, self.name)
        inputs = _captum.embeddings(ctx, batch).requires_grad_()
        with attnlrp_rules(ctx) as fired:  # x ⊙ ∂'F/∂x, with the score kept for the check (one pass fewer)
            scores = ctx.score(batch.encoded, inputs_embeds=inputs, examples=batch.examples)
            (grad,) = torch.autograd.grad(scores.sum(), inputs)
        layers = ctx.gate_shape[0]
        if len(fired) != layers:
            raise AnalyzerError(
                f"{self.name}: {len(fired)} of {type(ctx.model).__name__}'s {layers} attention layers went through"
                " transformers' attention interface, where the attention rule is applied; use decompx or integrated_gradients."
            )
        checks = {"score_consistency": _captum.score_check(ctx, trace, batch, inputs.detach(), scores.detach())}
        readout = _captum.per_token(inputs.detach() * grad, params.reduce, batch)
        return _captum.token_result(self, trace, params, readout, "AttnLRP relevance per token", checks)
