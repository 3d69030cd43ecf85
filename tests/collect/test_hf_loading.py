"""`interpret.models.loading.load`: offline local directories, safetensors only unless opted out, no remote code."""

from __future__ import annotations

import json
import signal
import time

import pytest
import torch
from hf_tiny import save_tiny, tiny_model

from interpret.errors import ModelLoadError
from interpret.models.loading import load


def test_loads_model_and_tokenizer_from_a_local_directory(tmp_path) -> None:
    model, tokenizer = load(save_tiny("bert", tmp_path), device="auto")
    assert type(model).__name__ == "BertForMaskedLM"  # the task head named in config.architectures is kept
    assert not model.training and model.dtype == torch.float32
    assert model.config._attn_implementation == "sdpa"
    assert tokenizer.convert_ids_to_tokens([2]) == ["[CLS]"]


def test_directory_without_tokenizer_gives_none(tmp_path) -> None:
    tiny_model("gpt2").save_pretrained(tmp_path)
    model, tokenizer = load(tmp_path, device="cpu", attn_implementation="eager")
    assert tokenizer is None and model.config._attn_implementation == "eager"


def test_pickle_checkpoint_is_refused_unless_opted_in(tmp_path) -> None:
    model = tiny_model("bert")
    model.config.architectures = ["BertForMaskedLM"]
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError) as err:
        load(tmp_path)
    assert "allow_pickle=True" in str(err.value) and "pytorch_model.bin" in str(err.value)
    loaded, _ = load(tmp_path, allow_pickle=True)
    assert torch.equal(loaded.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight)


@pytest.mark.parametrize("where", ["./no/such/model", "/nonexistent/dir", "no-org/no-such-model-offline"])
def test_unknown_path_or_name_is_one_line(where) -> None:
    with pytest.raises(ModelLoadError) as err:
        load(where)
    message = str(err.value)
    assert "\n" not in message and where in message


def test_directory_without_config_or_weights_is_refused(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="config.json"):
        load(tmp_path)
    tiny_model("bert").config.save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="no weights"):
        load(tmp_path)


def test_remote_code_is_refused_without_running_or_hanging(tmp_path) -> None:
    config = tiny_model("bert").config.to_dict()
    config.update(model_type="sneaky", architectures=["SneakyModel"],
                  auto_map={"AutoConfig": "modeling_sneaky.SneakyConfig", "AutoModel": "modeling_sneaky.SneakyModel"})
    (tmp_path / "config.json").write_text(json.dumps(config))
    marker = tmp_path / "ran"
    (tmp_path / "modeling_sneaky.py").write_text(f"open({str(marker)!r}, 'w').close()\nwhile True:\n    pass\n")
    (tmp_path / "model.safetensors").write_bytes(b"")

    def hung(signum, frame):
        raise TimeoutError("interpret.load hung on a remote-code checkpoint")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    start = time.perf_counter()
    try:
        with pytest.raises(ModelLoadError) as err:
            load(tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert time.perf_counter() - start < 5
    assert "remote code" in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_unknown_architecture_in_config_is_one_line(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-type", "hidden_size": 8}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError) as err:
        load(tmp_path)
    assert "\n" not in str(err.value) and "config" in str(err.value)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [({"device": "tpu"}, "device='tpu'"), ({"dtype": "float8"}, "dtype='float8'")],
)
def test_bad_device_or_dtype_is_refused(tmp_path, options, fragment) -> None:
    with pytest.raises(ModelLoadError, match=fragment):
        load(tmp_path, **options)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_says_what_to_use(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="device='cpu'"):
        load(save_tiny("bert", tmp_path), device="cuda")


def test_dtype_is_applied(tmp_path) -> None:
    model, _ = load(save_tiny("llama", tmp_path), dtype="bfloat16")
    assert model.dtype == torch.bfloat16
