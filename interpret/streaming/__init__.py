"""Streaming readouts for long inputs: rollout, attention × gradient and gradient-weighted rollout of the
decision's readout rows in O(n·d) memory per layer, never holding a [layer, head, n, n] tensor.

`pattern` rebuilds blocks of query rows of a layer's pattern from its queries and keys; `readout` carries the
readout row backwards through the layers; `capture` gathers the per-layer tensors from a trace or, with
gradients, from one autograd pass of the model. The streamed computations of `rollout`,
`attention_x_gradient`, `gradient_weighted_rollout` and `attention_entropy` (plugins/) wrap them; the planning
rule of a streamed run is `interpret.analysis.strategy` (`interpret.estimate.report.streamed_estimate` sizes one
before torch is imported; this package imports nothing itself: import the submodules).
"""
