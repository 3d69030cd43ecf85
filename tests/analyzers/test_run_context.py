"""The run context runs the model for analyzers: an analyzer defined here, using only the documented context
API, gets ∂score/∂input and ∂score/∂pattern of one layer, each equal to a central finite difference — on the
reference encoder, the Hugging Face families (eager and SDPA) and the default model with its head — and
no hook survives, also when the analyzer raises."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hf_tiny import collect_args, tiny_model, word_tokenizer
from plugin_install import install_plugin, plugin_site

import interpret
from interpret.analysis.run import run_context
from interpret.capture.api import capturable_for
from interpret.errors import AnalyzerError
from interpret.hooks import count_hooks, hook_session
from interpret.reference import EncoderClassifier, TransformerConfig

# Some families compute parts in float32 even in a float64 model (eager softmax, RMSNorm, T5's layer norm), so
# f carries relative noise of ~1e-7: a fourth-order central difference with a wide step keeps that noise at
# ~1e-4 of the step while its truncation error is O(h^4); for eager models the difference is taken on the
# SDPA twin (the same weights, exact in float64), against which the eager gradient is checked.
STEP = 1e-3
COORDINATES = 4  # per tensor: the largest gradients, where a relative error means something

PROBE = '''
from dataclasses import dataclass, field

import torch

from interpret.analysis import AnalyzerResult, Check, NamedArray


@dataclass(frozen=True)
class Params:
    layer: str = field(default="blocks.0.attn.hook_pattern", metadata={"help": "the pattern to differentiate"})
    fail: bool = field(default=False, metadata={"help": "raise after the capture (hook hygiene)"})


class GradientProbe:
    name = "gradient_probe"
    summary = "∂score/∂input and ∂score/∂pattern of one layer, through the documented context API."
    version = "0"
    requires = ()
    needs_model = True
    provides = ()
    Params = Params

    def run(self, trace, params, ctx):
        if trace.encoded.pixel_values is not None:
            inputs = trace.encoded.pixel_values.detach().clone().requires_grad_(True)
            cap = ctx.capture(trace.encoded, [params.layer], pixel_values=inputs)
            axes = ("batch", "channel", "height", "width")
        else:
            inputs = ctx.embeddings(trace.encoded).detach().clone().requires_grad_(True)
            cap = ctx.capture(trace.encoded, [params.layer], inputs_embeds=inputs)
            axes = ("batch", "pos", "d_model")
        if params.fail:
            raise RuntimeError("the probe fails on purpose")
        input_grad, pattern_grad = torch.autograd.grad(cap.score.sum(), [inputs, cap[params.layer]])
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params={"layer": params.layer},
            arrays={
                "input_grad": NamedArray(input_grad.detach().cpu().numpy(), axes),
                "pattern_grad": NamedArray(pattern_grad.detach().cpu().numpy(), ("batch", "head", "query", "key")),
                "score": NamedArray(cap.score.detach().cpu().numpy(), ("batch",)),
            },
            checks={"score_finite": Check(float(0.0 if torch.isfinite(cap.score).all() else 1.0), 0.0)},
        )
'''


@pytest.fixture(scope="module", autouse=True)
def probe(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("probe")
    install_plugin(root, "gradient-probe", "gradient_probe", PROBE, {"gradient_probe": "gradient_probe:GradientProbe"},
                   "interpret.analyzers")
    with plugin_site(root, "gradient_probe"):
        yield


@dataclass
class Case:
    model: Any
    tokenizer: Any
    inputs: Any
    extra: dict[str, Any]
    head: Any = None
    prefix: str = ""
    reference: Any = None  # the model whose finite differences are taken (default: `model`)


def _hf_case(family: str, implementation: str) -> Case:
    model = tiny_model(family, implementation).double()
    inputs, extra = collect_args(family)
    prefix = "encoder." if family in ("t5", "bart") else ""
    if family == "vit":
        inputs = inputs.double()
    twin = tiny_model(family, "sdpa").double() if implementation == "eager" else None
    return Case(model, None if family == "vit" else word_tokenizer(), inputs, extra, prefix=prefix, reference=twin)


def _reference_case() -> Case:
    torch.manual_seed(0)
    tokenizer = word_tokenizer()
    config = TransformerConfig(d_model=16, n_heads=2, n_layers=2, d_mlp=32, vocab_size=len(tokenizer), max_positions=32,
                               pooling="mean")
    return Case(EncoderClassifier(config).eval().double(), tokenizer, ["the cat sat on the mat !", "a dog saw red"], {})


def _default_case() -> Case:
    from interpret.models.default_model import load_default

    model, tokenizer, head = load_default("cpu")
    return Case(model.double(), tokenizer, ["A calm, honest and moving film.", "The soup was cold."], {},
                head=head.double())


def _finite_difference(score: Any, base: torch.Tensor, index: tuple[int, ...], step: float = STEP) -> float:
    """Return the fourth-order central difference (f(−2h) − 8f(−h) + 8f(h) − f(2h)) / 12h at `index`."""

    def at(shift: float) -> float:
        moved = base.clone()
        moved[index] += shift
        return float(score(moved))

    return (at(-2 * step) - 8 * at(-step) + 8 * at(step) - at(2 * step)) / (12 * step)


def _largest(grad: np.ndarray, count: int = COORDINATES) -> list[tuple[int, ...]]:
    flat = np.argsort(-np.abs(grad).ravel())[:count]
    return [tuple(int(i) for i in np.unravel_index(f, grad.shape)) for f in flat]


def _check(case: Case) -> None:
    layer = f"{case.prefix}blocks.0.attn.hook_pattern"
    trace = interpret.collect(case.model, case.tokenizer, case.inputs, names=["*attn.hook_pattern", "*attn.hook_v"],
                              **case.extra)
    hooks_before = count_hooks(case.model)
    result = interpret.analyze(trace, "gradient_probe", model=case.model, tokenizer=case.tokenizer, head=case.head,
                               params={"layer": layer})
    assert count_hooks(case.model) == hooks_before
    reference = case.reference if case.reference is not None else case.model
    ctx = run_context(trace, reference, case.tokenizer, head=case.head)
    vision = trace.encoded.pixel_values is not None
    base = trace.encoded.pixel_values.double() if vision else ctx.embeddings(trace.encoded).detach()
    key = "pixel_values" if vision else "inputs_embeds"

    # ∂score/∂input: perturb one coordinate of one example's input, score that example.
    for index in _largest(result["input_grad"]):
        example = torch.tensor([index[0]])

        def input_score(inputs: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return ctx.score(trace.encoded, examples=example, **{key: inputs[index[0]: index[0] + 1]})[0]

        fd = _finite_difference(input_score, base, index)
        assert abs(fd - result["input_grad"][index]) <= 1e-3 * abs(fd), (index, fd, result["input_grad"][index])

    # ∂score/∂pattern: P enters the output only through z = P·V, so P[b, h, i, j] += ε is z[b, i, h] += ε·v[b, j, h].
    v = trace[f"{case.prefix}blocks.0.attn.hook_v"].double()  # [batch, pos, head, d_head], repeated per query head
    site = {s.name: s for s in capturable_for(reference, case.tokenizer).sites}[f"{case.prefix}blocks.0.attn.hook_z"]
    for index in _largest(result["pattern_grad"]):
        b, h, i, j = index

        def pattern_score(shift: torch.Tensor) -> torch.Tensor:
            delta = float(shift[index])

            def nudge(z: torch.Tensor) -> torch.Tensor:
                z = z.clone()
                if z.dim() == 4:  # the reference model's hook_z: [batch (one row), pos, head, d_head]
                    z[0, i, h] += delta * v[b, j, h]
                else:  # the joined heads entering the output projection [batch (one row), pos, head * d_head]
                    d = v.shape[-1]
                    z[0, i, h * d:(h + 1) * d] += delta * v[b, j, h]
                return z

            with hook_session() as session, torch.no_grad():
                if site.pre:
                    session.add(site.module, lambda module, args: (nudge(args[0]), *args[1:]), pre=True)
                else:
                    session.add(site.module, lambda module, args, output: nudge(output))
                return ctx.score(trace.encoded, examples=torch.tensor([b]),
                                 **({key: base[b: b + 1]} if vision else {}))[0]

        fd = _finite_difference(pattern_score, torch.zeros(result["pattern_grad"].shape, dtype=torch.float64), index)
        assert abs(fd - result["pattern_grad"][index]) <= 1e-3 * abs(fd), (index, fd, result["pattern_grad"][index])


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("family", ["bert", "distilbert", "gpt2", "llama", "t5", "bart", "vit"])
def test_gradients_equal_finite_differences_on_hugging_face_models(family: str, implementation: str) -> None:
    _check(_hf_case(family, implementation))


def test_gradients_equal_finite_differences_on_the_reference_encoder() -> None:
    _check(_reference_case())


@pytest.mark.slow
def test_gradients_equal_finite_differences_on_the_default_model() -> None:
    _check(_default_case())


def test_the_grad_capture_leaves_sdpa_outputs_bit_identical() -> None:
    model = tiny_model("llama", "sdpa")
    inputs, extra = collect_args("llama")
    trace = interpret.collect(model, word_tokenizer(), inputs, **extra)
    ctx = run_context(trace, model, word_tokenizer())
    captured = ctx.capture(trace.encoded, ["blocks.1.attn.hook_pattern"])
    plain = ctx.score(trace.encoded)
    assert torch.equal(captured.score.detach(), plain.detach())
    assert captured["blocks.1.attn.hook_pattern"].requires_grad


def test_no_hook_survives_an_analyzer_that_raises() -> None:
    case = _hf_case("gpt2", "sdpa")
    trace = interpret.collect(case.model, case.tokenizer, case.inputs, **case.extra)
    before = count_hooks(case.model)
    with pytest.raises(RuntimeError, match="on purpose"):
        interpret.analyze(trace, "gradient_probe", model=case.model, tokenizer=case.tokenizer, params={"fail": True})
    assert count_hooks(case.model) == before
    from transformers.modeling_utils import AttentionInterface

    assert not hasattr(AttentionInterface.get_interface, "__wrapped__")


def test_two_examples_with_different_predictions_score_their_own_targets() -> None:
    case = _reference_case()
    torch.manual_seed(5)  # a seed whose random classifier predicts both classes on these texts
    model = EncoderClassifier(case.model.config).eval().double()
    texts = ["the cat", "a dog sat on the mat", "mat mat", "cat"]
    trace = interpret.collect(model, case.tokenizer, texts)
    ctx = run_context(trace, model, case.tokenizer)
    predicted = trace.output.argmax(-1)
    assert len(set(predicted.tolist())) == 2
    assert [t.ids[0] for t in ctx.targets] == predicted.tolist()
    scores = ctx.score(trace.encoded)
    torch.testing.assert_close(scores, trace.output.gather(1, predicted[:, None])[:, 0], rtol=0, atol=1e-12)
    # rows may repeat examples in any order: each row scores its own example's target
    rows = torch.tensor([3, 0, 0, 2])
    torch.testing.assert_close(ctx.score(trace.encoded, examples=rows), scores[rows], rtol=0, atol=1e-12)


def test_running_the_model_needs_one_and_in_eval_mode(tmp_path: Path) -> None:
    case = _reference_case()
    trace = interpret.collect(case.model, case.tokenizer, case.inputs)
    with pytest.raises(AnalyzerError, match="runs the model; pass model="):
        interpret.analyze(trace, "gradient_probe")
    case.model.train()
    try:
        with pytest.raises(AnalyzerError, match="training mode"):
            interpret.analyze(trace, "gradient_probe", model=case.model, tokenizer=case.tokenizer)
    finally:
        case.model.eval()


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_score_output_reads_the_scores_of_an_output_the_model_gave(family: str) -> None:
    """`score_output(trace.output, ...)` is `score` without the forward pass: the captured pass's own output (its
    hooks read and leave the outputs as they are) gives each example's target score as a fresh pass does."""
    model = tiny_model(family, "sdpa")
    inputs, extra = collect_args(family)
    trace = interpret.collect(model, word_tokenizer(), inputs, **extra)
    ctx = run_context(trace, model, word_tokenizer())
    with torch.no_grad():
        fresh, read = ctx.score(trace.encoded), ctx.score_output(trace.output, trace.encoded)
        torch.testing.assert_close(read, fresh, rtol=1e-6, atol=1e-6)
        if family == "llama":  # a language model's log-probability, as `score` reads it with output="logprob"
            torch.testing.assert_close(ctx.score_output(trace.output, trace.encoded, output="logprob"),
                                       ctx.score(trace.encoded, output="logprob"), rtol=1e-6, atol=1e-6)
    with pytest.raises(AnalyzerError, match="pass no examples"):
        ctx.score_output(trace.output, trace.encoded, examples=torch.tensor([0]))
