"""What a module does, told from its class and weights: a projection, a norm, Mixture-of-Experts routing;
and module-path arithmetic. Used by `structure` to read a block's parts from a probe pass."""

from __future__ import annotations

from torch import nn
from transformers.pytorch_utils import Conv1D

from interpret.capture.hf.probe import ModuleCall


def relative(path: str, block: str) -> str:
    return path[len(block) + 1:] if path.startswith(block + ".") else path


def common_path(*paths: str) -> str:
    """Return the longest common module path of `paths` (the smallest module holding them all)."""
    split = [path.split(".") for path in paths]
    common = []
    for parts in zip(*split):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return ".".join(common)


def is_projection(module: nn.Module) -> bool:
    """Whether `module` is a linear map of the last axis (Linear, GPT-2's Conv1D, or a leaf with a 2-D weight)."""
    if isinstance(module, (nn.Linear, Conv1D)):
        return True
    weight = getattr(module, "weight", None)
    return (
        isinstance(weight, nn.Parameter) and weight.dim() == 2 and not isinstance(module, nn.Embedding)
        and not any(True for _ in module.children())
    )


def weights_act_here(module: nn.Module) -> bool:
    """Whether `module` applies weight matrices itself (a projection, experts), and is not a norm."""
    return has_matrix(module) and not is_norm(module) and is_leaf_of_weights(module)


def has_matrix(module: nn.Module) -> bool:
    """Whether `module` holds a weight of two or more axes directly (projections, experts), not only scales."""
    return any(param.dim() >= 2 for param in module.parameters(recurse=False))


def is_leaf_of_weights(module: nn.Module) -> bool:
    """Whether none of `module`'s children holds weights (so the module itself is where the weights act)."""
    return not any(has_matrix(child) for child in module.modules() if child is not module)


def is_norm(module: nn.Module) -> bool:
    """Whether `module` is a normalisation layer (LayerNorm, RMSNorm and the families' own norm classes)."""
    if isinstance(module, (nn.LayerNorm, nn.GroupNorm, getattr(nn, "RMSNorm", nn.LayerNorm))):
        return True
    name = type(module).__name__
    return "Norm" in name and not any(is_projection(child) for child in module.modules() if child is not module)


def is_mixture(modules: dict[str, nn.Module], mlp: str | None, leaves: list[ModuleCall]) -> bool:
    """Whether the MLP routes tokens among experts (a module named for experts, or 3-D expert weights that are not
    a convolution's: SegFormer's MLP holds a depthwise convolution)."""
    paths = [call.path for call in leaves]
    if mlp is not None:
        paths += [path for path in modules if path.startswith(mlp + ".")]
    for path in paths:
        module = modules[path]
        if "expert" in path.rsplit(".", 1)[-1].lower() or "Expert" in type(module).__name__:
            return True
        convolution = isinstance(module, nn.modules.conv._ConvNd)  # a convolution's weights are 3-D or more too
        if not convolution and any(param.dim() >= 3 for param in module.parameters(recurse=False)):
            return True
    return False
