"""The family matrix: every family of `hf_tiny.MATRIX` (encoders, decoders with absolute and rotary positions,
grouped-query, sliding-window, Mixture-of-Experts and parallel blocks, text and speech encoder-decoders, plain
and hierarchical windowed vision models, text-image dual encoders), each saved and loaded back through
`interpret.load` with SDPA (where the family has it) and with eager.

Per family: captured patterns equal the eager model's own `output_attentions` (TIGHT), capture with every
hook point leaves the logits bit-identical, a hook point the family lacks is refused by name, a padded batch
(right, and for decoders left) gives each example what it gets alone (PADDING), head gates act on the
output projection's heads, the gradient capture gives the target score's gradient for every pattern, rollout
runs and a report is written, and text families run `interpret collect` and `interpret report`.
`GRADIENT_CHECKS` holds the gradient methods' checks (Integrated Gradients, gradient-weighted rollout), run
on every family whose gradient capture works.

`tests/collect/family_table.py` writes the README's family table from these tests' results;
`test_readme_family_table_matches_the_models` keeps that table in step with what each family offers.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from family_table import README_ROWS, family_row, readme_rows
from hf_tiny import MATRIX, SWIN_LIKE, TEXTS, DECODER_TEXTS, collect_args, dual_patterns, eager_patterns, model_inputs, no_cache, save_tiny, windowed_patterns
from transformers.modeling_utils import AttentionInterface
from transformers.pytorch_utils import Conv1D

import interpret
from interpret.analysis.run import run_context
from interpret.capture.api import capturable_for
from interpret.capture.gates import head_gates
from interpret.capture.api import prepare
from interpret.cli.main import cli
from interpret.errors import AnalyzerError, CaptureError, HookNameError
from interpret.hooks import count_hooks
from interpret.models.loading import load
from interpret.request import Subject

TIGHT = 1e-6  # every family's eager kernel agrees with the recorded pattern to this (float32 rounding)
PADDING = 1e-5  # an example in a padded batch against the same example alone
FAMILIES = list(MATRIX)
RUNS = [(family, implementation) for family in FAMILIES for implementation in MATRIX[family].implementations]
TEXT_FAMILIES = [family for family in FAMILIES if MATRIX[family].category not in ("vision",)]
DECODERS = [family for family in FAMILIES if MATRIX[family].category == "decoder"]
CLI_FAMILIES = [family for family in FAMILIES if MATRIX[family].text]

# The gradient issue adds one (name, check(model, processor, family)) per method here; each runs per family.
# Families whose "pad" baseline sits where the model is steep: the tiny Gemma 2's pad embedding is the zero vector
# and its RMSNorm rescales a vector near zero by up to 1/sqrt(eps), so the path integral does not converge there;
# the analyzer must say so in its completeness check rather than return a silently incomplete attribution.
_STEEP_BASELINE = {"gemma2"}


def _check_integrated_gradients(model: Any, processor: Any, family: str) -> None:
    """IG on the family's token embeddings: finite, not all zero, complete within the analyzer's tolerance at 64
    steps (MoE routing and RMSNorm keep some families' deltas at 1e-3 to 1e-2), or its completeness check flags
    the delta; pixel inputs are refused in one line."""
    inputs, extra = collect_args(family)
    trace = interpret.collect(model, processor, inputs, **extra)
    context = run_context(trace, model, processor)
    if MATRIX[family].category in ("vision", "speech"):  # Whisper's encoder reads audio features
        with pytest.raises(AnalyzerError, match="pixels" if MATRIX[family].category == "vision" else "audio"):
            interpret.analyze(trace, "integrated_gradients", context=context)
        return
    result = interpret.analyze(trace, "integrated_gradients", params={"steps": 64}, context=context)
    readout, delta = result["readout"], result["delta"]
    assert np.isfinite(readout).all() and np.abs(readout).sum() > 0
    check = result.checks["completeness_delta"]
    if family in _STEEP_BASELINE:
        assert not check.ok and check.severity == "warning" and np.abs(delta).max() > 0.05
    else:  # within the analyzer's tolerance (0.05); the toy tests hold IG to 1e-4 where it is known in closed form
        assert np.abs(delta).max() < 0.05 and check.ok


def _check_gradient_weighted_rollout(model: Any, processor: Any, family: str) -> None:
    """Chefer et al.'s gradient-weighted rollout: a finite, non-negative, non-zero readout (Swin's patterns,
    lifted to the patch grid, are copies the model never reads: refused by name)."""
    inputs, extra = collect_args(family)
    trace = interpret.collect(model, processor, inputs, **extra)
    context = run_context(trace, model, processor)
    if family in SWIN_LIKE:
        with pytest.raises(CaptureError, match="without gradients"):
            interpret.analyze(trace, "gradient_weighted_rollout", context=context)
        return
    readout = interpret.analyze(trace, "gradient_weighted_rollout", context=context)["readout"]
    assert np.isfinite(readout).all() and (readout >= 0).all() and readout.sum() > 0


GRADIENT_CHECKS: tuple[tuple[str, Callable[[Any, Any, str], None]], ...] = (
    ("integrated_gradients", _check_integrated_gradients),
    ("gradient_weighted_rollout", _check_gradient_weighted_rollout),
)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], tuple[Any, Any, Path]]:
    """Return get(family, implementation) -> (model, tokenizer or processor, saved directory), each made once."""
    paths: dict[str, Path] = {}
    loaded: dict[tuple[str, str], tuple[Any, Any]] = {}

    def get(family: str, implementation: str = "eager") -> tuple[Any, Any, Path]:
        if family not in paths:
            paths[family] = save_tiny(family, tmp_path_factory.mktemp(family))
        if (family, implementation) not in loaded:
            loaded[family, implementation] = load(paths[family], device="cpu", attn_implementation=implementation)
        model, processor = loaded[family, implementation]
        return model, processor, paths[family]

    return get


def logits_of(output: Any) -> torch.Tensor:
    """Return the model's decision scores: `logits`, or a dual encoder's image-text similarities."""
    logits = getattr(output, "logits", None)
    return logits if logits is not None else output.logits_per_image


# ---------------------------------------------------------------------------------------------- references


def reference_patterns(family: str, eager: Any, encoded: Any) -> dict[str, torch.Tensor]:
    """Return the eager model's own output_attentions under canonical names (padding zeroed as collect does)."""
    category = MATRIX[family].category
    if family in SWIN_LIKE:
        return swin_reference(eager, encoded)
    if category == "dual":
        return dual_patterns(eager, encoded)
    return eager_patterns(eager, encoded)


