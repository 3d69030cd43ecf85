"""Hugging Face models: the generic adapter that reads any model's structure from one probe pass, family
adapters for real quirks (found through the entry-point group `interpret.adapters`), the true attention
pattern under any kernel, per-head gates, and the catalog of what every model type offers.

`registry.hf_capturable(model, tokenizer)` is what `interpret.collect` calls; `gates.head_gates` scales
heads for pruning-style analyses; `catalog.catalog()` is what `interpret models` prints.
"""

from interpret.collect.hf.gates import head_gates

__all__ = ["head_gates"]
