"""Hugging Face models: adapters per architecture family (found through the entry-point group
`interpret.adapters`) and the true attention pattern under any kernel.

`registry.hf_capturable(model, tokenizer)` is what `interpret.collect` calls. Per-head gates, which serve
the reference model too, live in `interpret.collect.gates`.
"""
