"""Gradient and perturbation analyzers on the default model (MiniLM-L6 with its sentiment head), CPU.

Table 1, for inputs of 32 and 128 tokens (real English text repeated and cut), one example, timed on --clock:
this process's CPU time by default (one torch thread, so other jobs on a shared machine do not inflate it;
wall-clock ratios measured while the machine was loaded by other jobs were off by up to 2×):
    forward         one forward pass of the model and head (the unit of the other columns)
    method rows     each analyzer's time per example as a multiple of one forward (min and median of --repeat),
                    and how much its run grew the resident set (MiB; 0 when it reused memory freed earlier)
                    integrated_gradients@ibs50 is the same with internal_batch_size=50 (every step in one pass)
                    instead of the default memory-bounded chunking (memory_mb=1024)
    Captum LIG      Captum's LayerIntegratedGradients called directly (50 steps) with internal_batch_size 1 and
                    50; "ours / Captum best" is integrated_gradients (50 steps) over the faster of the two
                    (goal ≤ 1.1); gradient_weighted_rollout (goal ≤ 3) and attnlrp (one backward pass with its
                    rules: the reference is a plain forward + backward) are also given over one forward + backward

Table 2, ERASER (DeYoung et al. 2020, sec. 4) on the first --sentences held-out sentences shipped with the
package: for each method's ranking of the non-special tokens (signed scores ranked highest first),
    comprehensiveness  p(ŷ | x) − p(ŷ | x without the top k% tokens)       (higher is better)
    sufficiency        p(ŷ | x) − p(ŷ | only the top k% tokens)            (lower is better)
each averaged over k ∈ {1, 5, 10, 20, 50}% (AOPC; ⌈k·n/100⌉ of the n tokens, at least one, and ties ranked
by position: `top_count` and `order_of` of interpret.evidence) and over sentences, with ŷ the prediction on x
and tokens deleted (the sequence shortened, [CLS] and [SEP] kept). "beats random" is the share of sentences
whose comprehensiveness exceeds that of a seeded random ranking of the same sentence.

    python benchmarks/gradients.py [--repeat 3] [--sentences 80] [--skip-timing] [--skip-eraser] [--clock cpu|wall]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import peak_bytes  # noqa: E402

import interpret  # noqa: E402
from interpret.analysis.run import run_context  # noqa: E402
from interpret.evidence.metrics import BINS, top_count  # noqa: E402
from interpret.evidence.ranking import order_of  # noqa: E402
from interpret.models.default_model import load_default  # noqa: E402

METHODS = {
    "integrated_gradients": {"steps": 50},
    "integrated_gradients@ibs50": {"steps": 50, "internal_batch_size": 50},
    "saliency": {},
    "input_x_gradient": {},
    "attnlrp": {},
    "gradient_shap": {"n_samples": 20},
    "feature_ablation": {},
    "lime": {"n_samples": 200},
    "kernel_shap": {"n_samples": 200},
    "attention_x_gradient": {},
    "gradient_weighted_rollout": {},
}
ERASER_EXTRA = {"rollout": {}}
TEXT = ("The film moves slowly at first, but the acting is honest and the ending is calm and moving. "
        "The soup was cold, the service was slow and nobody said sorry. ")


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
CLOCK = "cpu"


def _times(fn, repeat: int) -> tuple[float, float]:
    """Return (min, median) seconds of `repeat` calls after a warm-up, on the --clock chosen."""
    clock = CLOCKS[CLOCK]
    fn()  # warm-up
    values = []
    for _ in range(repeat):
        start = clock()
        fn()
        values.append(clock() - start)
    return min(values), statistics.median(values)


def _text_of(tokenizer, n: int) -> str:
    """Return a text of exactly n tokens ([CLS] and [SEP] included)."""
    ids = tokenizer(TEXT * 20, add_special_tokens=False)["input_ids"][: n - 2]
    return tokenizer.decode(ids)


def timing(model, tokenizer, head, repeat: int) -> None:
    from captum.attr import LayerIntegratedGradients

    print(f"Table 1: {CLOCK} time per example as a multiple of one forward pass (MiniLM-L6 + head, CPU, float32,"
          f" 1 thread; min / median of {repeat})")
    print(f"{'method':<28}{'n=32 min':>10}{'n=32 med':>10}{'MiB':>7}{'n=128 min':>11}{'n=128 med':>11}{'MiB':>7}")
    rows: dict[str, list[str]] = {}
    summary = {}
    for n in (32, 128):
        text = _text_of(tokenizer, n)
        trace = interpret.collect(model, tokenizer, [text], names=["*attn.hook_pattern"])
        assert trace.encoded.pos == n, trace.encoded.pos
        ids, mask = trace.encoded.input_ids, trace.encoded.attention_mask

        def forward_once():
            with torch.no_grad():
                return head(model(input_ids=ids, attention_mask=mask).last_hidden_state, mask)

        target = int(forward_once().argmax(-1))

        def forward_backward():
            embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
            score = head(model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state, mask)[0, target]
            score.backward()

        unit, unit_median = _times(forward_once, repeat)
        fb, fb_median = _times(forward_backward, repeat)
        rows.setdefault("forward (seconds)", []).extend([f"{unit:.4f}", f"{unit_median:.4f}", ""])
        rows.setdefault("forward + backward", []).extend([f"{fb / unit:.2f}", f"{fb_median / unit_median:.2f}", ""])
        ctx = run_context(trace, model, tokenizer, head=head)
        for name, params in METHODS.items():
            def run(name=name.split("@")[0], params=params):
                return interpret.analyze(trace, name, params=params, context=ctx)

            low, mid = _times(run, repeat)
            peak = peak_bytes(run)
            rows.setdefault(name, []).extend([f"{low / unit:.1f}", f"{mid / unit:.1f}", f"{(peak or 0) / 2**20:.0f}"])
            summary[(name, n)] = low
        pad = tokenizer.pad_token_id
        special = trace.encoded.special.bool()
        baseline = torch.where(special, ids, torch.full_like(ids, pad))

        def plain(input_ids, attention_mask):
            return head(model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, attention_mask)[:, target]

        for chunk in (1, 50):
            lig = LayerIntegratedGradients(plain, model.get_input_embeddings())

            def captum(chunk=chunk, lig=lig):
                return lig.attribute(ids, baselines=baseline, additional_forward_args=(mask,), n_steps=50,
                                     internal_batch_size=chunk, return_convergence_delta=True)

            low, mid = _times(captum, repeat)
            rows.setdefault(f"Captum LIG ibs={chunk}", []).extend([f"{low / unit:.1f}", f"{mid / unit:.1f}", ""])
            summary[(f"captum{chunk}", n)] = low
        best = min(summary[("captum1", n)], summary[("captum50", n)])
        rows.setdefault("ours IG / Captum best", []).extend([f"{summary[('integrated_gradients', n)] / best:.2f}", "", ""])
        for name, label in (("gradient_weighted_rollout", "grad rollout"), ("attnlrp", "attnlrp")):
            rows.setdefault(f"{label} / (fwd+bwd)", []).extend([f"{summary[(name, n)] / fb:.2f}", "", ""])
    for name, cells in rows.items():
        print(f"{name:<28}{cells[0]:>10}{cells[1]:>10}{cells[2]:>7}{cells[3]:>11}{cells[4]:>11}{cells[5]:>7}")


def _sentences(count: int) -> list[str]:
    lines = resources.files("interpret.data").joinpath("sentiment_heldout.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()][:count]


def eraser(model, tokenizer, head, count: int) -> None:
    texts = _sentences(count)
    trace = interpret.collect(model, tokenizer, texts, names=["*attn.hook_pattern"])
    ctx = run_context(trace, model, tokenizer, head=head)
    predicted = [t.ids[0] for t in ctx.targets]

    def prob(id_lists: list[list[int]], b: int) -> np.ndarray:
        width = max(len(ids) for ids in id_lists)
        ids = torch.full((len(id_lists), width), tokenizer.pad_token_id)
        mask = torch.zeros((len(id_lists), width), dtype=torch.long)
        for row, values in enumerate(id_lists):
            ids[row, : len(values)] = torch.tensor(values)
            mask[row, : len(values)] = 1
        with torch.no_grad():
            logits = head(model(input_ids=ids, attention_mask=mask).last_hidden_state, mask)
        return logits.softmax(-1)[:, predicted[b]].numpy()

    def content(b: int) -> np.ndarray:
        real = int(trace.encoded.attention_mask[b].sum())
        return np.asarray([p for p in range(real) if not bool(trace.encoded.special[b, p])])

    def scores(order: np.ndarray, b: int) -> tuple[float, float]:
        """AOPC comprehensiveness and sufficiency of one sentence's ranking (content positions, most relevant first)."""
        real = int(trace.encoded.attention_mask[b].sum())
        ids = trace.encoded.input_ids[b, :real].tolist()
        deleted, kept = [], []
        for fraction in BINS:
            top = set(order[: top_count(fraction, len(order))].tolist())
            deleted.append([ids[p] for p in range(real) if p not in top])
            kept.append([ids[p] for p in range(real) if p in top or bool(trace.encoded.special[b, p])])
        full = prob([ids], b)[0]
        return float(np.mean(full - prob(deleted, b))), float(np.mean(full - prob(kept, b)))

    generator = np.random.default_rng(0)
    random_scores = []
    for b in range(len(texts)):
        random_scores.append(scores(generator.permutation(content(b)), b))
    print(f"\nTable 2: ERASER on {len(texts)} held-out sentences (AOPC over {', '.join(f'{b:.0%}' for b in BINS)}; tokens deleted)")
    print(f"{'method':<28}{'comprehensiveness':>19}{'sufficiency':>13}{'beats random':>14}{'seconds':>9}")
    rand = np.array(random_scores)
    print(f"{'random (seed 0)':<28}{rand[:, 0].mean():>19.3f}{rand[:, 1].mean():>13.3f}{'':>14}{'':>9}")
    for name, params in {**METHODS, **ERASER_EXTRA}.items():
        if "@" in name:
            continue
        start = time.perf_counter()
        readout = _readout_in_batches(model, tokenizer, head, texts, name, params)
        seconds = time.perf_counter() - start
        results = [scores(order_of(readout[b], content(b)), b) for b in range(len(texts))]
        array = np.array(results)
        beats = float(np.mean(array[:, 0] > rand[:, 0]))
        print(f"{name:<28}{array[:, 0].mean():>19.3f}{array[:, 1].mean():>13.3f}{beats:>14.0%}{seconds:>9.1f}")


def _readout_in_batches(model, tokenizer, head, texts: list[str], name: str, params: dict) -> list[np.ndarray]:
    """Return each sentence's readout [pos] (its own padding length), batches of 16 sentences."""
    out: list[np.ndarray] = []
    for start in range(0, len(texts), 16):
        chunk = texts[start: start + 16]
        trace = interpret.collect(model, tokenizer, chunk, names=["*attn.hook_pattern"])
        result = interpret.analyze(trace, name, model=model, tokenizer=tokenizer, head=head, params=params)
        out.extend(result.readout[b] for b in range(len(chunk)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=80)
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-eraser", action="store_true")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: this process's CPU time (default; with one thread it does not count the time other"
                             " jobs take the core, so ratios hold on a shared machine); wall: elapsed time")
    args = parser.parse_args()
    global CLOCK
    CLOCK = args.clock
    torch.set_num_threads(1)
    model, tokenizer, head = load_default("cpu")
    if not args.skip_timing:
        timing(model, tokenizer, head, args.repeat)
    if not args.skip_eraser:
        eraser(model, tokenizer, head, args.sentences)


if __name__ == "__main__":
    main()
