"""The observation model y = H x + η, η ~ N(0, diag(noise_var)), as a pytree (it passes through `jax.jit`)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_float_array

__all__ = ["LinearObservation", "linear_observation"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LinearObservation:
    """y = H x + η with H `matrix` [M, D] and independent noise of variances `noise_var` [M].

    Build it with `linear_observation`, which checks the shapes (the dataclass itself does not, so that
    `jax.jit` can rebuild it from traced leaves).
    """

    matrix: jax.Array
    noise_var: jax.Array

    def apply(self, x: jax.Array) -> jax.Array:
        """x [N, D] -> H x [N, M]."""
        return x @ self.matrix.T

    def log_likelihood(self, x: jax.Array, y: jax.Array, extra_var: jax.Array | float = 0.0) -> jax.Array:
        """log N(y; H x, diag(noise_var) + extra_var · I) per particle: x [N, D], y [M] -> [N].

        `extra_var` (a scalar) is the DPS-style inflation r_k² of the guidance ĥ_k.
        """
        var = self.noise_var + extra_var
        residual = y - self.apply(x)
        return -0.5 * jnp.sum(residual**2 / var + jnp.log(2 * math.pi * var), axis=-1)

    def sample(self, key: jax.Array, x: jax.Array) -> jax.Array:
        """A noisy observation of each state: x [..., D] -> y [..., M]."""
        mean = x @ self.matrix.T
        return mean + jnp.sqrt(self.noise_var) * jax.random.normal(key, mean.shape, mean.dtype)


def linear_observation(matrix: np.ndarray | jax.Array, noise_var: np.ndarray | jax.Array) -> LinearObservation:
    """A checked `LinearObservation`: matrix [M, D] float, noise_var [M] float and positive."""
    rows, _ = check_float_array("matrix", jnp.asarray(matrix), (None, None), "[M, D]")
    check_float_array("noise_var", jnp.asarray(noise_var), (rows,), "[M]")
    if not bool(jnp.all(jnp.asarray(noise_var) > 0)):
        raise ValueError(f"noise_var must be positive everywhere, got {np.asarray(noise_var)}")
    return LinearObservation(jnp.asarray(matrix, jnp.float32), jnp.asarray(noise_var, jnp.float32))
