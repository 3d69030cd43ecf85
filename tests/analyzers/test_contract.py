"""Every registered analyzer goes through the same contract checks, on the same traces."""

from __future__ import annotations

import fnmatch
import json
import re

import numpy as np
import pytest
import torch

import interpret
from interpret.analysis import AnalyzerResult, describe, registry, required_names
from interpret.errors import AnalyzerError, HookNameError
from interpret.hooks import count_hooks
from interpret.reference import DecoderLM, EncoderClassifier, TransformerConfig
from interpret.reference.vocab import word_tokenizer

WORDS = "the cat sat on mat a dog saw ! marker".split()
TEXTS = ["the cat sat on the mat", "a dog saw !"]
# Decomposition methods read transformers' block structure (output projection, norms, attention interface);
# on the reference model they may refuse in one line. tests/decomp holds them to the papers on HF families.
# deeplift refuses every transformer in one line (summation-to-delta fails; tests/analyzers/test_deeplift.py);
# attnlrp needs a rule for each operation of a family it knows (tests/analyzers/test_attnlrp.py).
DECOMPOSITIONS = {"norm_attention", "globenc", "alti", "alti_logit", "value_zeroing", "decompx", "deeplift", "attnlrp"}


@pytest.fixture(scope="module", params=["encoder", "decoder"])
def setup(request):
    torch.manual_seed(0)
    tokenizer = word_tokenizer(WORDS)
    config = TransformerConfig(d_model=32, n_heads=4, n_layers=3, d_mlp=64, vocab_size=len(tokenizer), max_positions=32)
    model = (EncoderClassifier if request.param == "encoder" else DecoderLM)(config).eval()
    offered = interpret.collect(model, tokenizer, TEXTS[:1], names=["*"]).names()  # every hook point it has
    return model, tokenizer, offered


@pytest.mark.parametrize("name", interpret.analyzers())
def test_analyzer_meets_the_contract(name: str, setup) -> None:
    model, tokenizer, offered = setup
    cls = registry.get(name)
    assert cls.name == name and cls.summary and "\n" not in cls.summary
    assert all(info.help for info in describe(cls.Params)), "every parameter documents itself"
    names = required_names([name])
    lacking = [glob for glob in names if not fnmatch.filter(offered, glob)]
    if lacking:  # e.g. the decomposition methods read norm hook points the reference blocks do not expose
        with pytest.raises(HookNameError, match=re.escape(lacking[0])):
            interpret.collect(model, tokenizer, TEXTS, names=names)
        return  # such analyzers meet the contract on the Hugging Face families their own tests cover
    trace = interpret.collect(model, tokenizer, TEXTS, names=names)
    hooks_before = count_hooks(model)
    if name in DECOMPOSITIONS:  # they need the structure of transformers' blocks; the reference model's is refused
        try:
            result = interpret.analyze(trace, name, model=model, tokenizer=tokenizer)
        except AnalyzerError as err:
            assert "\n" not in str(err) and name in str(err) or "affine" in str(err) or "interface" in str(err), str(err)
            assert count_hooks(model) == hooks_before
            return
    result = interpret.analyze(trace, name, model=model, tokenizer=tokenizer)
    assert count_hooks(model) == hooks_before
    assert isinstance(result, AnalyzerResult) and result.analyzer == name
    assert result.ok, {key: check for key, check in result.checks.items() if not check.ok}
    assert result.checks, "an analyzer reports at least one invariant residual"
    assert [list(row) for row in result.tokens] == trace.encoded.tokens
    for array_name, array in result.arrays.items():
        assert array.axes[0] == "batch" and array.values.shape[0] == trace.encoded.batch, array_name
        assert np.isfinite(array.values).all(), array_name
    again = AnalyzerResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.params == result.params and again.views == result.views
    for array_name, array in result.arrays.items():
        assert np.array_equal(again[array_name], array.values) and again.arrays[array_name].axes == array.axes
    assert {view.array for view in result.views} <= set(result.arrays)


BAD = '''
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout


@dataclass(frozen=True)
class Params:
    fault: Literal["nan", "zero", "invariant", "none"] = field(default="none", metadata={"help": "what goes wrong"})


class Faulty:
    name = "faulty"
    summary = "Returns a broken result on demand."
    version = "0"
    requires = ()
    needs_model = False
    provides = ("readout",)
    Params = Params

    def run(self, trace, params, ctx):
        readout = trace.encoded.attention_mask.double().cpu().numpy() / trace.encoded.attention_mask.sum(-1, keepdim=True).cpu().numpy()
        if params.fault == "nan":
            readout[0, 1] = np.nan
        if params.fault == "zero":
            readout[1] = 0.0
        error = 0.5 if params.fault == "invariant" else 0.0
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params={"fault": params.fault},
            arrays={"readout": NamedArray(readout, ("batch", "key"))},
            checks={"sum_error": Check(error, 1e-9, "readout sums to one")},
            readout_of=Readout("readout"),
        )
'''


@pytest.mark.parametrize(
    ("fault", "message"),
    [("nan", "1 non-finite value"), ("zero", "example 1 a readout that is zero on every token"),
     ("invariant", "broke its invariant sum_error")],
)
def test_a_wrong_result_is_refused_naming_the_parameters(tmp_path, fault: str, message: str) -> None:
    from fake_traces import random_pattern_trace
    from plugin_install import install_plugin, plugin_site

    from interpret.errors import ResultError

    install_plugin(tmp_path, "faulty-plugin", "faulty_plugin", BAD, {"faulty": "faulty_plugin:Faulty"}, "interpret.analyzers")
    with plugin_site(tmp_path, "faulty_plugin"):
        trace = random_pattern_trace()
        assert interpret.analyze(trace, "faulty").readout is not None
        with pytest.raises(ResultError, match=message) as err:
            interpret.analyze(trace, "faulty", params={"fault": fault})
        assert f"fault={fault}" in str(err.value) and "\n" not in str(err.value)
