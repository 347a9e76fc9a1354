"""Small finite MDPs as arrays, a pure-JAX `step`, i.i.d. transition sampling and exact Q* by value iteration.

An MDP here is (P, R, γ): P[s, a, s'] = Pr(s' | s, a) with rows summing to 1, R[s, a] the expected reward.
Rewards are deterministic given (s, a) so the only sampling noise is the next state — the noise that the
target period trades off against bias in periodic Q-learning.

Q* is the fixed point of the Bellman optimality operator
    (T Q)(s, a) = R(s, a) + γ Σ_s' P(s' | s, a) max_a' Q(s', a'),
a γ-contraction in ‖·‖_∞, so value iteration Q ← T Q from 0 reaches ‖Q − Q*‖_∞ ≤ γ^k ‖Q*‖_∞; it runs in float64
numpy to a residual far below the float32 errors the learners reach.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class FiniteMDP(NamedTuple):
    """P [S, A, S] float32, R [S, A] float32 and the discount γ (a Python float)."""

    P: jax.Array
    R: jax.Array
    gamma: float

    @property
    def num_states(self) -> int:
        return int(self.P.shape[0])

    @property
    def num_actions(self) -> int:
        return int(self.P.shape[1])


def _check(P: np.ndarray, R: np.ndarray, gamma: float) -> None:
    if P.ndim != 3 or P.shape[0] != P.shape[2]:
        raise ValueError(f"P must have shape [S, A, S], got {P.shape}")
    if R.shape != P.shape[:2]:
        raise ValueError(f"R must have shape {P.shape[:2]}, got {R.shape}")
    if not (0.0 < gamma < 1.0):
        raise ValueError(f"gamma must lie in (0, 1), got {gamma!r}")
    if np.any(P < 0) or not np.allclose(P.sum(-1), 1.0, atol=1e-6):
        raise ValueError("P[s, a, :] must be probability vectors")


def make_mdp(P: np.ndarray | jax.Array, R: np.ndarray | jax.Array, gamma: float) -> FiniteMDP:
    """Validates and wraps (P [S, A, S], R [S, A], γ) as float32 arrays."""
    P, R = np.asarray(P, np.float64), np.asarray(R, np.float64)
    _check(P, R, gamma)
    return FiniteMDP(P=jnp.asarray(P, jnp.float32), R=jnp.asarray(R, jnp.float32), gamma=float(gamma))


def chain_mdp(num_states: int = 8, slip: float = 0.2, gamma: float = 0.9) -> FiniteMDP:
    """A chain 0 — 1 — ... — S−1 with actions 0 = left, 1 = right.

    The chosen move happens with probability 1 − slip, the opposite one with probability `slip` (walls clip
    at the ends). Reward 1 for acting in the right end state, 0.1 for acting in the left end (a distractor
    that a myopic learner prefers), 0 elsewhere.
    """
    if num_states < 2:
        raise ValueError(f"num_states must be >= 2, got {num_states}")
    if not (0.0 <= slip < 0.5):
        raise ValueError(f"slip must lie in [0, 0.5), got {slip!r}")
    S = num_states
    P = np.zeros((S, 2, S))
    for s in range(S):
        left, right = max(s - 1, 0), min(s + 1, S - 1)
        P[s, 0, left] += 1.0 - slip
        P[s, 0, right] += slip
        P[s, 1, right] += 1.0 - slip
        P[s, 1, left] += slip
    R = np.zeros((S, 2))
    R[S - 1, :] = 1.0
    R[0, :] = 0.1
    return make_mdp(P, R, gamma)


def random_mdp(seed: int = 0, num_states: int = 10, num_actions: int = 3, gamma: float = 0.9,
               branching: int = 3) -> FiniteMDP:
    """A random MDP (the setting of the tests and of the RL script): each (s, a) moves to `branching` random
    next states with Dirichlet(1) probabilities; rewards R[s, a] ~ U[0, 1]. Host numpy RNG, so the MDP is
    fixed by `seed`."""
    if not (1 <= branching <= num_states):
        raise ValueError(f"branching must lie in [1, num_states], got {branching}")
    rng = np.random.default_rng(seed)
    P = np.zeros((num_states, num_actions, num_states))
    for s in range(num_states):
        for a in range(num_actions):
            nxt = rng.choice(num_states, size=branching, replace=False)
            P[s, a, nxt] = rng.dirichlet(np.ones(branching))
    R = rng.uniform(0.0, 1.0, size=(num_states, num_actions))
    return make_mdp(P, R, gamma)


def step(mdp: FiniteMDP, key: jax.Array, state: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One environment step: s' ~ P(· | s, a). state, action: int32 (any matching shape).

    Returns (next_state int32, reward float32 = R[s, a]), both of the shape of `state`.
    """
    # Inverse-CDF sampling with one uniform per transition: s' = #{j : F_j ≤ u·F_{S−1}}, F = cumsum P(·|s, a).
    # (jax.random.categorical draws S Gumbels per sample; this compiles and runs several times faster.)
    probs = mdp.P[state, action]  # [..., S]
    cdf = jnp.cumsum(probs, axis=-1)
    u = jax.random.uniform(key, state.shape, jnp.float32) * cdf[..., -1]
    count = jnp.sum((cdf <= u[..., None]).astype(jnp.int32), axis=-1)
    # float32 rounding can leave u a hair above every partial sum; never return a state outside the support.
    last = mdp.num_states - 1 - jnp.argmax(jnp.flip(probs > 0, axis=-1), axis=-1).astype(jnp.int32)
    next_state = jnp.minimum(count, last).astype(jnp.int32)
    return next_state, mdp.R[state, action]


