"""Integrated Gradients: completeness and closed-form attributions on an analytic toy; equal to Captum's
LayerIntegratedGradients called directly on tiny BERT, tiny GPT-2 and MiniLM with the default head; batched,
one-by-one and chunked runs agree; no hook survives, also when the run raises."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from captum.attr import LayerIntegratedGradients
from gradient_cases import CASES, baseline_ids, tiny_bert

from interpret.analysis import RunContext
from interpret.analysis.runner import Forward
from interpret.hooks import count_hooks
from interpret.inputs import Encoded
from interpret.plugins.integrated_gradients import IntegratedGradientsAnalyzer, IntegratedGradientsParams
from interpret.target import Target
from interpret.trace import Trace, TraceMeta

PAD, MASK = 0, 4


class CubicRunner:
    """An analytic model: e = Embedding(ids), F_b(e) = Σ_{p,d} (b + 1)·c[p, d]·e[p, d]³ + u[p, d]·e[p, d].

    Integrated Gradients of F from baseline e' to e is, in closed form,
    attr[p, d] = (b + 1)·c[p, d]·(e³ − e'³) + u[p, d]·(e − e') (the integral of 3c(e' + α(e − e'))² is exact)."""

    gate_shape = (1, 1)  # layers, heads: what the memory estimate reads

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.embedding = torch.nn.Embedding(10, 3).double()
        with torch.no_grad():
            self.embedding.weight.copy_(torch.rand(10, 3, generator=generator, dtype=torch.float64) - 0.5)
        self.c = torch.rand(6, 3, generator=generator, dtype=torch.float64)
        self.u = torch.rand(6, 3, generator=generator, dtype=torch.float64) - 0.5

    def closed_form(self, b: int, ids: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        x, x0 = self.embedding(ids).detach(), self.embedding(base).detach()
        return (b + 1) * self.c * (x**3 - x0**3) + self.u * (x - x0)

    def score(self, encoded, forward=Forward()):
        examples = torch.arange(encoded.batch) if forward.examples is None else forward.examples
        inputs_embeds, input_ids = forward.inputs_embeds, forward.input_ids
        if inputs_embeds is None:
            inputs_embeds = self.embedding(input_ids if input_ids is not None else encoded.input_ids[examples])
        weight = (examples.double() + 1)[:, None, None]
        return (weight * self.c * inputs_embeds**3 + self.u * inputs_embeds).sum((1, 2))

    def embedding_layer(self, side="main"):
        return self.embedding

    def embeddings(self, encoded, *, input_ids=None, examples=None):
        return self.embedding(input_ids if input_ids is not None else encoded.input_ids)


def _toy() -> tuple[Trace, RunContext, CubicRunner]:
    ids = torch.tensor([[2, 5, 6, 7, 8, 3], [2, 9, 5, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    special = torch.tensor([[1, 0, 0, 0, 0, 1], [1, 0, 0, 1, 1, 1]]).bool()
    encoded = Encoded(attention_mask=mask, tokens=[["t"] * 6, ["t"] * 6], special=special, input_ids=ids)
    runner = CubicRunner()
    targets = (Target("class", ids=(0,)), Target("class", ids=(0,)))
    tokenizer = SimpleNamespace(pad_token_id=PAD, mask_token_id=MASK)
    ctx = RunContext(targets=targets, tokenizer=tokenizer, runner=runner, device=torch.device("cpu"))
    return Trace(tensors={}, encoded=encoded, meta=TraceMeta("cubic", "encoder", 0, 1)), ctx, runner


@pytest.mark.parametrize("method", ["gausslegendre", "riemann_middle"])
@pytest.mark.parametrize("baseline", ["pad", "mask"])
def test_completeness_and_closed_form_on_an_analytic_toy(method: str, baseline: str) -> None:
    trace, ctx, runner = _toy()
    params = IntegratedGradientsParams(steps=200, method=method, baseline=baseline)
    result = IntegratedGradientsAnalyzer().run(trace, params, ctx)
    fill = PAD if baseline == "pad" else MASK
    for b in range(2):
        attributed = trace.encoded.attention_mask[b].bool() & ~trace.encoded.special[b]
        base = torch.where(attributed, torch.full_like(trace.encoded.input_ids[b], fill), trace.encoded.input_ids[b])
        expected = runner.closed_form(b, trace.encoded.input_ids[b], base).sum(-1).cpu().numpy()
        np.testing.assert_allclose(result["readout"][b], expected, atol=1e-3, rtol=0)
        gap = float(runner.score(trace.encoded, Forward(examples=torch.tensor([b]), input_ids=trace.encoded.input_ids[b:b + 1])).detach()
                    - runner.score(trace.encoded, Forward(examples=torch.tensor([b]), input_ids=base[None])).detach())
        assert abs(result["readout"][b].sum() - gap) < 1e-4
        assert abs(result["gap"][b] - gap) < 1e-12
    assert np.abs(result["delta"]).max() < 1e-4
    assert result.checks["completeness_delta"].ok


def test_zero_baseline_is_the_closed_form_from_the_zero_vector() -> None:
    trace, ctx, runner = _toy()
    result = IntegratedGradientsAnalyzer().run(trace, IntegratedGradientsParams(steps=200, baseline="zero"), ctx)
    x = runner.embedding(trace.encoded.input_ids).detach()
    attributed = (trace.encoded.attention_mask.bool() & ~trace.encoded.special).double()
    weight = torch.tensor([1.0, 2.0], dtype=torch.float64)[:, None, None]
    expected = ((weight * runner.c * x**3 + runner.u * x).sum(-1) * attributed).cpu().numpy()
    np.testing.assert_allclose(result["readout"], expected, atol=1e-3, rtol=0)
    assert np.abs(result["delta"]).max() < 1e-4


def test_few_steps_warn_with_what_to_do() -> None:
    trace, ctx, _ = _toy()
    params = IntegratedGradientsParams(steps=2, method="riemann_left", delta_tolerance=1e-6)
    check = IntegratedGradientsAnalyzer().run(trace, params, ctx).checks["completeness_delta"]
    assert check.severity == "warning" and not check.ok
    assert "steps=8" in check.description


def _captum_reference(case, trace, steps: int = 50, chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Captum's LayerIntegratedGradients on the model's own embedding layer and a plain forward."""
    pad = case.tokenizer.pad_token_id if case.tokenizer.pad_token_id is not None else case.tokenizer.eos_token_id
    ids, mask = trace.encoded.input_ids, trace.encoded.attention_mask
    method = LayerIntegratedGradients(case.forward, case.model.get_input_embeddings())
    attr, delta = method.attribute(ids, baselines=baseline_ids(trace, pad), additional_forward_args=(mask, case.targets(trace)),
                                   n_steps=steps, internal_batch_size=chunk, return_convergence_delta=True)
    return attr.sum(-1).detach().cpu().numpy(), delta.detach().cpu().numpy()


