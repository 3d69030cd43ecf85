"""The audit's engine options (`--engine ray --address ADDR --num-gpus-per-worker G --workers N`), their checks
before the model loads, and the picklable loader each Ray actor loads the model with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from interpret.cli.output import usage_error


def engine_options(command: Any) -> Any:
    """Add the engine options to an audit command."""
    options = [
        click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                     help="Where batches run: this process, or actors on Ray Data (needs the ray extra)."),
        click.option("--address", default=None, metavar="ADDR",
                     help="With --engine ray: the Ray cluster to join (e.g. auto); default: a local one."),
        click.option("--num-gpus-per-worker", type=click.FloatRange(min=0), default=None, metavar="G",
                     help="With --engine ray: GPUs per actor (default 1 where this machine has one, else 0)."),
        click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
                     help="With --engine ray: actors, each holding one model (default 1)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def check_engine(engine: str, address: str | None, gpus: float | None, workers: int | None) -> None:
    """Refuse (usage error, one line) Ray options without --engine ray, and --engine ray without Ray."""
    if engine != "ray":
        given = [name for name, value in (("--address", address), ("--num-gpus-per-worker", gpus),
                                          ("--workers", workers)) if value is not None]
        if given:
            raise usage_error(f"{given[0]} applies to --engine ray only; add --engine ray or drop {given[0]}.")
        return
    from interpret.audit.engine_ray import require_ray
    from interpret.errors import ConfigError

    try:
        require_ray()
    except ConfigError as err:
        raise usage_error(f"--engine ray: {err}") from None


def ray_engine(model: str | None, device: str, dtype: str | None, allow_pickle: bool, address: str | None,
               gpus: float | None, workers: int | None, allow_missing_weights: bool = False) -> Any:
    """Return the RayEngine whose actors each load `model` themselves (the weights never travel)."""
    from interpret.audit.engine_ray import RayEngine, RayOptions

    gpus = actor_gpus(gpus, address)
    worker_device = "cuda" if gpus > 0 else ("cpu" if device.startswith("cuda") else device)
    options = RayOptions(address=address, workers=workers or 1, num_gpus_per_worker=gpus)
    return RayEngine(options, loader=CliLoader(model, worker_device, dtype, allow_pickle, allow_missing_weights))


def actor_gpus(gpus: float | None, address: str | None) -> float:
    """Return the GPUs each Ray actor takes: --num-gpus-per-worker, or by default one where this machine has
    CUDA and the cluster is started here (no --address), none otherwise."""
    if gpus is not None:
        return gpus
    import torch

    return 1.0 if torch.cuda.is_available() and address is None else 0.0


@dataclass(frozen=True)
class CliLoader:
    """Loads the command line's model on a Ray worker: (model, tokenizer)."""

    model: str | None
    device: str
    dtype: str | None
    allow_pickle: bool
    allow_missing_weights: bool = False

    def __call__(self) -> tuple[Any, Any]:
        from interpret.cli.common import load_model

        loaded = load_model(self.model, self.device, self.dtype, self.allow_pickle, self.allow_missing_weights)
        return loaded.model, loaded.tokenizer
