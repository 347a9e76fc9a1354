"""The device mesh and the shardings of parameters, optimizer state and batches.

The mesh has two named axes: `data` (pure data parallelism) and `fsdp` (data parallelism whose
parameters and optimizer state are also sharded). A batch is split over both axes. A parameter is
sharded FSDP-style along its largest dimension that the `fsdp` axis divides, and replicated otherwise
(scalars, small vectors, or no divisible dimension); XLA inserts the all-gathers and reduce-scatters.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from icml26zoo.train.errors import RunError

DATA_AXES = ("data", "fsdp")


def mesh_shape(mesh_data: int, mesh_fsdp: int, device_count: int) -> tuple[int, int]:
    """The (data, fsdp) axis sizes for `device_count` devices; `mesh_data = -1` takes what fsdp leaves.

    Raises RunError (the config does not fit the machine) naming mesh_data / mesh_fsdp and the count.
    """
    if mesh_fsdp < 1 or device_count % mesh_fsdp:
        raise RunError(f"mesh_fsdp must be a positive divisor of the device count {device_count}, got {mesh_fsdp}")
    data = device_count // mesh_fsdp if mesh_data == -1 else mesh_data
    if data * mesh_fsdp != device_count:
        raise RunError(
            f"mesh_data * mesh_fsdp must equal the device count {device_count}, got mesh_data={mesh_data}, "
            f"mesh_fsdp={mesh_fsdp}"
        )
    return data, mesh_fsdp


def check_fits_devices(mesh_data: int, mesh_fsdp: int, batch_size: int, device_count: int) -> None:
    """Raises RunError unless the mesh fits `device_count` devices and every device gets whole rows."""
    mesh_shape(mesh_data, mesh_fsdp, device_count)
    if batch_size % device_count:
        raise RunError(f"batch_size must be a multiple of the device count {device_count}, got {batch_size}")


def make_mesh(mesh_data: int, mesh_fsdp: int, devices: list | None = None) -> Mesh:
    """A ("data", "fsdp") mesh over `devices` (default: all devices of all processes).

    `mesh_data = -1` takes every device that `mesh_fsdp` leaves over.
    """
    devices = list(jax.devices() if devices is None else devices)
    data, mesh_fsdp = mesh_shape(mesh_data, mesh_fsdp, len(devices))
    # Auto axes: XLA's partitioner propagates shardings through the model, so modules need no
    # sharding annotations (Explicit axes would demand out_sharding on every gather).
    auto = (jax.sharding.AxisType.Auto,) * len(DATA_AXES)
    return jax.make_mesh((data, mesh_fsdp), DATA_AXES, axis_types=auto, devices=devices)


def fsdp_spec(shape: tuple[int, ...], fsdp_size: int) -> PartitionSpec:
    """Shards the largest dimension divisible by `fsdp_size` over "fsdp"; replicates otherwise."""
    if fsdp_size == 1 or not shape:
        return PartitionSpec()
    candidates = [axis for axis, size in enumerate(shape) if size % fsdp_size == 0 and size >= fsdp_size]
    if not candidates:
        return PartitionSpec()
    axis = max(candidates, key=lambda a: (shape[a], -a))
    spec = [None] * len(shape)
    spec[axis] = "fsdp"
    return PartitionSpec(*spec)


def tree_shardings(mesh: Mesh, tree: Any) -> Any:
    """FSDP NamedShardings for every array-like leaf of `tree` (arrays or ShapeDtypeStructs)."""
    fsdp_size = mesh.shape["fsdp"]
    return jax.tree.map(lambda leaf: NamedSharding(mesh, fsdp_spec(tuple(leaf.shape), fsdp_size)), tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows of a batch are split over every device (both mesh axes); time is not split."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXES))


def global_batch(mesh: Mesh, local_batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """Assembles each process's rows into global arrays sharded by `batch_sharding`.

    Every process passes its own `local_batch` (rows = global rows / process count); with one process
    this is a plain sharded device_put.
    """
    sharding = batch_sharding(mesh)
    rows_needed = mesh.devices.size // jax.process_count()
    out = {}
    for name, value in local_batch.items():
        if value.shape[0] % rows_needed:
            raise RunError(
                f"batch[{name!r}] has {value.shape[0]} rows on this process, which must be a multiple of its "
                f"{rows_needed} local devices; choose batch_size divisible by the device count"
            )
        out[name] = jax.make_array_from_process_local_data(sharding, value)
    return out
