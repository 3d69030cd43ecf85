"""ALTI-Logit (Ferrando, Gállego, Tsiamas & Costa-jussà 2023, "Explaining How Transformers Use Context to
Build Predictions", ACL): how much each input token moves a language model's next-token logit (or the logit
difference to a contrast token), through every layer's attention and the mixing before it.

For the target position p (the row whose logits score token w) and each layer l (x^l = its input):

    Δ^l_j  = L(Σ_h α^{h,l}_pj f^{h,l}(x^l_j)) · (U_w − U_c)          the attention's update of p from token j
             L(v) = γ_f ⊙ (v − mean(v)) / sqrt(var(x^L_p) + ε_f)      the final LayerNorm's linear part, with
                                                                      the deviation of its real input x^L_p
                    (RMSNorm: γ_f ⊙ v / sqrt(mean((x^L_p)²) + ε_f))
    ALTI-Logit_k = Σ_l Σ_j Δ^l_j · R^l[j, k],    R^l = C_{l−1} · … · C_0 (R^0 = I)

U the unembedding rows (U_c the contrast's, or 0), C_l ALTI's contribution matrices (`_contributions`):
the update that layer l's attention writes from x^l_j is traced back to the input tokens through ALTI's
mixing of the layers below. Several target steps (a continuation) sum. Signed.

Arrays (batch first; padding zero):
    readout   [batch, key]         ALTI-Logit of each input token (signed).
    per_layer [batch, layer, key]  the part of the readout from each layer's attention.
Check `logit_error`: the final norm's linearisation and the unembedding reproduce the model's own logit
(difference) at p; `decomposition_error` as ALTI's. Decoders (language models) whose final norm is a LayerNorm
(GPT-2) or an RMSNorm (Llama, Qwen2, Mistral); not classifier heads (the decision must be token targets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from interpret.analysis import AnalyzerResult, Check, NamedArray, Readout, RunContext, View
from interpret.arrays import to_numpy
from interpret.errors import AnalyzerError
from interpret.plugins import _attention, _contributions, _decompose, rollout_math
from interpret.plugins.alti import STREAM
from interpret.trace import Trace


@dataclass(frozen=True)
class AltiLogitParams:
    """ALTI-Logit takes no parameters: the target (and contrast) come from the decision."""


class AltiLogit:
    """ALTI-Logit: each input token's share of the next-token logit through attention and ALTI's mixing."""

    name = "alti_logit"
    summary = "ALTI-Logit (Ferrando et al. 2023): input tokens' share of a language model's next-token logit."
    version = "1.0"
    requires = STREAM
    needs_model = True
    provides = ("readout",)
    Params = AltiLogitParams

    def run(self, trace: Trace, params: AltiLogitParams, ctx: RunContext) -> AnalyzerResult:
        """Return ALTI-Logit's readout and per-layer parts (arrays as the module docstring lists)."""
        if trace.meta.kind != "decoder":
            raise AnalyzerError(f"{self.name} explains a language model's next-token logits; this is a {trace.meta.kind} model (use alti).")
        parts = _decompose.block_parts(ctx, trace, self.name)
        final = _decompose.final_norm(ctx, self.name)
        unembed = ctx.model.get_output_embeddings()
        if unembed is None or not isinstance(getattr(unembed, "weight", None), torch.Tensor):
            raise AnalyzerError(f"{self.name}: {type(ctx.model).__name__} has no output embedding (load it with its LM head).")
        weight = unembed.weight.detach().double().cpu()  # [vocab, d_model]
        bias = getattr(unembed, "bias", None)
        batch, pos = trace.encoded.batch, trace.encoded.pos
        readout, per_layer = np.zeros((batch, pos)), np.zeros((batch, len(parts), pos))
        logits = getattr(trace.output, "logits", None)  # the captured pass's [batch, pos, vocab]
        if logits is None:
            raise AnalyzerError("alti_logit needs the model's logits in the trace; collect with the LM head loaded.")
        logits = logits.detach().double().cpu()
        logit_error = split_error = 0.0
        for b, positions, layers in _decompose.example_layers(trace, parts):
            target = _attention.target_of(ctx.targets, b)
            if target is None or target.kind != "token":
                raise AnalyzerError(f"{self.name} explains token targets; example {b}'s decision is {getattr(target, 'kind', 'none')}.")
            matrices, errors = _contributions.layer_matrices(layers, parts, "alti")
            split_error = max(split_error, *errors)
            reach = rollout_math.cumulative(np.stack(matrices), 1)[:-1]  # R^l = C_{l−1} · … · C_0 [layer, n, n], R^0 = I
            for step, (position, token) in enumerate(zip(target.positions, target.ids)):
                row = int(np.flatnonzero(positions == position)[0])
                direction = weight[token] - (weight[target.contrast[step]] if target.contrast else 0.0)
                x_final = layers[-1].resid_post[row]
                scale = _decompose.norm_scale(x_final, final)
                for index, (layer, part) in enumerate(zip(layers, parts)):
                    values = _decompose.transformed_values(layer, part)  # [head, key, d_model]
                    update = torch.einsum("hj,hjd->jd", layer.pattern[:, row], values)  # [key, d_model]
                    delta = _decompose.linear_part(update, final, scale) @ direction  # Δ^l_j [key]
                    per_layer[b, index, positions] += to_numpy(delta) @ reach[index]
                full = _decompose.layer_norm(x_final, final) @ direction
                if bias is not None:
                    full = full + float(bias[token] - (bias[target.contrast[step]] if target.contrast else 0.0))
                want = logits[b, position, token] - (logits[b, position, target.contrast[step]] if target.contrast else 0.0)
                logit_error = max(logit_error, abs(float(full) - float(want)) / max(abs(float(want)), 1e-6))
            readout[b] = per_layer[b].sum(0)
        return AnalyzerResult(
            analyzer=self.name, version=self.version, params={},
            arrays={
                "readout": NamedArray(readout, ("batch", "key")),
                "per_layer": NamedArray(per_layer, ("batch", "layer", "key")),
            },
            checks={
                "logit_error": Check(
                    logit_error, _contributions.DECOMPOSITION_TOLERANCE,
                    "relative |LN_f(x^L_p)·(U_w − U_c) + bias − the model's logit (difference)|",
                ),
                "decomposition_error": Check(split_error, _contributions.DECOMPOSITION_TOLERANCE, "ALTI's split against the model"),
            },
            views=(View("token_strip", "readout", "ALTI-Logit: each token's share of the target logit"),
                   View("line", "per_layer", "ALTI-Logit by layer", {"row": "readout"})),
            tokens=tuple(tuple(row) for row in trace.encoded.tokens),
            readout_of=Readout("readout", signed=True),
        )
