"""Per-head gates at the input of the attention output projection (the replacement for head_mask)."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import model_inputs, tiny_model
from transformers.pytorch_utils import Conv1D

import interpret
from interpret.capture.gates import head_gates
from interpret.errors import ConfigError, HookNameError
from interpret.hooks import count_hooks
from interpret.inputs import from_ids

IDS = torch.tensor([[2, 5, 9, 7, 11, 3], [2, 8, 6, 10, 3, 0]])
MASK = (IDS != 0).long()


def logits(model, **extra) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS.to(model.device), attention_mask=MASK.to(model.device), **extra).logits


def zero_head_columns(out_proj: torch.nn.Module, head: int, d_head: int) -> None:
    """Zero the output projection's weights that read head `head` (Linear: columns; GPT-2's Conv1D: rows)."""
    cut = slice(head * d_head, (head + 1) * d_head)
    with torch.no_grad():
        if isinstance(out_proj, Conv1D):
            out_proj.weight[cut, :] = 0
        else:
            out_proj.weight[:, cut] = 0


@pytest.mark.parametrize(
    ("family", "out_proj"),
    [("bert", "bert.encoder.layer.{}.attention.output.dense"), ("gpt2", "transformer.h.{}.attn.c_proj"),
     ("llama", "model.layers.{}.self_attn.o_proj")],
)
def test_gate_of_ones_changes_nothing_and_zero_equals_zeroed_columns(family, out_proj) -> None:
    model = tiny_model(family)
    plain = logits(model)
    hooks_before = count_hooks(model)
    with head_gates(model, torch.ones(2, 4)):
        assert torch.equal(logits(model), plain)
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    with head_gates(model, gates):
        gated = logits(model)
    assert count_hooks(model) == hooks_before
    zero_head_columns(model.get_submodule(out_proj.format(1)), head=2, d_head=8)
    torch.testing.assert_close(gated, logits(model), atol=1e-6, rtol=0)
    assert not torch.allclose(gated, plain, atol=1e-4)


def test_hook_z_inside_gates_shows_the_gated_heads() -> None:
    model = tiny_model("llama")
    gates = torch.ones(2, 4)
    gates[0, 1] = 0.0
    gates[0, 3] = 0.5
    ungated = interpret.collect(model, None, from_ids(IDS, MASK), names="blocks.0.attn.hook_z")
    with head_gates(model, gates):
        gated = interpret.collect(model, None, from_ids(IDS, MASK), names="blocks.0.attn.hook_z")
    z, z0 = gated["blocks.0.attn.hook_z"], ungated["blocks.0.attn.hook_z"]
    assert (z[:, :, 1] == 0).all() and torch.equal(z[:, :, 0], z0[:, :, 0])
    torch.testing.assert_close(z[:, :, 3], z0[:, :, 3] * 0.5)


def test_encoder_decoder_gates_name_their_stack() -> None:
    model = tiny_model("t5")
    trace = interpret.collect(model, None, from_ids(IDS, MASK), decoder_inputs=IDS[:, :4])
    with torch.no_grad():
        plain = model(**model_inputs(trace.encoded)).logits
    with pytest.raises(HookNameError) as err:
        with head_gates(model, torch.ones(2, 4)):
            pass
    assert "decoder.blocks.{i}.cross_attn.hook_z" in str(err.value) and "\n" not in str(err.value)
    with head_gates(model, torch.zeros(2, 4), prefix="decoder.", attention="cross_attn"), torch.no_grad():
        without_cross = model(**model_inputs(trace.encoded)).logits
    assert not torch.allclose(plain, without_cross, atol=1e-4)


def test_gates_of_the_wrong_shape_are_refused() -> None:
    model = tiny_model("bert")
    hooks_before = count_hooks(model)
    with pytest.raises(ConfigError) as err:
        with head_gates(model, torch.ones(3, 4)):
            pass
    assert "(2, 4)" in str(err.value) and count_hooks(model) == hooks_before


def test_gate_hooks_are_removed_when_the_block_raises() -> None:
    model = tiny_model("gpt2")
    hooks_before = count_hooks(model)
    with pytest.raises(RuntimeError, match="inside"):
        with head_gates(model, torch.ones(2, 4)):
            assert count_hooks(model) == hooks_before + 2
            raise RuntimeError("inside the gated block")
    assert count_hooks(model) == hooks_before


def test_gates_work_on_the_reference_model_too() -> None:
    from interpret.reference import DecoderLM, TransformerConfig

    torch.manual_seed(0)
    config = TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=20, max_positions=32)
    model = DecoderLM(config).eval()
    encoded = from_ids(IDS[:1, :5])
    with torch.no_grad():
        plain = model.forward_encoded(encoded)
        with head_gates(model, torch.ones(2, 4)):
            assert torch.equal(model.forward_encoded(encoded), plain)
    gates = torch.ones(2, 4)
    gates[0, 1] = 0.0
    with head_gates(model, gates):
        trace = interpret.collect(model, None, encoded, names="blocks.0.attn.hook_z")
    assert (trace["blocks.0.attn.hook_z"][:, :, 1] == 0).all()
    assert not torch.allclose(trace.output, plain, atol=1e-4)


def test_gradients_flow_to_the_gates() -> None:
    model = tiny_model("bert")
    gates = torch.ones(2, 4, requires_grad=True)
    with head_gates(model, gates):
        model(input_ids=IDS.to(model.device), attention_mask=MASK.to(model.device)).logits.square().mean().backward()
    assert gates.grad is not None and gates.grad.shape == (2, 4) and (gates.grad != 0).all()
