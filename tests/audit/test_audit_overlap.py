"""The overlapped audit (analyzers of batch k beside the forward of batch k+1) computes exactly what the
batch-by-batch audit computes: every output file byte for byte, on a tiny reference model."""

from __future__ import annotations

import threading

import pytest
import torch

from interpret.audit import AuditOptions, run_audit
from interpret.audit.engine import run_batch
import interpret.audit.overlap as overlap
from interpret.pipeline import Plan
from interpret.reading.datasets import Example
from interpret.request import EvidenceOptions

ATTENTION = ["rollout", "flow", "attention_entropy"]

WORDS = "the cat sat on mat a dog saw good bad red blue".split()  # the vocabulary of conftest's tokenizer


def _examples(n: int) -> list[Example]:
    return [Example(row=i, text=" ".join(WORDS[(5 * i + 3 * j) % len(WORDS)] for j in range(1 + i % 9)),
                    label=f"class {i % 2}") for i in range(n)]


def _settings(analyzers: list[str], evidence: bool = False) -> Plan:
    from interpret.analysis import required_names
    from interpret.audit.checks import effective_params

    return Plan(
        strategies=dict.fromkeys(analyzers, "full"), params={name: effective_params(name, None) for name in analyzers},
        hook_names=tuple(dict.fromkeys([*required_names(analyzers), "*attn.hook_pattern"])), seed=3,
        evidence=EvidenceOptions(enabled=evidence),
    )


def _outputs(root) -> dict[str, bytes]:
    names = ("tokens.parquet", "tokens.csv", "examples.parquet", "examples.csv", "heads.csv", "summary.html")
    return {name: (root / name).read_bytes() for name in names}


@pytest.fixture(autouse=True)
def _overlap_wherever_allowed(monkeypatch) -> None:
    """These tests check the overlapped path itself, whether or not this machine has a core free for it."""
    monkeypatch.setattr(overlap, "ENABLED", True)


def test_overlap_only_for_analyzers_that_read_the_trace_alone() -> None:
    assert overlap.overlappable(_settings(ATTENTION))
    assert not overlap.overlappable(_settings([*ATTENTION, "integrated_gradients"]))  # runs the model
    assert not overlap.overlappable(_settings(ATTENTION, evidence=True))  # evidence runs the model too


def test_by_default_overlap_only_where_the_worker_has_a_core(model, tokenizer, monkeypatch) -> None:
    """A CPU forward pass on every free core leaves the worker none: then batches run on the calling thread."""
    monkeypatch.setattr(overlap, "ENABLED", None)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    examples = _examples(6)
    batches = [examples[i:i + 2] for i in range(0, 6, 2)]
    for free, expected in ((2, False), (3, True)):
        monkeypatch.setattr(overlap.threads, "free_cores", lambda free=free: free)
        assert overlap.worker_core_free(model) is expected
        names: set[str] = set()
        analyze_batch = overlap.analyze_batch

        def spy(*args, names=names, analyze_batch=analyze_batch, **kwargs):
            names.add(threading.current_thread().name)
            return analyze_batch(*args, **kwargs)

        monkeypatch.setattr(overlap, "analyze_batch", spy)
        outputs = list(overlap.computed(model, tokenizer, batches, [0, 1, 2], _settings(ATTENTION)))
        monkeypatch.setattr(overlap, "analyze_batch", analyze_batch)
        assert [output.index for output in outputs] == [0, 1, 2]
        assert any(name.startswith("audit-analyzers") for name in names) is expected


