"""Property test over every registered analyzer's whole parameter space, on the real traces of tiny models.

For each analyzer the registry lists (built-ins and any installed plugin), hypothesis draws parameter
mappings from the Params dataclass's own type hints (Literal choices, booleans, integers and floats with
their edge values, NaN and infinities included, optional and tuple fields). Each drawn mapping is either
refused when the parameters are built (AnalyzerError, one line) or refused against this trace with a one-line
InterpretError, or `interpret.analyze` returns a result, which `analyze` has already checked to be finite,
not all zero and within its invariants: a ResultError, or any other exception, fails the test.

Traces: a tiny random BERT sequence classifier and a tiny GPT-2 language model, both eager, on texts whose
second example is padded, with every hook point any analyzer requires.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, Literal, Union

import pytest
import transformers
from hf_tiny import TEXTS, tiny_config, tiny_model, word_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interpret.analysis import analyze, registry, required_names
from interpret.analysis.params import build
from interpret.analysis.run import run_context
from interpret.capture import collect
from interpret.decision.decide import TargetRequest, decide
from interpret.errors import AnalyzerError, InterpretError, ResultError

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
MODELS = ("bert-classifier", "gpt2")
FLOATS = st.one_of(
    st.sampled_from([0.0, 1.0, 0.5, -1.0, 1e-12, 2.0, math.nan, math.inf, -math.inf]),
    st.floats(-4, 4, allow_nan=False),
)
INTS = st.one_of(st.sampled_from([0, 1, 2, 3, -1]), st.integers(-20, 24))


def strategy(hint: Any) -> st.SearchStrategy[Any]:
    """Return a hypothesis strategy over the values of the type `hint`, edge values included."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return st.sampled_from(typing.get_args(hint))
    if origin in (Union, types.UnionType):
        return st.one_of(*(strategy(option) for option in typing.get_args(hint)))
    if hint is type(None):
        return st.none()
    if origin is tuple:
        return st.lists(strategy(typing.get_args(hint)[0]), max_size=3).map(tuple)
    if hint is bool:
        return st.booleans()
    if hint is int:
        return INTS
    if hint is float:
        return FLOATS
    if hint is str:
        return st.sampled_from(["", "auto", "none", "x"])
    raise AssertionError(f"no strategy for parameter type {hint!r}: extend tests/analyzers/{__name__}.py")


def params_strategy(params_cls: type) -> st.SearchStrategy[dict[str, Any]]:
    """Return mappings that set any subset of `params_cls`'s fields to drawn values."""
    hints = typing.get_type_hints(params_cls)
    fields = {field.name: strategy(hints[field.name]) for field in dataclasses.fields(params_cls)}
    return st.fixed_dictionaries({}, optional=fields)


@functools.cache
def setup(model_name: str) -> tuple[Any, Any]:
    """Return (trace, run context) of the named tiny model on TEXTS, with every hook point analyzers require."""
    tokenizer = word_tokenizer()
    if model_name == "gpt2":
        model = tiny_model("gpt2", attn_implementation="eager")
    else:
        config = tiny_config("bert")
        config.num_labels = 3
        config._attn_implementation = "eager"
        model = transformers.BertForSequenceClassification(config).eval()
    names = list(dict.fromkeys(["*attn.hook_pattern", *required_names(registry.names())]))
    trace = collect(model, tokenizer, TEXTS, names=names)
    decided = decide(model, trace, tokenizer, TargetRequest(), None, None)
    return trace, run_context(trace, model, tokenizer, targets=[d.target for d in decided], seed=0)


def _one_line(err: BaseException) -> None:
    assert str(err) and "\n" not in str(err), f"not one line: {err!r}"


def _run_or_refuse(name: str, model_name: str, values: dict[str, Any]) -> bool:
    """Return True when `name` ran with `values`, False when the values were refused in one line."""
    try:
        params = build(registry.get(name).Params, values, name)
    except AnalyzerError as err:
        _one_line(err)
        return False
    trace, context = setup(model_name)
    try:
        analyze(trace, name, params=params, context=context)
    except ResultError:
        raise  # a wrong result is never a refusal
    except InterpretError as err:
        _one_line(err)
        return False
    return True


# Analyzers that refuse every transformer by design, and where they run instead.
REFUSE_TRANSFORMERS = {"deeplift": "tests/analyzers/test_deeplift.py runs it on a toy model of modules Captum covers"}


@pytest.mark.parametrize("name", registry.names())
def test_the_defaults_run_on_a_tiny_model(name: str) -> None:
    ran = [_run_or_refuse(name, model_name, {}) for model_name in MODELS]
    if name in REFUSE_TRANSFORMERS:
        assert not any(ran), f"{name} ran on a transformer; {REFUSE_TRANSFORMERS[name]}"
        return
    assert any(ran), f"{name} with its default parameters ran on none of {MODELS}"


@pytest.mark.parametrize("name", registry.names())
def test_every_parameter_set_is_refused_or_sound(name: str) -> None:
    @SETTINGS
    @given(values=params_strategy(registry.get(name).Params), model_name=st.sampled_from(MODELS))
    def check(values: dict[str, Any], model_name: str) -> None:
        _run_or_refuse(name, model_name, values)

    check()
