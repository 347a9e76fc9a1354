"""Verifiable rewards for k-sparse Boolean chains (Lyu et al., arXiv 2511.17852; dataset `sparse_boolean`).

A chain step j is the model's token ẑ_j for chain token z_j. Three verifiers:

  process      r_j = 1[ẑ_j = z_j]: the step equals the correct intermediate bit (the paper's immediate reward)
  outcome      r_j = 1[ẑ_final = f(x)] for every step of the example: one reward for the answer, credited
               to all steps (the ablation)
  consistency  r_j = 1[ẑ_j = g(ẑ_a(j), ẑ_b(j))]: the step is g of the tokens at its parent positions, which
               may themselves be the model's (a local check that needs the tree, not the answer)

Positions are those of the trainer's next-token rows: target t is the token at sequence position t + 1, a
chain step where weights [B, T] > 0; examples are the rows' segments (segment_ids [B, T]).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# Token ids of the bits (train.data.sparse_boolean: bit b is token 1 + b).
BIT_TOKENS = (1, 2)
GATES = {"parity": jnp.bitwise_xor, "and": jnp.bitwise_and, "or": jnp.bitwise_or}


def process_rewards(choices: jax.Array, targets: jax.Array, weights: jax.Array) -> jax.Array:
    """[B, T] float32 1[choice = target] at chain steps (weights > 0), 0 elsewhere."""
    return ((choices == targets) & (weights > 0)).astype(jnp.float32)


def final_steps(weights: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """[B, T] bool: the last chain step of each example (the next target is not a step of the same example)."""
    step = weights > 0
    next_step = jnp.pad(step[:, 1:], ((0, 0), (0, 1)))
    next_same = jnp.pad(segment_ids[:, 1:] == segment_ids[:, :-1], ((0, 0), (0, 1)))
    return step & ~(next_step & next_same)


def outcome_rewards(
    choices: jax.Array, targets: jax.Array, weights: jax.Array, segment_ids: jax.Array
) -> jax.Array:
    """[B, T] float32: at every chain step, 1[the example's final choice = f(x)]; 0 off the chain."""
    solved = (final_steps(weights, segment_ids) & (choices == targets)).astype(jnp.float32)
    same_example = segment_ids[:, :, None] == segment_ids[:, None, :]
    credited = jnp.sum(jnp.where(same_example, solved[:, None, :], 0.0), axis=-1)
    return jnp.where(weights > 0, credited, 0.0)


def consistency_rewards(tokens: jax.Array, parents: np.ndarray, function: str) -> jax.Array:
    """[B, k - 1] float32 1[ẑ_j = g(ẑ_a(j), ẑ_b(j))] for whole examples tokens [B, d + k - 1].

    `parents` [k - 1, 2] are the example positions of each chain token's parents
    (`train.data.sparse_boolean.chain_parents(support, d)`); a non-bit token is never consistent.
    """
    if function not in GATES:
        raise ValueError(f"function must be one of {sorted(GATES)}, got {function!r}")
    parents = np.asarray(parents)
    if parents.ndim != 2 or parents.shape[1] != 2:
        raise ValueError(f"parents must have shape [k - 1, 2], got {parents.shape}")
    if tokens.ndim != 2 or tokens.shape[1] <= parents.shape[0] or parents.max(initial=0) >= tokens.shape[1]:
        raise ValueError(f"tokens must have shape [B, d + k - 1] covering parents {parents.tolist()}, "
                         f"got shape {tokens.shape}")
    chain = tokens[:, tokens.shape[1] - parents.shape[0]:]
    is_bit = (tokens >= BIT_TOKENS[0]) & (tokens <= BIT_TOKENS[1])
    bits = tokens - BIT_TOKENS[0]
    expected = GATES[function](bits[:, parents[:, 0]], bits[:, parents[:, 1]]) + BIT_TOKENS[0]
    valid = is_bit[:, parents[:, 0]] & is_bit[:, parents[:, 1]]
    return ((chain == expected) & valid).astype(jnp.float32)


def batch_mean_baseline(rewards: jax.Array, weights: jax.Array) -> jax.Array:
    """[B, T] b_j: each position's mean reward over the batch's rows that have a chain step there.

    With one example per row (seq_len = d + k - 2) position t is the same chain step j in every row, so
    this is the spec's per-step batch mean.
    """
    mask = (weights > 0).astype(jnp.float32)
    mean = jnp.sum(rewards * mask, axis=0) / jnp.maximum(jnp.sum(mask, axis=0), 1.0)
    return jnp.broadcast_to(mean, rewards.shape)
