"""Hugging Face models: the generic adapter that reads any model's structure from one probe pass, family
adapters for real quirks (found through the entry-point group `interpret.adapters`), the true attention
pattern under any kernel, and the catalog of what every model type offers.

`registry.hf_capturable(model, tokenizer)` is what `interpret.collect` calls; `catalog.catalog()` is what
`interpret models` prints. Per-head gates, which serve the reference model too, live in
`interpret.capture.gates`.
"""
