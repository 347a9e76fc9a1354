"""Inverse design with a trained flow: sampling designs for target labels, the model's own forward prediction,
and the uncertainty scores Zero-Deviation and Self-Consistency (arXiv 2603.15925; the metric definitions are the
zoo's RECONSTRUCTION from the paper's abstract).

All scores are root-mean-square over the L labels, per row, so they read in standardised label units:
    Zero-Deviation    ZD = ||r||_2 / sqrt(L),            r = label block at t = 1 after sampling (Diag-CFM only)
    Self-Consistency  SC = ||y_hat(x_hat) - y*||_2 / sqrt(L), y_hat = the model's backward integration from x_hat
    round trip        RT = ||s(x_hat) - y*||_2 / sqrt(L),  s = the true simulator (the paper's evaluation)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.flows.ode import integrate
from icml26zoo.flows.pairs import Velocity, check_designs_and_labels, check_pairing
from icml26zoo.validation import check_int

__all__ = ["predict_labels", "rms_distance", "sample_designs", "surrogate_labels", "zero_deviation"]


def sample_designs(velocity: Velocity, y_target: jax.Array, eps: jax.Array, pairing: str, *, steps: int = 100,
                   solver: str = "heun", t_end: float = 1.0) -> tuple[jax.Array, jax.Array | None]:
    """Designs x_hat [B, P] for targets y_target [B, L] from noise eps [B, P], and Diag-CFM's label residual
    r [B, L] (None for standard CFM), integrating from t = 0 to `t_end` (below 1 only for a field that is
    singular at t = 1, such as the exact one)."""
    p, n_labels = check_designs_and_labels(eps, y_target, pairing)
    if pairing == "diag":
        z = integrate(velocity, jnp.concatenate([eps, y_target], axis=1), t0=0.0, t1=t_end, steps=steps,
                      solver=solver)
        return z[:, :p], z[:, p:]
    start = jnp.concatenate([y_target, eps[:, : p - n_labels]], axis=1)
    return integrate(velocity, start, t0=0.0, t1=t_end, steps=steps, solver=solver), None


def predict_labels(velocity: Velocity, x: jax.Array, num_labels: int, pairing: str, *, steps: int = 100,
                   solver: str = "heun", t_start: float = 1.0) -> jax.Array:
    """The model's forward prediction y_hat [B, L] for designs x [B, P]: integrate backwards from the design
    end (Diag-CFM: (x, 0); standard CFM: x) at `t_start` to t = 0 and read the label coordinates."""
    check_pairing(pairing)
    check_int("num_labels", num_labels)
    if jnp.ndim(x) != 2:
        raise ValueError(f"x must be designs of shape [B, P], got shape {jnp.shape(x)}")
    p = x.shape[1]
    if pairing == "diag":
        start = jnp.concatenate([x, jnp.zeros((x.shape[0], num_labels), x.dtype)], axis=1)
        return integrate(velocity, start, t0=t_start, t1=0.0, steps=steps, solver=solver)[:, p:]
    if num_labels > p:
        raise ValueError(f"num_labels = {num_labels} exceeds the P = {p} design coordinates standard CFM has")
    return integrate(velocity, x, t0=t_start, t1=0.0, steps=steps, solver=solver)[:, :num_labels]


def surrogate_labels(velocity: Velocity, x: jax.Array, num_labels: int) -> jax.Array:
    """Diag-CFM's one-evaluation forward prediction -v((x, 0), 1)_label [B, L]: at t = 1 the exact label velocity
    is -E[y | x], so the network has to learn the forward map there."""
    check_int("num_labels", num_labels)
    if jnp.ndim(x) != 2:
        raise ValueError(f"x must be designs of shape [B, P], got shape {jnp.shape(x)}")
    rows, p = x.shape
    z = jnp.concatenate([x, jnp.zeros((rows, num_labels), x.dtype)], axis=1)
    return -velocity(z, jnp.ones((rows,), x.dtype))[:, p:]


def rms_distance(a: jax.Array, b: jax.Array) -> jax.Array:
    """||a - b||_2 / sqrt(L) per row [B] of a, b [B, L]: SC (a = y_hat), the round-trip error (a = s(x_hat))."""
    if jnp.ndim(a) != 2 or jnp.shape(a) != jnp.shape(b):
        raise ValueError(f"a and b must be labels of one shape [B, L], got {jnp.shape(a)} and {jnp.shape(b)}")
    return jnp.sqrt(jnp.mean((a - b) ** 2, axis=1))


def zero_deviation(residual: jax.Array) -> jax.Array:
    """Zero-Deviation ||r||_2 / sqrt(L) [B] of the label residual r [B, L] left after sampling."""
    if jnp.ndim(residual) != 2:
        raise ValueError(f"residual must have shape [B, L], got shape {jnp.shape(residual)}")
    return rms_distance(residual, jnp.zeros_like(residual))
