"""Head importance and pruning on MiniLM-L6 (the default model: its sentiment head is the decision), 128 tokens
per example (held-out sentences joined and cut to exactly 128 tokens, so no padding).

Table 1, the importance pass (Σ_x |∂L(x)/∂ξ| / N_tokens, loss = cross-entropy against the gold labels):

    ours, batch 1     interpret.heads.dataset.dataset_importance on batches of one example
    ours, batch 32    the same on batches of 32, every example with gates of its own
    bertology loop    a plain PyTorch loop of one example at a time as run_bertology.py runs it: one shared
                      gate tensor, loss.backward(), |grad| added (gradient zeroed between examples, which the
                      script forgets: with it, the numbers would not be comparable at all)
    examples/s        examples per second (min and median over --repeat runs); vs loop: our median time / the loop's
    max |Δ|           the largest difference of the importance from the loop's (goal: 1e-6)
    peak MiB          peak memory added by one run

Table 2, forward speed-up with 50% of the heads pruned (the least important half by the importance above),
batches of 1 and of 32 × 128 tokens, no gradient; the three models' repeats interleaved (one forward of each
in turn), min and median over --forward-repeat rounds:

    unpruned          the model as loaded
    zeroed            `prune_heads(...)`: BERT cannot store fewer heads in transformers 5, so the written model
                      keeps every head with the pruned ones' output columns zeroed (what --prune-to saves)
    removed           `prune_heads(..., in_memory=True)`: smaller projections swapped in (not saveable)
    speed-up          the unpruned model's time / this model's (best against best, median against median)
    max |Δ|           hidden states against the gated unpruned model

    python benchmarks/heads.py [--examples 64] [--repeat 3] [--forward-repeat 10] [--forward-only] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import mib, peak_bytes, table  # noqa: E402

from interpret.capture.gates import head_gates  # noqa: E402
from interpret.data import heldout_examples  # noqa: E402
from interpret.heads.dataset import HeadData, dataset_importance  # noqa: E402
from interpret.heads.importance import ranked  # noqa: E402
from interpret.heads.scoring import GatedModel  # noqa: E402
from interpret.heads.surgery import count_parameters, prune_heads  # noqa: E402
from interpret.inputs import encode  # noqa: E402
from interpret.models.default_model import LABELS, load_default  # noqa: E402

LENGTH = 128


def examples(n: int) -> tuple[list[str], list[int]]:
    """Return n texts of at least LENGTH tokens (several held-out sentences joined) and their labels."""
    rows = heldout_examples()
    texts, labels = [], []
    for i in range(n):
        joined = " ".join(rows[(i + j) % len(rows)]["text"] for j in range(16))
        texts.append(joined)
        labels.append(LABELS.index(rows[i % len(rows)]["label"]))
    return texts, labels


def timed(fn, repeat: int) -> tuple[float, float, object]:
    """Return (min, median) seconds of fn() over `repeat` runs, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def bertology_loop(model, head, batches, labels, shape, device) -> torch.Tensor:
    """Return Σ_x |∂L(x)/∂ξ| / N_tokens from a plain loop of single examples sharing one gate tensor."""
    gates = torch.ones(shape, device=device, requires_grad=True)
    total = torch.zeros(shape, dtype=torch.float64)
    tokens = 0
    for batch, label in zip(batches, labels, strict=True):
        with head_gates(model, gates):
            hidden = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        loss = F.cross_entropy(head(hidden, batch.attention_mask), label.to(device))
        loss.backward()
        total += gates.grad.detach().abs().to("cpu", torch.float64)
        gates.grad = None
        tokens += int(batch.attention_mask.sum())
    return total / tokens


