"""The Ray engine: an audit on Ray Data (a local cluster of 2 CPUs, 2 actors) over 50 examples writes tables
equal to the local engine's (1e-6, same order), also when a Ray audit killed midway (its process, SIGKILL) is run
again; without Ray the option says in one line how to install it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from interpret.audit import AuditOptions, run_audit

ray = pytest.importorskip("ray")

from interpret.audit.engine_ray import RayEngine, RayOptions  # noqa: E402

N_EXAMPLES, BATCH = 50, 4
ANALYZERS = ["rollout", "attention_entropy"]
# Builds the same tiny model and examples in a child process (for the killed run).
SETUP = textwrap.dedent('''
    import torch
    from interpret.reading.datasets import Example
    from interpret.reference import EncoderClassifier, TransformerConfig
    from interpret.reference.vocab import word_tokenizer

    WORDS = "the cat sat on mat a dog saw good bad red blue".split()

    def build():
        tokenizer = word_tokenizer(WORDS, model_max_length=16)
        torch.manual_seed(0)
        config = TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=len(tokenizer),
                                   max_positions=16, n_classes=2)
        model = EncoderClassifier(config).eval()
        examples = [Example(row=i, text=" ".join(WORDS[(7 * i + 3 * j) % len(WORDS)] for j in range(1 + i % 7)),
                            label=f"class {i % 2}") for i in range(50)]
        return model, tokenizer, examples
''')


def _build():
    namespace: dict = {}
    exec(SETUP, namespace)  # the one statement of the model and data, shared with the child process
    return namespace["build"]()


def _tables(result) -> list[pd.DataFrame]:
    return [pd.read_parquet(result.tokens), pd.read_parquet(result.examples), pd.read_csv(result.heads)]


def _assert_equal(left, right) -> None:
    for a, b in zip(_tables(left), _tables(right)):
        assert_frame_equal(a, b, check_exact=False, rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def local_audit(tmp_path_factory):
    model, tokenizer, examples = _build()
    return run_audit(model, tokenizer, examples, tmp_path_factory.mktemp("local") / "audit", analyzers=ANALYZERS,
                     batch_size=BATCH)


def test_a_ray_audit_equals_the_local_engine(local_audit, tmp_path: Path) -> None:
    model, tokenizer, examples = _build()
    engine = RayEngine(RayOptions(workers=2, local_cpus=2))
    result = run_audit(model, tokenizer, examples, tmp_path / "ray", analyzers=ANALYZERS, batch_size=BATCH,
                       options=AuditOptions(engine=engine))
    assert (result.n_computed, result.n_resumed) == (N_EXAMPLES, 0)
    assert len(_tables(result)[1]) == N_EXAMPLES
    _assert_equal(result, local_audit)
    again = run_audit(model, tokenizer, examples, tmp_path / "ray", analyzers=ANALYZERS, batch_size=BATCH,
                      options=AuditOptions(engine=engine))
    assert (again.n_computed, again.n_resumed) == (0, N_EXAMPLES)


def test_a_killed_ray_audit_resumes_to_the_same_tables(local_audit, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    child = textwrap.dedent(f'''
        import time
        from interpret.audit import AuditOptions, run_audit, parts
        from interpret.audit.engine_ray import RayEngine, RayOptions
        {SETUP.strip().replace(chr(10), chr(10) + "        ")}
        model, tokenizer, examples = build()
        real = parts.AuditDir.write_part
        def slow_write(self, *args, **kwargs):  # keeps the run going long enough to be killed midway
            real(self, *args, **kwargs)
            time.sleep(0.5)
        parts.AuditDir.write_part = slow_write
        run_audit(model, tokenizer, examples, {str(out)!r}, analyzers={ANALYZERS!r}, batch_size={BATCH},
                  options=AuditOptions(engine=RayEngine(RayOptions(workers=2, local_cpus=2))))
    ''')
    process = subprocess.Popen([sys.executable, "-c", child], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if len(list(out.glob("parts/*.json"))) >= 2:
                break
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver and the Ray processes it started, all at once
        process.wait()
    assert not (out / "tokens.parquet").exists(), "the run finished before it was killed"
    model, tokenizer, examples = _build()
    resumed = run_audit(model, tokenizer, examples, out, analyzers=ANALYZERS, batch_size=BATCH,
                        options=AuditOptions(engine=RayEngine(RayOptions(workers=2, local_cpus=2))))
    assert resumed.n_resumed > 0 and resumed.n_computed > 0
    _assert_equal(resumed, local_audit)


def test_without_ray_the_engine_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from interpret.errors import ConfigError

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r'pip install "transformer-audit\[ray\]"') as caught:
        RayEngine()
    assert "\n" not in str(caught.value)
