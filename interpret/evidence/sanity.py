"""Model-parameter randomisation test (Adebayo et al. 2018, "Sanity checks for saliency maps", §3.1, cascading
randomisation): randomise the model's blocks from the top layer down, one more block each step, re-run each
method for the same targets, and compare its readout with the original by Spearman's ρ over the removable
tokens, computed on their tie groups (`interpret.evidence.ranking`, through `agreement.rank_agreement`), so
float noise among tied scores cannot move it. A method whose explanation stays the same while the weights it
explains are destroyed is not explaining the model: it passes when its mean ρ with every block re-initialised
is below PASS_BELOW.

Randomising a block re-initialises it with the model's own initialiser, as Adebayo et al. do ("re-initialise
the weights with the initialisation the model was trained from"), seeded and on a deep copy:

- a Hugging Face model (a `PreTrainedModel`): `model._init_weights(sub)` for every submodule of the block (its
  family's scheme: normal(0, initializer_range) weights, zero biases, unit / zero layer norms, ...). The
  loader marks every loaded tensor `_is_hf_initialized`, which makes those initialisers no-ops, so the mark
  is cleared on the block's tensors first;
- any other model (the reference models, plain PyTorch): `sub.reset_parameters()` for every submodule that
  has one (nn.Linear, nn.LayerNorm, nn.Embedding, the reference attention's additive-score tensors).

A tensor no initialiser writes (a family with no initialiser for it) falls back to the older scheme,
Gaussian noise with that tensor's own mean and standard deviation; `SanityResult.schemes` says per step which
scheme set how many tensors, so the report can say so. The embeddings and the decision head are kept.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import nn

from interpret.analysis import analyze
from interpret.analysis.run import required_names, run_context
from interpret.capture import collect
from interpret.capture.api import capturable_for
from interpret.decision.decide import TargetRequest, decide
from interpret.errors import AnalyzerError
from interpret.evidence.agreement import rank_agreement
from interpret.evidence.removal import candidates
from interpret.runtime.progress import Stage, begin


# A readout that keeps half or more of its rank correlation with every block re-initialised is mostly not
# reading the weights it claims to explain (Adebayo et al. read such a similarity off as a failure).
PASS_BELOW = 0.5


@dataclass(frozen=True)
class SanityResult:
    """Cascading randomisation: steps[s] names the blocks randomised after step s (steps[0] = "none").

    spearman: per method, [steps, batch] Spearman ρ of the readout at each step with the original (step 0
    is 1 by definition; NaN where a readout is constant); "random" is the floor, a uniformly random ranking
    drawn afresh at each step against the one of step 0 (ρ about 0 at every step after the first).
    schemes: per step, how many parameter tensors each re-initialisation scheme set (`reinitialise`).
    """

    steps: tuple[str, ...]
    spearman: dict[str, Float[np.ndarray, "steps batch"]]
    schemes: tuple[dict[str, int], ...] = ()

    def mean(self, method: str) -> list[float | None]:
        """Return ρ averaged over examples at each step (None where no example has a ρ)."""
        rows = self.spearman[method]
        return [float(np.nanmean(row)) if np.isfinite(row).any() else None for row in rows]

    def passed(self, method: str) -> bool | None:
        """Return whether the method's mean ρ with every block re-initialised is below PASS_BELOW (None: no ρ)."""
        last = self.mean(method)[-1]
        return None if last is None or len(self.steps) < 2 else last < PASS_BELOW

    def to_dict(self) -> dict[str, Any]:
        """Return the steps and each method's mean and per-example ρ per step (NaN as None) and its verdict."""
        return {
            "steps": list(self.steps),
            "schemes": [dict(scheme) for scheme in self.schemes],
            "methods": {
                name: {
                    "mean": self.mean(name),
                    "passed": self.passed(name),
                    "per_example": [[None if not np.isfinite(v) else float(v) for v in row] for row in values],
                }
                for name, values in self.spearman.items()
            },
        }


def block_modules(model: nn.Module, tokenizer: Any) -> list[nn.Module]:
    """Return the model's blocks (main stack), bottom to top, found from its `blocks.{i}.hook_resid_post` sites."""
    capturable = capturable_for(model, tokenizer)
    names = {module: name for name, module in model.named_modules()}
    blocks: list[nn.Module] = []
    for layer in range(capturable.n_layers):
        site = next((s for s in capturable.sites if s.name == f"blocks.{layer}.hook_resid_post"), None)
        module = getattr(site, "module", None)
        if module is None or module not in names:
            raise AnalyzerError(f"{type(model).__name__}: no block module found for layer {layer}; the sanity check"
                                " needs blocks.{i}.hook_resid_post on a module.")
        if not any(True for _ in module.parameters()):  # a hook point inside the block: take its parent
            parent = names[module].rsplit(".", 1)[0]
            module = model.get_submodule(parent)
        blocks.append(module)
    return blocks


MODEL_INIT = "model._init_weights"
RESET = "reset_parameters"
NOISE = "moment-matched noise"
RANDOM = "random"


