"""The checks that need torch or the tokenizer but not the weights: analyzers and their parameters, the device,
the model type's adapter, the target against the model's labels or vocabulary, exact token counts.

Each raises a usage error (exit 2) naming the option and the value; all of them run before the model loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from interpret.cli.output import usage_error
from interpret.cli.preflight import ModelPlan

from interpret.errors import InterpretError, suggest


def check_analyzers_load(names: Sequence[str], params: dict[str, dict[str, str]]) -> list[Any]:
    """Return the analyzer classes; usage error for a broken analyzer or a bad parameter value."""
    from interpret.analysis import registry
    from interpret.analysis.params import build

    classes = []
    for name in names:
        try:
            cls = registry.get(name)
        except InterpretError as err:
            raise usage_error(f"-a: {err}") from None
        try:
            build(cls.Params, params.get(name, {}), name)
        except InterpretError as err:
            raise usage_error(f"--set: {err}") from None
        classes.append(cls)
    return classes


def check_device(device: str) -> None:
    """Refuse --device cuda on a machine without a CUDA device."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise usage_error("--device cuda: no CUDA device is available on this machine; use --device cpu or auto.")


def on_cuda(device: str) -> bool:
    """Return whether `--device` (auto, cpu or cuda, already checked by `check_device`) runs the model on a CUDA
    device on this machine: the loader's own rule (`interpret.models.loading.resolve_device`), torch left unimported
    for cpu."""
    if device == "cpu":
        return False
    from interpret.models.loading import resolve_device

    return resolve_device(device).type == "cuda"


def check_adapter(plan: ModelPlan) -> None:
    """Refuse a model type no adapter can capture: one transformers does not know and no adapter plugin claims,
    or one whose base model the catalog (`interpret models`, cached per version) found unsupported."""
    if plan.default:
        return
    from interpret.capture.hf.catalog import catalog
    from interpret.capture.hf.catalog import model_types as known_types
    from interpret.capture.hf.registry import model_types

    model_type = plan.facts.model_type
    if model_type in model_types():
        return
    known = known_types()
    if model_type not in known:
        raise usage_error(
            f"--model {plan.display_name}: no adapter captures model type {model_type!r}: the installed"
            f" transformers does not know it;{suggest(model_type, known)} `interpret models` lists every model"
            " type and its support (an adapter plugin can add one)."
        )
    (support,) = catalog([model_type])
    if support.status == "unsupported":
        raise usage_error(f"--model {plan.display_name}: no adapter captures model type {model_type!r}: {support.reason}")


def load_tokenizer(plan: ModelPlan, device: str) -> Any:
    """Return the tokenizer the run will use (read offline, no remote code), once --device and the model type's
    adapter are checked (`check_device`, `check_adapter`); usage error when there is none."""
    from interpret.models.loading import load_preprocessor

    check_device(device)
    check_adapter(plan)
    location = plan.checkpoint.name if plan.checkpoint.hub else str(plan.checkpoint.directory)
    try:
        tokenizer = load_preprocessor(location, is_local=not plan.checkpoint.hub, warn=False)
    except InterpretError as err:
        raise usage_error(f"--model: {err}") from None
    if tokenizer is None:
        raise usage_error(
            f"--model {plan.display_name} has no tokenizer, so it cannot read text; save one with the model"
            " (tokenizer.save_pretrained), or explain token ids with interpret.explain in Python."
        )
    return tokenizer


def exact_counts(
    tokenizer: Any, texts: Sequence[str], *, special: bool = True, pairs: Sequence[str] | None = None,
) -> list[int]:
    """Return each text's (with its pair's, when `pairs` are given) number of tokens as `interpret.inputs.encode`
    will count them."""
    if not texts:
        return []
    encoded = tokenizer(list(texts), None if pairs is None else list(pairs), add_special_tokens=special)["input_ids"]
    return [len(ids) for ids in encoded]


def check_targets(plan: ModelPlan, tokenizer: Any, *, target: str | None, contrast: str | None) -> None:
    """Refuse a --target or --contrast the model does not have: a label or class index of a classifier, a token
    or token id of a language model (resolved exactly as the decision step resolves them)."""
    from interpret.decision.decide import resolve_class, resolve_token

    decision = plan.facts.decision
    classes: dict[str, int] = {}
    for option, value in (("--target", target), ("--contrast", contrast)):
        try:
            if value is not None and decision == "class":
                classes[option] = resolve_class(value, plan.labels())
            elif value is not None and decision == "token" and plan.facts.vocab_size:
                resolve_token(value, tokenizer, plan.facts.vocab_size)
        except InterpretError as err:
            raise usage_error(f"{option}: {err}") from None
    if len(classes) == 2 and classes["--target"] == classes["--contrast"]:
        raise usage_error(f"--contrast {contrast!r} names the same class as --target {target!r}; contrast it with another.")