def test_overlapped_outputs_equal_batch_by_batch_ones(model, tokenizer) -> None:
    """Each BatchOutput equals run_batch's, in batch order, and the analyzers ran on the worker thread."""
    examples = _examples(11)
    batches = [examples[i:i + 3] for i in range(0, 11, 3)]
    settings = _settings(ATTENTION)
    threads: set[str] = set()
    analyze_batch = overlap.analyze_batch

    def spy(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return analyze_batch(*args, **kwargs)

    overlap.analyze_batch = spy
    try:
        got = list(overlap.computed(model, tokenizer, batches, [0, 2, 3], settings))
    finally:
        overlap.analyze_batch = analyze_batch
    assert [output.index for output in got] == [0, 2, 3]
    assert threads and all(name.startswith("audit-analyzers") for name in threads)
    for output in got:
        expected = run_batch(model, tokenizer, batches[output.index], output.index, settings)
        assert output.rows == expected.rows
        for mine, theirs in ((output.tokens, expected.tokens), (output.examples, expected.examples)):
            assert mine.keys() == theirs.keys()
            for key in mine:
                assert repr(mine[key]) == repr(theirs[key]), key  # repr: every digit and dtype, NaN == NaN
        assert repr(output.stats) == repr(expected.stats)


@pytest.mark.parametrize(("batch_size", "mode"), [(1, "grad"), (4, "grad"), (4, "no_grad"), (4, "inference_mode")])
def test_overlapped_audit_files_are_byte_identical(model, tokenizer, tmp_path, monkeypatch, batch_size, mode) -> None:
    """Byte-identical files, also when the caller runs the audit under no_grad or inference_mode (thread-local
    modes the worker takes over)."""
    examples = _examples(13)
    caller = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    with caller():
        overlapped = run_audit(model, tokenizer, examples, tmp_path / "overlapped", analyzers=ATTENTION, batch_size=batch_size,
                               options=AuditOptions(part_examples=5))
    monkeypatch.setattr(overlap, "overlappable", lambda plan: False)
    with caller():
        serial = run_audit(model, tokenizer, examples, tmp_path / "serial", analyzers=ATTENTION, batch_size=batch_size,
                           options=AuditOptions(part_examples=5))
    assert _outputs(overlapped.out_dir) == _outputs(serial.out_dir)


def test_an_error_in_a_later_batch_stops_the_audit_and_keeps_the_finished_parts(
    model, tokenizer, tmp_path, monkeypatch
) -> None:
    """A forward pass fails while the worker analyses the previous batch: the error is raised once the worker
    is done, no worker thread is left, and a rerun resumes from the parts stored before it, ending with the
    same files as an audit never interrupted."""
    examples = _examples(10)
    capture_batch = overlap.capture_batch

    def failing(model, tokenizer, batch, index, settings):
        if index == 3:
            raise RuntimeError("the forward pass of batch 3 failed")
        return capture_batch(model, tokenizer, batch, index, settings)

    monkeypatch.setattr(overlap, "capture_batch", failing)
    with pytest.raises(RuntimeError, match="batch 3"):
        run_audit(model, tokenizer, examples, tmp_path / "a", analyzers=ATTENTION, batch_size=2,
                  options=AuditOptions(part_examples=2))
    assert not any(thread.name.startswith("audit-analyzers") for thread in threading.enumerate())
    monkeypatch.setattr(overlap, "capture_batch", capture_batch)
    resumed = run_audit(model, tokenizer, examples, tmp_path / "a", analyzers=ATTENTION, batch_size=2,
                        options=AuditOptions(part_examples=2))
    assert resumed.n_resumed == 4 and resumed.n_computed == 6  # batches 0 and 1 were stored
    whole = run_audit(model, tokenizer, examples, tmp_path / "b", analyzers=ATTENTION, batch_size=2,
                      options=AuditOptions(part_examples=2))
    assert _outputs(resumed.out_dir) == _outputs(whole.out_dir)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_overlapped_audit_of_a_hugging_face_model_is_byte_identical(tmp_path, monkeypatch, implementation) -> None:
    """The Hugging Face capture path (the attention kernel intercepted process-wide while a forward pass is
    recorded) beside the worker's analyzers: every file equals the batch-by-batch audit's."""
    import transformers
    from hf_tiny import tiny_config, word_tokenizer

    import interpret

    torch.manual_seed(0)
    hf_tokenizer = word_tokenizer()
    config = tiny_config("bert", vocab_size=len(hf_tokenizer))
    config.id2label, config.label2id = {0: "negative", 1: "positive"}, {"negative": 0, "positive": 1}
    transformers.BertForSequenceClassification(config).eval().save_pretrained(tmp_path / "model")
    hf_tokenizer.save_pretrained(tmp_path / "model")
    hf_model, hf_tokenizer = interpret.load(tmp_path / "model", attn_implementation=implementation)
    words = "the cat sat on mat a dog saw red blue".split()
    examples = [Example(row=i, text=" ".join(words[(3 * i + j) % len(words)] for j in range(1 + i % 6)),
                        label="positive" if i % 2 else "negative") for i in range(10)]
    kwargs = dict(analyzers=ATTENTION, batch_size=3, options=AuditOptions(part_examples=4))
    overlapped = run_audit(hf_model, hf_tokenizer, examples, tmp_path / "overlapped", **kwargs)
    monkeypatch.setattr(overlap, "ENABLED", False)
    serial = run_audit(hf_model, hf_tokenizer, examples, tmp_path / "serial", **kwargs)
    assert _outputs(overlapped.out_dir) == _outputs(serial.out_dir)