@torch.no_grad()
def _noise(parameter: nn.Parameter, generator: torch.Generator) -> None:
    """Replace `parameter` by Gaussian noise with its mean and standard deviation."""
    mean = parameter.detach().double().mean()
    std = parameter.detach().double().std() if parameter.numel() > 1 else torch.tensor(0.0, dtype=torch.float64)
    noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
    parameter.copy_((noise * std + mean).to(parameter.dtype))


@torch.no_grad()
def reinitialise(model: nn.Module, block: nn.Module, seed: int) -> dict[str, int]:
    """Re-initialise `block` (a submodule of `model`) with the model's own initialiser, seeded; return how many
    parameter tensors each scheme set ({MODEL_INIT or RESET: n, NOISE: m}; NOISE only for tensors no
    initialiser wrote). The global RNG is left as it was.

    Coverage is found exactly: every tensor of the block is filled with NaN before the initialiser runs, and a
    tensor still holding a NaN afterwards was not (wholly) written by it; it gets noise with the moments of its
    trained values instead."""
    parameters = list(block.parameters())
    before = [parameter.detach().clone() for parameter in parameters]
    init_weights = getattr(model, "_init_weights", None)
    scheme = MODEL_INIT if callable(init_weights) and hasattr(model, "config") else RESET
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for parameter in parameters:
            parameter.fill_(float("nan"))
            if hasattr(parameter, "_is_hf_initialized"):  # the loader's mark turns HF initialisers into no-ops
                parameter._is_hf_initialized = False
        for sub in block.modules():
            if scheme == MODEL_INIT:
                init_weights(sub)
            elif callable(getattr(sub, "reset_parameters", None)):
                sub.reset_parameters()
    generator = torch.Generator().manual_seed(seed)
    uncovered = 0
    for parameter, old in zip(parameters, before):
        if torch.isnan(parameter).any():
            parameter.copy_(old)
            _noise(parameter, generator)
            uncovered += 1
    counts = {scheme: len(parameters) - uncovered}
    if uncovered:
        counts[NOISE] = uncovered
    return counts


def cascading_randomisation(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    analyzers: Sequence[str],
    *,
    head: nn.Module | None = None,
    seed: int = 0,
    max_length: int | None = None,
    progress: Stage | None = None,
) -> SanityResult:
    """Return the SanityResult of `analyzers` (each must declare a readout) on `texts`, top block first;
    `progress`: the progress hook (`interpret.runtime.progress`), each analyzer over each example at each step."""
    names = list(dict.fromkeys(["*attn.hook_pattern", *required_names(analyzers)]))
    trace = collect(model, tokenizer, list(texts), names=names, max_length=max_length)
    targets = [d.target for d in decide(model, trace, tokenizer, TargetRequest(), head)]
    encoded = trace.encoded
    positions = [candidates(encoded, b, targets[b]) for b in range(encoded.batch)]

    def readouts(current: nn.Module) -> dict[str, np.ndarray]:
        now = collect(current, tokenizer, list(texts), names=names, max_length=max_length)
        context = run_context(now, current, tokenizer, head=head, targets=targets, seed=seed)
        out = {}
        for name in analyzers:
            result = analyze(now, name, context=context)
            if result.readout is None:
                raise AnalyzerError(f"{name} declares no readout, so there is no explanation to compare; drop it.")
            out[name] = np.asarray(result.readout, dtype=float)
            advance(len(texts))
        return out

    copied = copy.deepcopy(model).eval()
    blocks = block_modules(copied, tokenizer)
    advance = begin(progress, f"sanity check ({len(analyzers)} analyzers × {len(texts)} examples × {len(blocks) + 1}"
                    " steps)", len(analyzers) * len(texts) * (len(blocks) + 1))
    original = readouts(model)
    steps = ["none"]
    schemes: list[dict[str, int]] = [{}]
    rho = {name: [np.ones(encoded.batch)] for name in analyzers}
    # The floor: a ranking that ignores the model, drawn afresh at every step, against the one drawn at step 0.
    draws = np.random.default_rng(seed)
    first = [draws.permutation(len(p)).astype(float) for p in positions]
    rho[RANDOM] = [np.ones(encoded.batch)]
    for layer in reversed(range(len(blocks))):
        schemes.append(reinitialise(copied, blocks[layer], seed + layer))
        steps.append(f"blocks {layer}-{len(blocks) - 1}")
        now = readouts(copied)
        for name in analyzers:
            values = np.array([
                rank_agreement([original[name][b][positions[b]], now[name][b][positions[b]]])[0][0, 1]
                for b in range(encoded.batch)
            ])
            rho[name].append(values)
        rho[RANDOM].append(np.array([
            rank_agreement([first[b], draws.permutation(len(positions[b])).astype(float)])[0][0, 1]
            for b in range(encoded.batch)
        ]))
    return SanityResult(tuple(steps), {name: np.stack(values) for name, values in rho.items()}, tuple(schemes))
