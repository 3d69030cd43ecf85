"""The Ray engine of an audit: the batches still to compute go through Ray Data, into a pool of actors that
each hold one loaded model, and come back to this process, which stores them as the local engine does.

`RayEngine(options, loader)` is a callable with the signature of the local engine's step
(`interpret.audit.runner._compute_missing`): `run_audit(..., options=AuditOptions(engine=RayEngine(...)))` swaps
it in and nothing else changes. The pending batches (batch i is always examples[i·batch_size : (i+1)·batch_size])
become a Ray dataset of one row per batch (`ray.data.from_items`); `map_batches` hands each row to a
`_BatchWorker` actor (pool size `workers`, `num_gpus_per_worker` GPUs each: GPU actors when GPUs exist), which
runs exactly the local engine's `run_batch` on its own copy of the model. Each finished batch is written here, at
once, as a part of its own (`write_part`), so an audit killed midway resumes from every batch it finished and the
final tables are those of the local engine (the parts never change the tables).

The model reaches the actors through `loader`, a picklable function returning (model, tokenizer): the CLI
passes one that loads the model by name on each worker (the weights never travel); from Python, the default
pickles the model object given to run_audit. Ray is an optional extra: `pip install "transformer-audit[ray]"`.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from interpret.errors import ConfigError
from interpret.runtime.progress import Stage, begin

INSTALL_HINT = 'the ray engine needs Ray: pip install "transformer-audit[ray]" (or pip install "ray[data]")'
Loader = Callable[[], tuple[Any, Any]]


def require_ray() -> Any:
    """Return the `ray` module, or raise ConfigError saying in one line how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return ray


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide the Ray engine runs.

    address: an existing Ray cluster ("auto", "ray://host:10001", ...); None starts a local one on this machine.
    workers: actors in the pool, each holding one model. num_gpus_per_worker: GPUs per actor (0: CPU actors).
    num_cpus_per_worker: CPU cores per actor (its torch threads). local_cpus: the cores of a local cluster
    (None: all of this machine's).
    """

    address: str | None = None
    workers: int = 1
    num_gpus_per_worker: float = 0.0
    num_cpus_per_worker: float = 1.0
    local_cpus: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(f"workers={self.workers!r} must be a positive number of actors; use e.g. 2.")
        if self.num_gpus_per_worker < 0 or self.num_cpus_per_worker <= 0:
            raise ConfigError(
                f"num_gpus_per_worker={self.num_gpus_per_worker} and num_cpus_per_worker={self.num_cpus_per_worker}"
                " must be at least 0 and above 0; use e.g. 1 GPU or 1 CPU per worker."
            )


class _BatchWorker:
    """A Ray actor: loads the model once, then computes the batches it is handed with the local `run_batch`."""

    def __init__(self, loader: Loader, plan: Any, threads: int) -> None:
        import torch

        torch.set_num_threads(max(1, threads))
        self.model, self.tokenizer = loader()
        self.plan = plan

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from interpret.audit.runner import run_batch

        indices, outputs = [], []
        for index, examples in zip(rows["index"], rows["examples"]):
            output = run_batch(self.model, self.tokenizer, pickle.loads(examples), int(index), self.plan)
            indices.append(int(index))
            outputs.append(pickle.dumps(output))
        return {"index": np.asarray(indices, dtype=np.int64), "output": np.asarray(outputs, dtype=object)}


class RayEngine:
    """Computes an audit's missing batches on Ray (see the module docstring); call it as the local engine."""

    def __init__(self, options: RayOptions | None = None, loader: Loader | None = None) -> None:
        require_ray()
        self.options = options or RayOptions()
        self.loader = loader

    def __call__(
        self,
        model: Any,
        tokenizer: Any,
        store: Any,
        batches: Sequence[Sequence[Any]],
        parts: Sequence[Any],
        plan: Any,
        part_examples: int,
        progress: Stage | None,
    ) -> set[int]:
        """Compute every batch no checked part holds, each stored as its own part; return the indices of the
        batches computed."""
        from interpret.audit.runner import write_part

        ray = require_ray()
        done = {index for part in parts for index in part.batches}
        todo = [index for index in range(len(batches)) if index not in done]
        if not todo:
            return set()
        total = sum(len(batch) for batch in batches)
        loader = self.loader or _Given(model, tokenizer)
        started_here = not ray.is_initialized()
        if started_here:
            ray.init(
                address=self.options.address, num_cpus=None if self.options.address else self.options.local_cpus,
                include_dashboard=False, log_to_driver=False, configure_logging=False,
            )
        advance = begin(progress, "audit (ray)", total)
        advance(total - sum(len(batches[i]) for i in todo))
        try:
            context = ray.data.DataContext.get_current()
            context.enable_progress_bars = False
            dataset = ray.data.from_items(
                [{"index": index, "examples": pickle.dumps(list(batches[index]))} for index in todo],
                override_num_blocks=len(todo),
            )
            results = dataset.map_batches(
                _BatchWorker,
                fn_constructor_args=(loader, plan, int(self.options.num_cpus_per_worker)),
                batch_size=1,
                concurrency=self.options.workers,
                num_cpus=self.options.num_cpus_per_worker,
                num_gpus=self.options.num_gpus_per_worker,
                batch_format="numpy",
            )
            for row in results.iter_rows():
                output = pickle.loads(row["output"])
                write_part(store, [output])
                advance(len(output.rows))
        finally:
            if started_here:
                ray.shutdown()
        return set(todo)


@dataclass(frozen=True)
class _Given:
    """A loader handing every actor a copy of the model and tokenizer given to run_audit."""

    model: Any
    tokenizer: Any

    def __call__(self) -> tuple[Any, Any]:
        return self.model, self.tokenizer