def swin_reference(eager: Any, encoded: Any) -> dict[str, torch.Tensor]:
    """Return the windowed weights of every eager Swin block put on the patch grid (`hf_tiny.windowed_patterns`)."""
    layers = [layer for stage in eager.base_model.encoder.layers for layer in stage.blocks]
    side = int(encoded.pos**0.5)
    run = lambda: eager(pixel_values=encoded.pixel_values, output_attentions=True)  # noqa: E731
    return windowed_patterns(layers, run, (side, side), encoded.batch)


# ---------------------------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize(("family", "implementation"), RUNS, ids=[f"{f}-{i}" for f, i in RUNS])
def test_patterns_equal_eager_output_attentions(zoo, family, implementation) -> None:
    model, processor, _ = zoo(family, implementation)
    eager, _, _ = zoo(family, "eager")
    assert model.config._attn_implementation == implementation
    inputs, extra = collect_args(family)
    trace = interpret.collect(model, processor, inputs, **extra)
    expected = reference_patterns(family, eager, trace.encoded)
    assert sorted(trace.names()) == sorted(expected)
    for name, pattern in expected.items():
        assert trace[name].dtype == torch.float32
        torch.testing.assert_close(trace[name], pattern, atol=TIGHT, rtol=0, msg=name)
    assert trace.meta.attention == ("eager" if implementation == "eager" else "recomputed")


