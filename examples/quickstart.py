"""Quick start: train the known-answer toy model, collect its attention, and print what was captured."""

import interpret
from interpret.reference.toy import marker_task

model, tokenizer = marker_task()  # a tiny reference classifier, its trained weights shipped with the package
trace = interpret.collect(model, tokenizer, ["the cat sat on the mat", "a dog saw the ! marker"])
pattern = trace.stack("attn.hook_pattern")
print(f"captured {len(trace)} tensors; pattern [batch, layer, head, query, key] = {list(pattern.shape)}")
print(f"row sums over key (real tokens): {pattern.sum(-1)[0, 0, 0, :5].tolist()}")
