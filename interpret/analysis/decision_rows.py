"""The rows the decision reads, held against the model itself: what attention analyzers start from is checked.

Each example's Target names the positions its decision reads (`Target.pooling`, from each class's own code:
`interpret.decision.decide`). Once per model object, on the first batch it explains, that statement is held
against the model: the positions of the decision side's last block output (`blocks.{L-1}.hook_resid_post`)
on which each example's score depends, a non-zero gradient, must be exactly the positions the pooling names.
A class whose head reads elsewhere (a head no rule knows, a decoder classifier that reads past its padding) is
refused in one line rather than explained from rows its decision never reads.

Not checked (nothing to hold the statement against): examples without a decision, models that expose no
last-block residual on the decision's side, or whose residual is on other positions than the inputs' (Swin's
merged patches), and inputs longer than `MAX_CHECKED_TOKENS` (a batch of more tokens than that is checked on its
first example): the pass holds what a gradient method's does, and long inputs are what streaming is for.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence

import torch
from torch import nn

from interpret.analysis.runner import Forward, ModelRunner
from interpret.errors import AnalyzerError, CaptureError
from interpret.inputs import Encoded
from interpret.target import Target

MAX_CHECKED_TOKENS = 2048  # rows × positions of the one gradient pass (the first row alone above it)
_CHECKED: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


def check_decision_rows(encoded: Encoded, runner: ModelRunner, targets: Sequence[Target], side_prefix: str = "") -> None:
    """Raise AnalyzerError when the positions `targets` say each decision reads are not the positions of the last
    block's output (on the side `side_prefix` names: "decoder." for an encoder-decoder) that its score depends on;
    once per model object (module docstring)."""
    model = runner.model
    if model in _CHECKED or model.training:  # in training mode dropout would move the scores: analyzers refuse it
        return
    rows = [b for b, target in enumerate(targets) if target.kind != "none" and target.pooling]
    site = _last_residual(runner, side_prefix)
    side = encoded.decoder if side_prefix and encoded.decoder is not None else encoded
    if not rows or site is None:
        return
    if len(rows) * side.pos > MAX_CHECKED_TOKENS:
        rows = rows[:1]
        if side.pos > MAX_CHECKED_TOKENS:
            return
    kept: list[torch.Tensor] = []
    try:
        with runner.live_pass(encoded, [site], lambda _: kept.append, Forward(examples=torch.tensor(rows))) as score:
            hidden = kept[0] if len(kept) == 1 else None
            if hidden is None or hidden.dim() != 3 or hidden.shape[1] != side.pos:  # not on the inputs' positions
                return
            (grad,) = torch.autograd.grad(score.sum(), [hidden], allow_unused=True)
    except CaptureError:  # a residual the model does not compute with gradients (Swin's lifted copies)
        return
    if grad is None:
        raise AnalyzerError(f"{type(model).__name__}'s decision does not read its last block's output ({site}).")
    reach = grad.detach().abs().sum(-1) != 0  # [rows, pos]
    for index, b in enumerate(rows):
        read = torch.nonzero(reach[index]).flatten().tolist()
        declared = sorted({int(position) for position, _ in targets[b].pooling})
        if read != declared:
            raise AnalyzerError(
                f"{type(model).__name__}'s decision of example {b} reads positions {_span(read)} of its last block,"
                f" but interpret reads it at {_span(declared)}: its attention analyzers would start from rows the"
                " decision never reads. Report this model class; name the rows with readout=(...) meanwhile."
            )
    _CHECKED[model] = True


def _last_residual(runner: ModelRunner, prefix: str) -> str | None:
    """Return the hook name of the last block's residual output on the `prefix` side, or None without one."""
    pattern = re.compile(rf"{re.escape(prefix)}blocks\.(\d+)\.hook_resid_post")
    found = [(int(match.group(1)), name) for name in runner.sites if (match := pattern.fullmatch(name))]
    return max(found)[1] if found else None


def _span(positions: Sequence[int]) -> str:
    """Return positions as a short readable list ("[0]", "[1, 2, 3]", "[1 … 196] (196)")."""
    if len(positions) > 6 and list(positions) == list(range(positions[0], positions[-1] + 1)):
        return f"[{positions[0]} … {positions[-1]}] ({len(positions)})"
    return str(list(positions))