@pytest.mark.parametrize(("family", "implementation"), RUNS, ids=[f"{f}-{i}" for f, i in RUNS])
def test_capture_of_every_hook_point_is_transparent(zoo, family, implementation) -> None:
    model, processor, _ = zoo(family, implementation)
    inputs, extra = collect_args(family)
    hooks_before, lookup_before = count_hooks(model), AttentionInterface.__dict__["get_interface"]
    trace = interpret.collect(model, processor, inputs, names="*", **extra)
    with torch.no_grad():
        plain = model(**model_inputs(trace.encoded), **no_cache(model))
    assert torch.equal(logits_of(trace.output), logits_of(plain))
    assert count_hooks(model) == hooks_before and AttentionInterface.__dict__["get_interface"] is lookup_before
    assert trace.meta.capture_bytes == sum(t.numel() * t.element_size() for t in trace.tensors.values())
    for name, tensor in trace.tensors.items():
        assert tensor.shape[0] == trace.encoded.batch and torch.isfinite(tensor.float()).all(), name
    for name in trace.names("*hook_pattern"):
        pattern, scores_name = trace[name], name.replace("hook_pattern", "hook_attn_scores")
        scores = trace[scores_name] if scores_name in trace else None
        real = pattern.sum(-1) > 0.5
        torch.testing.assert_close(pattern.sum(-1)[real], torch.ones_like(pattern.sum(-1)[real]), atol=1e-5, rtol=0)
        if scores is not None:
            torch.testing.assert_close(scores.softmax(-1)[real], pattern[real], atol=1e-5, rtol=0)
    refused = capturable_for(model, processor).unsupported
    if refused:
        name = next(iter(refused))
        with pytest.raises(HookNameError) as err:
            interpret.collect(model, processor, inputs, names=[name], **extra)
        assert name in str(err.value) and refused[name] in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("family", "side"),
    [(family, "right") for family in TEXT_FAMILIES] + [(family, "left") for family in DECODERS],
    ids=[f"{f}-right" for f in TEXT_FAMILIES] + [f"{f}-left" for f in DECODERS],
)
def test_each_example_of_a_padded_batch_equals_the_example_alone(zoo, family, side) -> None:
    model, processor, _ = zoo(family, MATRIX[family].implementations[0])
    if side == "left":
        processor = copy.deepcopy(processor)
        processor.padding_side = "left"
    inputs, extra = collect_args(family)
    names = ["*hook_pattern", "*hook_resid_post"]
    batch = interpret.collect(model, processor, inputs, names=names, **extra)
    assert batch.encoded.padding.any() or (batch.encoded.decoder is not None and batch.encoded.decoder.padding.any())
    if side == "left":
        assert bool(batch.encoded.attention_mask[:, 0].eq(0).any())  # some example starts with padding
    for b in range(batch.encoded.batch):
        alone = interpret.collect(model, processor, _one(inputs, b), names=names, **_one_extra(extra, b))
        main = batch.encoded.attention_mask[b].bool()
        dec = batch.encoded.decoder.attention_mask[b].bool() if batch.encoded.decoder is not None else None
        for name in batch.names():
            query = dec if name.startswith("decoder.") else None if name.startswith("vision.") else main
            key = main if ".cross_attn." in name else query
            got = batch[name][b]
            if name.endswith("hook_pattern"):
                got = got if query is None else got[:, query][:, :, key]
            elif query is not None:
                got = got[query]
            torch.testing.assert_close(got, alone[name][0], atol=PADDING, rtol=0, msg=name)
        logits, single = logits_of(batch.output), logits_of(alone.output)
        if not MATRIX[family].padding_invariant:
            continue  # the model's own output reads the padding (SigLIP pools the last position, padded or not)
        if logits.dim() == 3:  # per position: the decoder side's positions, or the only side's
            positions = dec if dec is not None else main
            torch.testing.assert_close(logits[b][positions], single[0], atol=PADDING, rtol=0)
        else:  # per example (a dual encoder: this image against this text)
            torch.testing.assert_close(logits[b, b], single[0, 0], atol=PADDING, rtol=0)


def _one(inputs: Any, b: int) -> Any:
    if isinstance(inputs, dict):
        return {"text": inputs["text"][b:b + 1], "images": inputs["images"][b:b + 1]}
    return inputs[b:b + 1]