def forward_table(model, tokenizer, texts: list[str], importance: torch.Tensor, args) -> None:
    """Print table 2: forward time of the unpruned, zeroed and removed models at batch 1 and 32, the models'
    repeats interleaved (one forward of each in turn, `--forward-repeat` rounds) so load on the machine hits all
    of them alike; min and median per model and batch size."""
    device = torch.device(args.device)
    order = ranked(importance)  # most important first
    half = torch.ones(importance.shape)
    for layer, index, _ in order[len(order) // 2:]:
        half[layer, index] = 0.0
    removed = prune_heads(model, half, in_memory=True)
    assert removed.removed, removed.note
    variants = {"unpruned": model, "zeroed (saved)": prune_heads(model, half).model, "removed (in memory)": removed.model}
    rows = []
    for size in (1, 32):
        batch = encode(tokenizer, texts[:size], max_length=LENGTH).to(device)
        assert batch.input_ids.shape == (size, LENGTH)
        with torch.no_grad(), head_gates(model, half):
            gated_hidden = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state

        def forward(variant, batch=batch):
            with torch.no_grad():
                return variant(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state

        times: dict[str, list[float]] = {name: [] for name in variants}
        hidden: dict[str, torch.Tensor] = {}
        for name, variant in variants.items():  # warm-up, and the outputs to compare
            hidden[name] = forward(variant)
        for _ in range(args.forward_repeat):
            for name, variant in variants.items():
                low, _, _ = timed(lambda variant=variant: forward(variant), 1)
                times[name].append(low)
        base = statistics.median(times["unpruned"])
        base_low = min(times["unpruned"])
        for name, variant in variants.items():
            median, low = statistics.median(times[name]), min(times[name])
            delta = "" if name == "unpruned" else f"{float((hidden[name] - gated_hidden).abs().max()):.2e}"
            rows.append((str(size), name, f"{count_parameters(variant):,}", f"{1000 * low:.2f}", f"{1000 * median:.2f}",
                         f"{base_low / low:.2f}x", f"{base / median:.2f}x", delta))
    kept = ",".join(str(int(row.sum())) for row in half)
    print()
    print(f"Forward, MiniLM-L6, batch x {LENGTH} tokens, {int((half == 0).sum())} of {half.numel()} heads pruned"
          f" (least important half; heads kept per layer {kept}), {args.device}, {args.forward_repeat} interleaved"
          f" repeats (torch threads {torch.get_num_threads()}; machine shared with other jobs)")
    print(table(["batch", "model", "parameters", "ms (best)", "ms (median)", "speed-up (best)", "speed-up (median)",
                 "max |Δ| vs gated"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--forward-repeat", type=int, default=10, help="Timed forwards per model and batch size.")
    parser.add_argument("--forward-only", action="store_true", help="Only table 2 (one importance pass for the mask).")
    args = parser.parse_args()
    device = torch.device(args.device)
    model, tokenizer, head = load_default(args.device)
    model, head = model.to(device).eval(), head.to(device).eval()
    texts, labels = examples(args.examples)
    singles = [encode(tokenizer, [text], max_length=LENGTH).to(device) for text in texts]
    assert all(batch.input_ids.shape[1] == LENGTH for batch in singles)
    label_rows = [torch.tensor([label]) for label in labels]
    gated = GatedModel.of(model, tokenizer, singles[0], head)
    shape = gated.gate_shape
    mask = torch.ones(shape)

    def ours(batch_size: int):
        batches = [encode(tokenizer, texts[i:i + batch_size], max_length=LENGTH).to(device)
                   for i in range(0, len(texts), batch_size)]
        split = [torch.tensor(labels[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
        data = HeadData(tuple(batches), tuple(split), "labels")
        return lambda: dataset_importance(gated, data, mask).raw

    runs = {
        "bertology loop": lambda: bertology_loop(model, head, singles, label_rows, shape, device),
        "ours, batch 1": ours(1),
        "ours, batch 32": ours(32),
    }
    if args.forward_only:
        forward_table(model, tokenizer, texts, runs["ours, batch 32"](), args)
        return
    measured = {name: timed(fn, args.repeat) for name, fn in runs.items()}
    loop_result = measured["bertology loop"][2]
    loop_median = measured["bertology loop"][1]
    rows = []
    for name, (low, median, result) in measured.items():
        peak = peak_bytes(runs[name], args.device)
        delta = float((result - loop_result).abs().max())
        rows.append((name, f"{args.examples / median:.1f}", f"{args.examples / low:.1f}", f"{loop_median / median:.2f}x",
                     f"{delta:.2e}", mib(peak)))
    print(f"Importance pass, MiniLM-L6, {args.examples} examples x {LENGTH} tokens, {args.device}, {args.repeat} repeats"
          f" (torch threads {torch.get_num_threads()}; machine shared with other jobs)")
    print(table(["run", "examples/s (median)", "examples/s (best)", "vs loop", "max |Δ| vs loop", "peak MiB"], rows))

    forward_table(model, tokenizer, texts, measured["ours, batch 32"][2], args)


if __name__ == "__main__":
    main()
