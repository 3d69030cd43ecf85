"""The decomposition analyzers on the default model (MiniLM-L6 with its mean-pooled sentiment head, float32,
CPU): time and peak memory per method at each length, against one forward pass and against a plain PyTorch
statement of the paper's formula written here from the Hugging Face modules (vectorised, no interpret code).

Columns:
    method          the analyzer (norm_attention of the last layer, globenc, alti, value_zeroing)
    n               tokens (real English text cut to n)
    analyzer min/median s   interpret.analyze on a trace that holds what the method requires
    × forward       analyzer median / one forward pass of the model at n (no capture)
    statement median s      the plain statement (same formula, same weights)
    × statement     analyzer median / statement median
    peak MiB        peak resident memory one analyzer call adds, measured in a fresh process after a warm-up
                    call (VmHWM above the resident set before the call); statement peak MiB likewise
    max |Δ|         the analyzer's readout against the statement's (float32 model)

    python benchmarks/decomposition.py [--lengths 32 128] [--repeat 3] [--methods alti ...]
    (child mode, used by the script itself: --child analyzer|statement|forward METHOD N prints one peak)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import mib, peak_bytes, peak_in_fresh_process, table, timings  # noqa: E402
from flow import TEXT  # noqa: E402

import interpret  # noqa: E402
from interpret.models.default_model import load_default  # noqa: E402
from interpret.plugins.alti import STREAM  # noqa: E402

METHODS = ("norm_attention", "globenc", "alti", "value_zeroing")


def _times(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Return (min, median) wall seconds of `fn()` over `repeat` runs after one warm-up."""
    runs = timings(fn, repeat)
    return min(runs), statistics.median(runs)


