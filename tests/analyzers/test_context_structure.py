"""The run context owns the model's structure: plugins reach a hook point's module, its sizes, the model's raw
forward pass and transformers' attention kernels through `RunContext`, never through the collector, and what the
context hands out is the model's own modules (checked against the model's attributes, not the collector)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from hf_tiny import TEXTS, model_inputs, tiny_model, word_tokenizer

import interpret
from interpret.analysis.run import run_context
from interpret.errors import AnalyzerError

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def _imports(path: Path) -> list[str]:
    """Return every module `path` imports, at any depth (lazy imports inside functions included)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_no_plugin_imports_the_collector() -> None:
    reaching = {
        path.name: name
        for path in sorted(PLUGINS.glob("*.py"))
        for name in _imports(path)
        if name == "interpret.capture" or name.startswith("interpret.capture.")
    }
    assert not reaching, f"plugins reach the collector instead of the run context: {reaching}"


def test_the_context_hands_out_the_models_own_modules_sizes_forward_and_kernels() -> None:
    model, tokenizer = tiny_model("gpt2", "sdpa").eval(), word_tokenizer()
    trace = interpret.collect(model, tokenizer, TEXTS)
    ctx = run_context(trace, model, tokenizer)
    block = model.transformer.h[1]
    assert ctx.module("blocks.1.hook_resid_pre") is block
    assert ctx.module("blocks.1.attn.hook_z") is block.attn.c_proj
    assert ctx.module("blocks.1.ln1.hook_normalized") is block.ln_1
    assert ctx.module("ln_final.hook_normalized") is model.transformer.ln_f
    assert ctx.module("blocks.99.attn.hook_z") is None
    config = model.config
    sizes = ctx.sizes("blocks.1.attn.hook_z")
    assert (sizes["head"], sizes["d_head"]) == (config.n_head, config.n_embd // config.n_head)
    with pytest.raises(AnalyzerError, match="no hook point blocks.99.attn.hook_z"):
        ctx.sizes("blocks.99.attn.hook_z")
    with torch.no_grad():
        direct = model(**model_inputs(trace.encoded)).logits
        assert torch.equal(ctx.run(trace.encoded).logits, direct)
        seen: list[object] = []

        def wrap(kernel):  # noqa: ANN001, ANN202
            def counted(module, *args, **kwargs):  # noqa: ANN001, ANN202
                seen.append(module)
                return kernel(module, *args, **kwargs)

            return counted

        with ctx.attention_kernels(wrap):
            wrapped = ctx.run(trace.encoded).logits
        assert torch.equal(wrapped, direct) and block.attn in seen
        seen.clear()
        ctx.run(trace.encoded)
        assert not seen, "the kernels stay wrapped after the context"
