"""Training pairs and flow-matching losses for inverse design: Diag-CFM's zero-anchoring and standard CFM.

Paper: de Campos, Krebs, Gottschalk, "Generative Inverse Design with Abstention via Diagonal Flow Matching"
(ICML 2026, arXiv 2603.15925). No code was published; the state layout and time convention below are the
zoo's RECONSTRUCTION from the abstract (arXiv 2603.15925), kept in these few functions so they can be swapped.

Data: designs x [B, P], labels y [B, L] (both standardised), noise eps [B, P].

Diag-CFM ("diag"), state z = (design block [P], label block [L]) of size P + L:
    z0 = (eps, y)   at t = 0 (the label side),   z1 = (x, 0_L)   at t = 1 (the design side).
Every coordinate has its own partner (x_i with eps_i, y_l with 0), so permuting design coordinates permutes
the pairs and nothing else.

Standard CFM for inverse problems ("standard"), state of size P (needs L <= P):
    z0 = (y, eps[:, :P - L])   at t = 0,   z1 = x   at t = 1.
The labels sit in the first L coordinates, so which design coordinates they are paired with depends on the
ordering of the design vector.

Both regress v(z_t, t) on u = z1 - z0 along z_t = (1 - t) z0 + t z1 with t ~ U[0, 1].
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

__all__ = ["PAIRINGS", "Velocity", "check_designs_and_labels", "flow_matching_loss", "interpolate", "make_pairs",
           "pairing_loss", "state_dim"]

PAIRINGS = ("diag", "standard")
# A velocity field: z [B, D], t [B] -> v [B, D].
Velocity = Callable[[jax.Array, jax.Array], jax.Array]


def check_pairing(pairing: str) -> None:
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {list(PAIRINGS)}, got {pairing!r}")


def check_designs_and_labels(x: jax.Array, y: jax.Array, pairing: str = "diag") -> tuple[int, int]:
    """(P, L) of designs x [B, P] and labels y [B, L]; ValueError naming x or y for any other shape, and for
    standard CFM (which hides y inside the design vector) L > P."""
    check_pairing(pairing)
    if jnp.ndim(x) != 2 or x.shape[1] < 1:
        raise ValueError(f"x must be designs of shape [B, P] with P >= 1, got shape {jnp.shape(x)}")
    if jnp.ndim(y) != 2 or y.shape[1] < 1 or y.shape[0] != x.shape[0]:
        raise ValueError(f"y must be labels of shape [B, L] with L >= 1 and B = {x.shape[0]} (the rows of x), "
                         f"got shape {jnp.shape(y)}")
    p, n_labels = x.shape[1], y.shape[1]
    if pairing == "standard" and n_labels > p:
        raise ValueError(f"y has L = {n_labels} labels but standard CFM places them inside the P = {p} design "
                         f"coordinates, so it needs L <= P")
    return p, n_labels


def state_dim(p: int, n_labels: int, pairing: str) -> int:
    """The size of the flow's state: P + L for Diag-CFM, P for standard CFM."""
    check_pairing(pairing)
    return p + n_labels if pairing == "diag" else p


def make_pairs(x: jax.Array, y: jax.Array, eps: jax.Array, pairing: str) -> tuple[jax.Array, jax.Array]:
    """The endpoints (z0, z1), each [B, D], of `pairing` for designs x [B, P], labels y [B, L], noise eps [B, P]."""
    p, _ = check_designs_and_labels(x, y, pairing)
    if jnp.shape(eps) != x.shape:
        raise ValueError(f"eps must be noise of the designs' shape {x.shape}, got shape {jnp.shape(eps)}")
    if pairing == "diag":
        z0 = jnp.concatenate([eps, y], axis=1)
        z1 = jnp.concatenate([x, jnp.zeros_like(y)], axis=1)
        return z0, z1
    z0 = jnp.concatenate([y, eps[:, : p - y.shape[1]]], axis=1)
    return z0, x


def interpolate(z0: jax.Array, z1: jax.Array, t: jax.Array) -> jax.Array:
    """z_t = (1 - t) z0 + t z1 [B, D] for t [B]."""
    t = t[:, None]
    return (1 - t) * z0 + t * z1


def flow_matching_loss(velocity: Velocity, z0: jax.Array, z1: jax.Array, t: jax.Array) -> jax.Array:
    """Mean over the batch of ||v(z_t, t) - (z1 - z0)||^2 (summed over the D coordinates); scalar."""
    if z0.shape != z1.shape or z0.ndim != 2:
        raise ValueError(f"z0 and z1 must share one shape [B, D], got {z0.shape} and {z1.shape}")
    if jnp.shape(t) != (z0.shape[0],):
        raise ValueError(f"t must hold one time per row, shape ({z0.shape[0]},), got shape {jnp.shape(t)}")
    residual = velocity(interpolate(z0, z1, t), t) - (z1 - z0)
    return jnp.mean(jnp.sum(residual**2, axis=1))


def pairing_loss(velocity: Velocity, x: jax.Array, y: jax.Array, key: jax.Array, pairing: str) -> jax.Array:
    """The CFM loss of `pairing` on one batch, with eps ~ N(0, I) and t ~ U[0, 1] drawn from `key`."""
    noise_key, time_key = jax.random.split(key)
    eps = jax.random.normal(noise_key, x.shape, x.dtype)
    t = jax.random.uniform(time_key, (x.shape[0],), x.dtype)
    z0, z1 = make_pairs(x, y, eps, pairing)
    return flow_matching_loss(velocity, z0, z1, t)