def _heads(layer: Any, x: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return q, k, v [head, n, d_head] of a BertLayer on x [n, d_model]."""
    attn = layer.attention.self
    n, d_model = x.shape
    return tuple(t(x).view(n, heads, d_model // heads).transpose(0, 1) for t in (attn.query, attn.key, attn.value))


def _pattern(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)


def _transformed(layer: Any, v: torch.Tensor) -> torch.Tensor:
    """f^h(x_j) = v^h_j W_O^h [head, n, d_model]."""
    heads, _, d_head = v.shape
    w_out = layer.attention.output.dense.weight.T.reshape(heads, d_head, -1)
    return torch.einsum("hjv,hvd->hjd", v, w_out)


def _linear_norm(parts: torch.Tensor, norm: Any, pre: torch.Tensor) -> torch.Tensor:
    """γ ⊙ (parts − mean) / sqrt(var(pre) + ε), pre [n, d_model] broadcast over the key axis of parts [n, n, d]."""
    scale = torch.sqrt(pre.var(-1, unbiased=False, keepdim=True) + norm.eps)[:, None]
    return norm.weight * (parts - parts.mean(-1, keepdim=True)) / scale


@torch.no_grad()
def statement(model: Any, ids: torch.Tensor, method: str) -> np.ndarray:
    """Return the method's readout [n] (mean over every position, as the default head pools) in plain PyTorch."""
    heads = model.config.num_attention_heads
    hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    n = ids.shape[1]
    layers = model.encoder.layer
    if method == "norm_attention":
        layer, x = layers[-1], hidden[-2][0]
        q, k, v = _heads(layer, x, heads)
        fused = torch.einsum("hij,hjd->ijd", _pattern(q, k), _transformed(layer, v)).norm(dim=-1)
        return (fused / fused.sum(-1, keepdim=True)).mean(0).numpy()
    rollout = torch.eye(n)
    for index, layer in enumerate(layers):
        x = hidden[index][0]
        if method == "value_zeroing":
            matrix = _value_zeroing_layer(layer, x, heads)
        else:
            q, k, v = _heads(layer, x, heads)
            parts = torch.einsum("hij,hjd->ijd", _pattern(q, k), _transformed(layer, v)) + torch.diag_embed(x.T).permute(1, 2, 0)
            pre = parts.sum(1) + layer.attention.output.dense.bias
            norm1 = layer.attention.output.LayerNorm
            parts = _linear_norm(parts, norm1, pre)
            if method == "alti":
                out = norm1(pre)
                matrix = (out.abs().sum(-1, keepdim=True) - (out[:, None] - parts).abs().sum(-1)).clamp(min=0)
            else:  # globenc
                z = norm1(pre)
                closing_input = z + layer.output.dense(layer.intermediate(z))
                matrix = _linear_norm(parts, layer.output.LayerNorm, closing_input).norm(dim=-1)
        rollout = (matrix / matrix.sum(-1, keepdim=True)) @ rollout
    return rollout.mean(0).numpy()


def _value_zeroing_layer(layer: Any, x: torch.Tensor, heads: int) -> torch.Tensor:
    """1 − cos(block output with v_j = 0, the real output) [n, n], all j at once (row j of the batch zeroes j)."""
    n, d_model = x.shape
    q, k, v = _heads(layer, x, heads)
    pattern = _pattern(q, k)  # [head, n, n]
    zeroed = v[None].repeat(n + 1, 1, 1, 1)  # [n + 1, head, n, d_head]; the last copy zeroes nothing
    zeroed[torch.arange(n), :, torch.arange(n)] = 0.0
    context = (pattern[None] @ zeroed).transpose(1, 2).reshape(n + 1, n, d_model)
    h = layer.attention.output.LayerNorm(layer.attention.output.dense(context) + x)
    out = layer.output.LayerNorm(layer.output.dense(layer.intermediate(h)) + h)
    out = out.double()  # 1 − cos of near-equal vectors cancels: float32 keeps only ~1e-3 of these distances
    cosine = torch.nn.functional.cosine_similarity(out[:n], out[n][None], dim=-1)  # [j, i]
    return (1.0 - cosine).T.clamp(min=0).float()


def _setup(n: int) -> tuple[Any, Any, Any, torch.Tensor, Any]:
    """Return (model, tokenizer, head, ids [1, n], trace holding what every method requires) at length n."""
    model, tokenizer, head = load_default("cpu")
    ids = tokenizer(TEXT * (n // 40 + 2), truncation=True, max_length=n, return_tensors="pt")["input_ids"]
    assert ids.shape[1] == n, f"the text gives fewer than {n} tokens"
    return model, tokenizer, head, ids, interpret.collect(model, tokenizer, ids, names=list(STREAM))


def _child(kind: str, method: str, n: int) -> None:
    """Print the peak bytes of one call of `kind` (after a warm-up call), for peak_in_fresh_process."""
    torch.set_num_threads(1)
    model, tokenizer, head, ids, trace = _setup(n)
    calls = {
        "analyzer": lambda: interpret.analyze(trace, method, model=model, tokenizer=tokenizer, head=head),
        "statement": lambda: statement(model, ids, method),
        "forward": lambda: model(input_ids=ids),
    }
    with torch.no_grad() if kind == "forward" else torch.enable_grad():
        calls[kind]()
        peak = peak_bytes(calls[kind])
    print("n/a" if peak is None else peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--child", nargs=3, metavar=("KIND", "METHOD", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], int(args.child[2]))
        return
    torch.set_num_threads(1)  # a shared machine: one thread for every row, so ratios compare like with like
    script = str(Path(__file__).resolve())
    rows = []
    for n in args.lengths:
        model, tokenizer, head, ids, trace = _setup(n)
        with torch.no_grad():
            forward = _times(lambda: model(input_ids=ids), args.repeat)[1]
        for method in args.methods:
            run = lambda: interpret.analyze(trace, method, model=model, tokenizer=tokenizer, head=head)  # noqa: E731
            lo, med = _times(run, args.repeat)
            reference = lambda: statement(model, ids, method)  # noqa: E731
            ref_med = _times(reference, args.repeat)[1]
            peak = peak_in_fresh_process(script, ["--child", "analyzer", method, str(n)])
            ref_peak = peak_in_fresh_process(script, ["--child", "statement", method, str(n)])
            delta = float(np.abs(run()["readout"][0] - reference()).max())
            rows.append((method, n, f"{lo:.3f}", f"{med:.3f}", f"{med / forward:.1f}", f"{ref_med:.3f}",
                         f"{med / ref_med:.2f}", mib(peak), mib(ref_peak), f"{delta:.1e}"))
            print(rows[-1], file=sys.stderr, flush=True)
        forward_peak = peak_in_fresh_process(script, ["--child", "forward", "-", str(n)])
        rows.append(("one forward", n, "", f"{forward:.4f}", "1.0", "", "", mib(forward_peak), "", ""))
    print(table(("method", "n", "analyzer min s", "analyzer median s", "× forward", "statement median s",
                 "× statement", "peak MiB", "statement peak MiB", "max |Δ|"), rows))


if __name__ == "__main__":
    main()
