"""Multi-host start-up through `jax.distributed.initialize` (no pmap anywhere)."""

from __future__ import annotations

import jax

from icml26zoo.train.errors import RunError

CLUSTER_HINT = ("pass --coordinator host:port --num-processes N --process-id I, or run under a cluster that JAX "
                "detects (SLURM, Open MPI, Cloud TPU)")


def initialize_distributed(
    enabled: bool | None,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> bool:
    """Connects this process to the others; returns whether jax.distributed was initialized.

    With an explicit `coordinator` ("host:port"), `num_processes` and `process_id` are required. With
    `enabled=True` and no coordinator, JAX detects the cluster (SLURM, TPU pods, MPI, ...). With
    `enabled=None` or False it initializes only when a coordinator is given. Must run before any
    computation. On CPU, JAX's default cross-process collectives (gloo) carry the gradient all-reduce.

    Raises RunError for what the user can fix: a coordinator without num_processes/process_id, or
    `enabled=True` with no coordinator where JAX detects no cluster.
    """
    if coordinator is None and not enabled:
        return False
    if coordinator is not None and (num_processes is None or process_id is None):
        raise RunError(
            f"coordinator={coordinator!r} needs num_processes and process_id, got num_processes={num_processes}, "
            f"process_id={process_id}"
        )
    try:
        jax.distributed.initialize(coordinator, num_processes, process_id)
    except ValueError as error:
        if coordinator is not None:
            raise RunError(f"jax.distributed.initialize({coordinator!r}, {num_processes}, {process_id}) "
                           f"failed: {error}") from None
        raise RunError(f"distributed=true but no coordinator was given and JAX detected no cluster ({error}); "
                       f"{CLUSTER_HINT}") from None
    return True