@pytest.mark.parametrize("family", ["bert", "gpt2", "minilm"])
def test_equals_captum_called_directly(family: str) -> None:
    case = CASES[family]()
    trace = case.trace()
    result = case.analyze(trace, "integrated_gradients")
    expected, delta = _captum_reference(case, trace)
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(result["readout"], expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(result["delta"], delta, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["bert", "minilm"])
def test_batched_one_by_one_and_chunked_agree(family: str) -> None:
    case = CASES[family]()
    trace = case.trace()
    batched = case.analyze(trace, "integrated_gradients")["readout"]
    chunked = case.analyze(trace, "integrated_gradients", internal_batch_size=7)["readout"]
    np.testing.assert_allclose(chunked, batched, atol=1e-5, rtol=0)
    for b, text in enumerate(case.texts):
        alone = case.analyze(case.trace([text]), "integrated_gradients")["readout"][0]
        n = len(alone)
        np.testing.assert_allclose(batched[b, :n], alone, atol=1e-5, rtol=0)
        assert not batched[b, n:].any()


def test_no_hook_survives_a_run_or_a_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    case = tiny_bert()
    trace = case.trace()
    before = count_hooks(case.model)
    case.analyze(trace, "integrated_gradients", steps=4)
    assert count_hooks(case.model) == before

    from interpret.analysis.runner import ModelRunner

    def fail(*args, **kwargs):
        raise RuntimeError("the score fails on purpose")

    monkeypatch.setattr(ModelRunner, "_scores", fail)
    with pytest.raises(RuntimeError, match="on purpose"):
        case.analyze(trace, "integrated_gradients", steps=4)
    assert count_hooks(case.model) == before


def test_a_small_memory_budget_chunks_the_path_to_the_same_result() -> None:
    case = tiny_bert()
    trace = case.trace()
    whole = case.analyze(trace, "integrated_gradients", memory_mb=4096)["readout"]
    chunked = case.analyze(trace, "integrated_gradients", memory_mb=1)["readout"]  # one step of each example a pass
    np.testing.assert_allclose(chunked, whole, atol=1e-5, rtol=0)


def test_the_default_path_budget_is_sized_from_the_device() -> None:
    """memory_mb=0 (the default): half the free memory of a CUDA device, 1024 MiB on the CPU; the steps of every
    example share the passes."""
    from interpret.analysis.run import run_context
    from interpret.plugins._captum import CPU_PATH_MB, path_rows, token_batch

    case = tiny_bert()
    trace = case.trace()
    ctx = run_context(trace, case.model, case.tokenizer)
    batch = token_batch(trace, ctx, IntegratedGradientsParams(), "integrated_gradients")
    weight = ctx.embedding_layer().weight
    if weight.device.type == "cuda":
        expected = path_rows(ctx, batch, (torch.cuda.mem_get_info(weight.device)[0] // 2) >> 20)
        assert abs(path_rows(ctx, batch, 0) - expected) <= 0.05 * expected
    else:
        assert path_rows(ctx, batch, 0) == path_rows(ctx, batch, CPU_PATH_MB)
    assert IntegratedGradientsParams().memory_mb == 0
    with pytest.raises(ValueError, match="memory_mb=-1 is negative"):
        IntegratedGradientsParams(memory_mb=-1)


def test_params_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="baseline_text"):
        IntegratedGradientsParams(baseline="text")
    with pytest.raises(ValueError, match="steps"):
        IntegratedGradientsParams(steps=1)


def test_runs_no_forward_pass_beyond_captums_own() -> None:
    """The gap F(x) − F(x') is read from Captum's convergence delta, so a run scores the model exactly as often as
    LayerIntegratedGradients called directly with the same steps and chunking (and the gap stays exact)."""
    trace, ctx, runner = _toy()
    calls: list[int] = []
    score = runner.score

    def counted(encoded, forward):
        calls.append(1)
        return score(encoded, forward)

    runner.score = counted
    result = IntegratedGradientsAnalyzer().run(trace, IntegratedGradientsParams(steps=20, internal_batch_size=8), ctx)
    ours = len(calls)
    calls.clear()
    ids = trace.encoded.input_ids
    base = torch.where(trace.encoded.attention_mask.bool() & ~trace.encoded.special, torch.full_like(ids, PAD), ids)
    method = LayerIntegratedGradients(lambda i, e: counted(trace.encoded, Forward(input_ids=i, examples=e)), runner.embedding)
    method.attribute(ids, baselines=base, additional_forward_args=(torch.arange(2),), n_steps=20, internal_batch_size=8,
                     return_convergence_delta=True)
    assert ours == len(calls)
    with torch.no_grad():
        direct = (score(trace.encoded, Forward(input_ids=ids)) - score(trace.encoded, Forward(input_ids=base))).cpu().numpy()
    np.testing.assert_allclose(result["gap"], direct, atol=1e-12, rtol=0)


def test_a_chunked_path_is_split_evenly() -> None:
    from interpret.plugins.integrated_gradients import _even_chunk

    assert _even_chunk(50, 37) == 25  # two passes either way; the peak is 25 rows, not 37
    assert _even_chunk(50, 50) == 50 and _even_chunk(50, 400) == 50
    assert _even_chunk(100, 1) == 1 and _even_chunk(101, 50) == 34
