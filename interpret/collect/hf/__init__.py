"""Hugging Face models: adapters per architecture family (found through the entry-point group
`interpret.adapters`), the true attention pattern under any kernel, and per-head gates.

`registry.hf_capturable(model, tokenizer)` is what `interpret.collect` calls; `gates.head_gates` scales
heads for pruning-style analyses.
"""

from interpret.collect.hf.gates import head_gates

__all__ = ["head_gates"]