def _one_extra(extra: dict[str, Any], b: int) -> dict[str, Any]:
    return {key: value[b:b + 1] for key, value in extra.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_head_gates_act_on_the_output_projection(zoo, family) -> None:
    model, processor, _ = zoo(family, "eager")
    capturable = capturable_for(model, processor)
    prefix = "decoder." if capturable.kind == "encoder-decoder" else ""
    z_sites = [site for site in capturable.sites if site.name.startswith(f"{prefix}blocks.") and site.name.endswith(".attn.hook_z")]
    if not z_sites:
        reason = capturable.unsupported[f"{prefix}blocks.0.attn.hook_z"]
        with pytest.raises(HookNameError):
            with head_gates(model, torch.ones(capturable.n_layers, capturable.n_heads), prefix=prefix):
                pass
        assert reason  # the family says why it has no per-head gates
        return
    inputs, extra = collect_args(family)
    encoded = prepare(capturable, processor, inputs, **extra)
    feed = {**model_inputs(encoded), **no_cache(model)}
    with torch.no_grad():
        plain = logits_of(model(**feed))
        layers, heads = len(z_sites), capturable.n_heads
        with head_gates(model, torch.ones(layers, heads), prefix=prefix):
            assert torch.equal(logits_of(model(**feed)), plain)
        gates = torch.ones(layers, heads)
        gates[-1, 1] = 0.0
        with head_gates(model, gates, prefix=prefix):
            gated = logits_of(model(**feed))
        zeroed = copy.deepcopy(model)
        site = next(s for s in capturable.sites if s.name == z_sites[-1].name)
        path = next(p for p, m in model.named_modules() if m is site.module)
        out_proj = zeroed.get_submodule(path)
        d_head = site.sizes["d_head"]
        cut = slice(d_head, 2 * d_head)
        weight = out_proj.weight.detach().clone()
        if isinstance(out_proj, Conv1D):
            weight[cut, :] = 0
        else:
            weight[:, cut] = 0
        with _weight_on_call(out_proj, weight, site.call, site.calls):
            torch.testing.assert_close(gated, logits_of(zeroed(**feed)), atol=1e-6, rtol=0)
    assert not torch.allclose(gated, plain, atol=1e-6)


@contextlib.contextmanager
def _weight_on_call(module: torch.nn.Module, weight: torch.Tensor, call: int, calls: int) -> Any:
    """Yield with `module.weight` replaced by `weight`: for good, or where one module serves several layers
    (ALBERT: `calls` calls per forward pass), during call `call` of each pass only."""
    original, count = module.weight.detach().clone(), [0]

    def before(module: torch.nn.Module, args: Any) -> None:
        if count[0] % calls == call:
            module.weight.data.copy_(weight)

    def after(module: torch.nn.Module, args: Any, output: Any) -> None:
        count[0] += 1
        module.weight.data.copy_(original)

    handles = [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("family", FAMILIES)  # Swin's stages differ in head count: rollout takes them
def test_rollout_runs_and_a_report_is_written(zoo, family, tmp_path) -> None:
    model, processor, _ = zoo(family, MATRIX[family].implementations[0])
    inputs, extra = collect_args(family)
    trace = interpret.collect(model, processor, inputs, **extra)
    rollout = interpret.analyze(trace, "rollout")
    assert np.isfinite(rollout["readout"]).all() and (rollout["readout"] >= 0).all()
    if isinstance(inputs, dict):  # explain takes an Encoded for inputs that are not text, ids or pixels
        inputs = prepare(capturable_for(model, processor), processor, inputs)
    report = interpret.explain(model, processor, inputs, analyzers=["rollout"], target=Subject(**extra))
    path = tmp_path / f"{family}.html"
    report.render(path)
    assert path.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html>")


# Every family makes a decision the gradient methods score: a dual encoder's is its text-image logit.
@pytest.mark.parametrize(("family", "implementation"), RUNS, ids=[f"{f}-{i}" for f, i in RUNS])
def test_gradient_capture_reaches_every_pattern(zoo, family, implementation) -> None:
    model, processor, _ = zoo(family, implementation)
    inputs, extra = collect_args(family)
    trace = interpret.collect(model, processor, inputs, **extra)
    context = run_context(trace, model, processor)
    if family in SWIN_LIKE:  # patterns lifted to the patch grid are copies the model never reads
        with pytest.raises(CaptureError, match="without gradients"):
            context.capture(trace.encoded, ["*hook_pattern"])
        return
    captured = context.capture(trace.encoded, ["*hook_pattern"])
    names = sorted(captured.tensors)
    assert names == sorted(trace.names("*hook_pattern"))
    grads = torch.autograd.grad(captured.score.sum(), [captured[name] for name in names])
    for name, grad in zip(names, grads):
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0, name


@pytest.mark.parametrize(("family", "method"), [(family, name) for family in FAMILIES for name, _ in GRADIENT_CHECKS])
def test_gradient_methods_run(zoo, family, method) -> None:
    model, processor, _ = zoo(family, MATRIX[family].implementations[0])
    dict(GRADIENT_CHECKS)[method](model, processor, family)


@pytest.mark.parametrize("family", CLI_FAMILIES)
def test_cli_collect_and_report_run(zoo, family, tmp_path) -> None:
    _, _, directory = zoo(family)
    decoder = ["--decoder-text", DECODER_TEXTS[0]] if MATRIX[family].category == "encoder-decoder" else []
    runner = CliRunner()
    trace_path, report_path = tmp_path / "t.safetensors", tmp_path / "r.html"
    collected = runner.invoke(cli, ["collect", "--model", str(directory), "--text", TEXTS[0], *decoder, "-o",
                                    str(trace_path), "-q"], catch_exceptions=False)
    assert collected.exit_code == 0, collected.stderr
    reported = runner.invoke(cli, ["report", "--model", str(directory), "--text", TEXTS[0], *decoder, "-a", "rollout",
                                   "-o", str(report_path), "-q"], catch_exceptions=False)
    assert reported.exit_code == 0, reported.stderr
    assert trace_path.is_file() and report_path.is_file()


@pytest.mark.parametrize("family", FAMILIES)
def test_readme_family_table_matches_the_models(zoo, family) -> None:
    model, processor, _ = zoo(family, "eager")
    rows = readme_rows()
    assert family in rows, f"README has no row for {family}; run python tests/collect/family_table.py"
    assert rows[family] == family_row(family, model, processor), f"README row for {family} is stale; {README_ROWS}"
