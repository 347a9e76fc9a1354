"""Expert parallelism: experts sharded over an `expert` mesh axis, tokens dispatched with all-to-all.

When the mesh in context (`jax.set_mesh(mesh)` / `jax.sharding.use_mesh(mesh)`) has an axis named
"expert" of size P > 1, `MoEFeedForward` runs its experts through `expert_parallel_experts`: inside
`jax.shard_map` over that axis, shard p holds tokens N/P (a contiguous block) and experts
[p·E/P, (p+1)·E/P) of every expert weight [E, ...]. Each shard

  1. packs its kept (token, slot) assignments into a send buffer [P, C, D], one block per destination
     shard (the shard owning the assignment's expert), in token order, with the local expert id beside it;
  2. exchanges the blocks with `jax.lax.all_to_all`, so shard p receives [P, C, D] rows for its experts;
  3. runs its E/P experts on them (the same grouped matmul as without a mesh; empty rows are dropped);
  4. sends the outputs back with a second all-to-all and unpacks them into [N/P, k, D].

C = (N/P)·k, the most assignments one shard can send to one destination, so no assignment is ever
dropped here: token dropping stays the layer's capacity rule, applied to the global routing before
dispatch, and the result equals the single-device layer up to float summation order. (A bounded C would
cut the buffers P-fold at the cost of a second, per-shard capacity; it is not implemented.)

`expert_shardings(mesh, params)` gives the NamedShardings that store each MoE layer's expert weights
split over "expert" (everything else replicated), for placing parameters before a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

EXPERT_AXIS = "expert"
EXPERT_WEIGHTS = ("w_up", "w_gate", "w_down")


def expert_axis_size() -> int:
    """The size of the context mesh's "expert" axis; 1 without a mesh or without that axis."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or EXPERT_AXIS not in mesh.axis_names:
        return 1
    return int(mesh.shape[EXPERT_AXIS])


def _check_divisible(tokens: int, experts: int, shards: int) -> None:
    if tokens % shards:
        raise ValueError(f"expert parallelism needs the token count (batch x time = {tokens}) to be a multiple of "
                         f"the 'expert' mesh axis size {shards}")
    if experts % shards:
        raise ValueError(f"expert parallelism needs num_experts = {experts} to be a multiple of the 'expert' mesh "
                         f"axis size {shards}")


def _pack(rows: jax.Array, group_ids: jax.Array, experts: int, shards: int) -> tuple[jax.Array, ...]:
    """Send buffers of one shard: rows [M, D] with global ids [M] (E = dropped) -> (send [P, M, D], local ids
    [P, M] (E/P = empty), destination [M] (P = nowhere), slot [M]: the row's position in its block)."""
    local_experts = experts // shards
    destination = jnp.where(group_ids < experts, group_ids // local_experts, shards)
    one_hot = jax.nn.one_hot(destination, shards, dtype=jnp.int32)  # row to nowhere -> all zeros
    slot = jnp.sum((jnp.cumsum(one_hot, axis=0) - one_hot) * one_hot, axis=1)
    capacity = rows.shape[0]
    send = jnp.zeros((shards, capacity, rows.shape[1]), rows.dtype).at[destination, slot].set(rows, mode="drop")
    local_ids = jnp.full((shards, capacity), local_experts, jnp.int32)
    local_ids = local_ids.at[destination, slot].set((group_ids % local_experts).astype(jnp.int32), mode="drop")
    return send, local_ids, destination, slot


def expert_parallel_experts(
    expert_mlp: Callable[..., jax.Array], rows: jax.Array, group_ids: jax.Array, weights: tuple[jax.Array, ...],
    num_experts: int, top_k: int,
) -> jax.Array:
    """`expert_mlp(rows [M, D], local ids [M], *local weights) -> [M, D]` over the "expert" axis.

    rows [N·k, D] (token n's slot s at row n·k + s; N a multiple of the axis size P, so a shard's rows are
    whole tokens), group_ids [N·k] int in [0, E] (E = dropped, output
    zero), weights: expert weights with leading axis E (None entries pass through). Returns [N·k, D].
    """
    shards = expert_axis_size()
    _check_divisible(rows.shape[0] // top_k, num_experts, shards)
    present = tuple(w for w in weights if w is not None)

    def local(rows: jax.Array, group_ids: jax.Array, *local_weights: jax.Array) -> jax.Array:
        send, local_ids, destination, slot = _pack(rows, group_ids, num_experts, shards)
        received = jax.lax.all_to_all(send, EXPERT_AXIS, 0, 0)
        received_ids = jax.lax.all_to_all(local_ids, EXPERT_AXIS, 0, 0)
        iterator = iter(local_weights)
        full = tuple(None if w is None else next(iterator) for w in weights)
        outputs = expert_mlp(received.reshape(-1, rows.shape[1]), received_ids.reshape(-1), *full)
        returned = jax.lax.all_to_all(outputs.reshape(send.shape[0], send.shape[1], -1), EXPERT_AXIS, 0, 0)
        kept = destination < shards
        gathered = returned[jnp.minimum(destination, shards - 1), slot]
        return jnp.where(kept[:, None], gathered, jnp.zeros_like(gathered))

    spec = PartitionSpec(EXPERT_AXIS)
    mapped = jax.shard_map(local, in_specs=(spec, spec, *(spec,) * len(present)), out_specs=spec,
                           axis_names={EXPERT_AXIS}, check_vma=False)
    return mapped(rows, group_ids, *present)


def expert_shardings(mesh: jax.sharding.Mesh, params: Any) -> Any:
    """NamedShardings for a parameter tree (nested dicts, e.g. `nnx.to_pure_dict`): MoE expert weights
    (leaves named w_up / w_gate / w_down) split over "expert" along their expert axis, the rest replicated."""
    if EXPERT_AXIS not in mesh.axis_names:
        raise ValueError(f"mesh must have an {EXPERT_AXIS!r} axis, got axes {mesh.axis_names}")

    def sharding(path: tuple, leaf: Any) -> NamedSharding:
        name = getattr(path[-1], "key", getattr(path[-1], "name", None)) if path else None
        if name in EXPERT_WEIGHTS and leaf.ndim >= 3:
            # Stacked layers put [L] before [E]: the expert axis is the third from last.
            spec = [None] * leaf.ndim
            spec[leaf.ndim - 3] = EXPERT_AXIS
            return NamedSharding(mesh, PartitionSpec(*spec))
        return NamedSharding(mesh, PartitionSpec())

    return jax.tree_util.tree_map_with_path(sharding, params)