@functools.partial(jax.jit, static_argnums=2)
def sample_transitions(mdp: FiniteMDP, key: jax.Array, num: int) -> tuple[jax.Array, ...]:
    """`num` i.i.d. transitions under the uniform behaviour distribution over (s, a) (ξ = 1 / (S·A)).

    Returns (s, a, r, s') with shapes [num] (int32, int32, float32, int32). This is the asynchronous
    sampling model of the analysis: one state-action pair per sample, drawn from a fixed behaviour policy.
    """
    k_s, k_a, k_next = jax.random.split(key, 3)
    s = jax.random.randint(k_s, (num,), 0, mdp.num_states, dtype=jnp.int32)
    a = jax.random.randint(k_a, (num,), 0, mdp.num_actions, dtype=jnp.int32)
    s_next, r = step(mdp, k_next, s, a)
    return s, a, r, s_next


def _p64(mdp: FiniteMDP) -> np.ndarray:
    """P in float64, renormalised so each row sums to 1 exactly despite its float32 storage."""
    P = np.asarray(mdp.P, np.float64)
    return P / P.sum(axis=-1, keepdims=True)


def bellman_optimality(mdp: FiniteMDP, Q: np.ndarray) -> np.ndarray:
    """(T Q)(s, a) = R(s, a) + γ Σ_s' P(s'|s, a) max_a' Q(s', a') in float64 numpy. Q: [S, A] -> [S, A]."""
    return np.asarray(mdp.R, np.float64) + mdp.gamma * _p64(mdp) @ np.asarray(Q, np.float64).max(axis=1)


def value_iteration(mdp: FiniteMDP, tol: float = 1e-12, max_iters: int = 100_000) -> np.ndarray:
    """Q* [S, A] float64 by iterating T from Q = 0 until ‖T Q − Q‖_∞ ≤ tol (1 − γ) / γ.

    That stopping rule bounds the distance to the fixed point: ‖Q − Q*‖_∞ ≤ γ/(1 − γ) ‖T Q − Q‖_∞ ≤ tol,
    and T Q (one step further) is returned. P is renormalised in float64 (see `_p64`).
    """
    P = _p64(mdp)
    R = np.asarray(mdp.R, np.float64)
    Q = np.zeros_like(R)
    threshold = tol * (1.0 - mdp.gamma) / mdp.gamma
    for _ in range(max_iters):
        Q_new = R + mdp.gamma * P @ Q.max(axis=1)
        if np.max(np.abs(Q_new - Q)) <= threshold:
            return Q_new
        Q = Q_new
    raise RuntimeError(f"value iteration did not reach tol={tol} in {max_iters} iterations")
