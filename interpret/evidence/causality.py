"""Whether a decoder's self-attention, as the model was loaded and run, reads positions after the query.

A decoder predicts each token from the ones before it; an explanation of a teacher-forced decoder input assumes
it. Not every model as loaded keeps that: TrOCR's decoder computes its attention in its own code and, loaded
with SDPA, gets no causal mask from transformers (it leaves causality to SDPA's `is_causal`, which that code
never calls), so every position also reads the ones after it; a prefix language model reads its whole prefix
both ways by design. The captured patterns are what the model computed, so they tell: the largest share of a
row's weight on later positions of the decoder side's self-attention (`blocks.{i}.attn.hook_pattern` of a
decoder, `decoder.blocks.{i}.attn.hook_pattern` of an encoder-decoder; padding holds no weight), over the
layers the trace holds. Above `LATER_WEIGHT` the report says so in a note, since a prediction there can read
the tokens it is predicted before.
"""

from __future__ import annotations

from interpret.analysis.lead import Note
from interpret.trace import Trace

LATER_WEIGHT = 1e-4  # float32 rounding of a masked softmax leaves far less on a masked key (exp(-inf) is 0)
TITLE = "Attention to later positions"


def later_weight(trace: Trace) -> tuple[float, int | None]:
    """Return (the largest share of a row's weight on later positions in the decoder side's self-attention, the
    layer where it is); (0.0, None) when no row puts weight there, and for a trace with no decoder side or none of
    its self-attention patterns."""
    prefix = {"decoder": "", "encoder-decoder": "decoder."}.get(trace.meta.kind)
    if prefix is None:
        return 0.0, None
    worst, where = 0.0, None
    for layer in trace.layers("attn.hook_pattern", prefix):
        pattern = trace[f"{prefix}blocks.{layer}.attn.hook_pattern"]  # [batch, head, query, key]
        later = float(pattern.float().triu(1).sum(-1).max())  # each row's weight on keys after its query
        if later > worst:
            worst, where = later, layer
    return worst, where


def later_positions_note(trace: Trace) -> Note | None:
    """Return the report's note when the decoder side's self-attention reads later positions, else None."""
    worst, layer = later_weight(trace)
    if layer is None or worst <= LATER_WEIGHT:
        return None
    side = "the decoder's" if trace.meta.kind == "encoder-decoder" else "the model's"
    return (TITLE, f"{side} self-attention puts up to {worst:.1%} of a position's weight on later positions (layer"
                   f" {layer}): as loaded, it is not causal, so a prediction can read the tokens after it. A prefix"
                   " language model does so by design; a model meant to be causal may have been loaded with an"
                   " attention implementation that drops its causal mask (TrOCR with SDPA): try"
                   " attn_implementation=\"eager\".")
